"""`bench --quick` runs every cell and prints the table."""

import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "benchmarks", "bench.py")


def test_quick_run_prints_table_and_json(tmp_path):
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, BENCH, "--quick", "--scale", "0.002", "--json", str(out_json)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "workload  backend" in proc.stdout
    assert "asyncio-multiloop  2" in proc.stdout
    data = json.loads(out_json.read_text())
    cells = {(r["backend"], r["threads"]) for r in data["rows"]}
    assert cells == {("asyncio", 1), ("asyncio-multiloop", 1), ("asyncio-multiloop", 2)}
    for row in data["rows"]:
        assert len(row["times"]) == 2 and all(t > 0 for t in row["times"])
        assert sum(row["balance"]) == 32  # Every task of `mixed` ran once.


def test_bad_arguments_are_refused():
    proc = subprocess.run([sys.executable, BENCH, "--threads", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "must be positive" in proc.stderr

