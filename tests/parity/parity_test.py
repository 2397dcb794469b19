"""Runs every scenario on stdlib asyncio and on mt_asyncio (1 and N worker
threads) and compares the observations."""

import os
import sys

import pytest

# Scenario modules sit beside this file (the runner imports test files in
# importlib mode, which does not add their folder to sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import scenarios_combinators  # noqa: E402,F401 - registers scenarios.
import scenarios_core  # noqa: E402,F401
import scenarios_eager  # noqa: E402,F401
import scenarios_errors  # noqa: E402,F401
import scenarios_futures  # noqa: E402,F401
import scenarios_graph  # noqa: E402,F401
import scenarios_groups  # noqa: E402,F401
import scenarios_locks  # noqa: E402,F401
import scenarios_more  # noqa: E402,F401
import scenarios_queues  # noqa: E402,F401
import scenarios_tasks  # noqa: E402,F401

N_THREADS = int(os.environ.get("MT_PARITY_THREADS", "4"))
ROUNDS = int(os.environ.get("MT_PARITY_ROUNDS", "1"))
NAMES = sorted(harness.SCENARIOS)


@pytest.mark.parametrize("threads", [1, N_THREADS], ids=lambda n: f"mt@{n}")
@pytest.mark.parametrize("name", NAMES)
def test_parity(name, threads):
    fn = harness.SCENARIOS[name]
    min_python = getattr(fn, "min_python", None)
    if min_python and sys.version_info < min_python:
        pytest.skip(f"stdlib's API for this scenario needs Python "
                    f"{'.'.join(map(str, min_python))}+")
    expected = harness.run_stdlib(fn)
    for _ in range(ROUNDS):
        assert harness.run_mt(fn, threads) == expected


def test_scenario_count(capsys):
    # The suite says how big it is (the issue asks for the count), past
    # pytest's output capture; pytest's summary gives the pass count.
    with capsys.disabled():
        print(f"\nparity scenarios: {len(NAMES)}, each compared with stdlib "
              f"on mt_asyncio at 1 and {N_THREADS} workers, {ROUNDS} round(s)")
    assert len(NAMES) >= 250
