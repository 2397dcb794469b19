"""`bench --quick` runs every cell and prints the table."""

import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "benchmarks", "bench.py")


CPU_WORKLOADS = ["mixed", "one_million", "churn", "fanout_gather", "fanout_taskgroup",
                 "queue_pipeline", "lock_contention", "semaphore_bounded",
                 "wait_for_overhead", "timer_sleep", "cancel_heavy", "executor_offload",
                 "block_inline", "block_offload"]
NET_WORKLOADS = ["echo_protocol_1k", "http_cpu", "idle_conns"]


def test_quick_run_prints_table_and_json(tmp_path):
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        # The test build of the extension is not optimized: allowed here,
        # the numbers are not the point.
        [sys.executable, BENCH, "--quick", "--scale", "0.002", "--allow-unoptimized",
         "--json", str(out_json), "--workloads", *CPU_WORKLOADS, *NET_WORKLOADS],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("workload"))
    assert header.split()[:3] == ["workload", "backend", "threads"]
    data = json.loads(out_json.read_text())
    cells = {(r["backend"], r["threads"]) for r in data["rows"] if r["workload"] == "mixed"}
    assert cells == {("asyncio", 1), ("asyncio-multiloop", 1), ("asyncio-multiloop", 2),
                     ("mt_asyncio", 1), ("mt_asyncio", 2)}
    workloads = {r["workload"] for r in data["rows"]}
    assert set(CPU_WORKLOADS) <= workloads
    # The network rows: every workload on every server backend found here,
    # each with a measurement from a load generator in its own process.
    net_cells = {(r["workload"], r["backend"], r["threads"]) for r in data["net_rows"]}
    for w in NET_WORKLOADS:
        for cell in [("asyncio", 1), ("asyncio-multiloop", 1), ("asyncio-multiloop", 2),
                     ("mt_asyncio", 1), ("mt_asyncio", 2)]:
            assert (w, *cell) in net_cells
    for row in data["net_rows"]:
        assert len(row["values"]) == 2 and all(v > 0 for v in row["values"])
        if row["workload"] == "http_cpu":
            assert sum(row["balance"]) > 0  # Requests per serving thread.
    assert "network (server in its own process" in proc.stdout
    top_level = {"mixed": 32, "one_million": 2000}  # At --scale 0.002.
    for row in data["rows"]:
        assert len(row["times"]) == 2 and all(t > 0 for t in row["times"])
        if row["workload"] in top_level:
            assert row["coroutines"] == top_level[row["workload"]]
        if row["backend"] == "mt_asyncio":
            # Units run per worker: at least one step per top-level coroutine.
            assert sum(row["balance"]) >= row["coroutines"]
        else:
            # Top-level coroutines per loop: each ran exactly once.
            assert sum(row["balance"]) == row["coroutines"]


def test_bad_arguments_are_refused():
    proc = subprocess.run([sys.executable, BENCH, "--threads", "0"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "must be positive" in proc.stderr



def test_watched_rows_run_with_a_live_watch_client(tmp_path):
    # mt_asyncio+watch: the control plane served and `mtctl watch` at 10 Hz
    # during the run; the cell fails if the client got no updates.
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, BENCH, "--quick", "--scale", "0.002", "--allow-unoptimized",
         "--json", str(out_json), "--workloads", "mixed",
         "--backends", "asyncio", "mt_asyncio+watch", "--threads", "2"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out_json.read_text())
    assert {r["backend"] for r in data["rows"]} == {"asyncio", "mt_asyncio+watch"}


def test_db_rows_run_against_a_private_server_or_say_why_not(tmp_path):
    # db_http: a PostgreSQL-backed handler (query, CPU work, reply); the
    # driver starts the private cluster for it and stops it after.
    out_json = tmp_path / "bench.json"
    clusters_before = _cluster_dirs()
    proc = subprocess.run(
        [sys.executable, BENCH, "--quick", "--scale", "0.02", "--allow-unoptimized",
         "--json", str(out_json), "--workloads", "db_http"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out_json.read_text())
    if "skipped db_http:" in proc.stdout:
        assert data["net_rows"] == []
        pytest.skip(proc.stdout.split("skipped db_http:")[1].splitlines()[0].strip())
    cells = {(r["backend"], r["threads"]) for r in data["net_rows"]}
    assert {("asyncio", 1), ("asyncio-multiloop", 2), ("mt_asyncio", 1),
            ("mt_asyncio", 2)} <= cells
    assert ("seed", 1) not in cells  # No driver in the seed's venv.
    for row in data["net_rows"]:
        assert len(row["values"]) == 2 and all(v > 0 for v in row["values"])
        assert sum(row["balance"]) == 32 * 4  # Every request served once.
    assert _cluster_dirs() <= clusters_before  # The cluster was removed.


def _cluster_dirs():
    return {d for d in os.listdir("/tmp") if d.startswith("mt_pg_")}
