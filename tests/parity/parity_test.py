"""Runs every scenario on stdlib asyncio and on mt_asyncio (1 and N worker
threads) and compares the observations."""

import gc
import os
import sys
import time

import pytest

# Scenario modules sit beside this file (the runner imports test files in
# importlib mode, which does not add their folder to sys.path).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import watchdog  # noqa: E402
import scenarios_combinators  # noqa: E402,F401 - registers scenarios.
import scenarios_core  # noqa: E402,F401
import scenarios_eager  # noqa: E402,F401
import scenarios_errors  # noqa: E402,F401
import scenarios_futures  # noqa: E402,F401
import scenarios_graph  # noqa: E402,F401
import scenarios_groups  # noqa: E402,F401
import scenarios_locks  # noqa: E402,F401
import scenarios_more  # noqa: E402,F401
import scenarios_net_context  # noqa: E402,F401
import scenarios_net_datagram  # noqa: E402,F401
import scenarios_net_protocols  # noqa: E402,F401
import scenarios_net_sockets  # noqa: E402,F401
import scenarios_net_streams  # noqa: E402,F401
import scenarios_net_tls  # noqa: E402,F401
import scenarios_pipes  # noqa: E402,F401
import scenarios_queues  # noqa: E402,F401
import scenarios_signals  # noqa: E402,F401
import scenarios_subprocess  # noqa: E402,F401
import scenarios_tasks  # noqa: E402,F401
import scenarios_timers  # noqa: E402,F401

N_THREADS = int(os.environ.get("MT_PARITY_THREADS", "4"))
# Modules whose scenarios open descriptors: each run must close them all.
NET_MODULES = {"scenarios_net_context", "scenarios_net_datagram",
               "scenarios_net_protocols", "scenarios_net_sockets",
               "scenarios_net_streams",
               "scenarios_net_tls", "scenarios_pipes", "scenarios_signals",
               "scenarios_subprocess"}
ROUNDS = int(os.environ.get("MT_PARITY_ROUNDS", "1"))
# Modules whose runs start child processes (hundreds in one scenario): the
# stress job repeats them at most this often, to stay within its time.
CHILD_MODULES = {"scenarios_subprocess"}
CHILD_ROUNDS = 5
# One run takes well under a second; a run this long is hung (see
# watchdog.py), and is reported as such at once.
RUN_DEADLINE_S = 120
NAMES = sorted(harness.SCENARIOS)
# (scenario, workers) pairs whose observations matched stdlib's.
COMPARED = set()


@pytest.mark.parametrize("threads", [1, N_THREADS], ids=lambda n: f"mt@{n}")
@pytest.mark.parametrize("name", NAMES)
def test_parity(name, threads):
    fn = harness.SCENARIOS[name]
    min_python = getattr(fn, "min_python", None)
    if min_python and sys.version_info < min_python:
        pytest.skip(getattr(fn, "skip_reason", None) or
                    f"stdlib's API for this scenario needs Python "
                    f"{'.'.join(map(str, min_python))}+")
    expected = harness.run_stdlib(fn)
    network = fn.__module__ in NET_MODULES
    rounds = min(ROUNDS, CHILD_ROUNDS) if fn.__module__ in CHILD_MODULES else ROUNDS
    for _ in range(rounds):
        before = _open_fds() if network else None
        with watchdog.Deadline(RUN_DEADLINE_S, f"{name} @{threads}"):
            observed = harness.run_mt(fn, threads)
        assert observed == expected
        COMPARED.add((name, threads))
        if network:
            # Every socket a scenario opened is closed by the time run()
            # returns (closing is done in connection_lost, on a worker:
            # allow it a moment, bounded).
            assert _settled_fds(before) == before
            # And every child it started was reaped: none left, running or
            # a zombie.
            assert _children() == []


def _children():
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found += f.read().split()
        except FileNotFoundError:
            pass  # A thread that ended meanwhile (a stand-in worker, say).
    return found


def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def _settled_fds(before, timeout=3.0):
    # A socket whose last owner sits in a reference cycle (a StreamWriter a
    # handler dropped) closes when the collector runs, on either backend:
    # collect, so only a descriptor nothing refers to any more counts.
    gc.collect()
    deadline = time.monotonic() + timeout
    now = _open_fds()
    while now != before and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
        now = _open_fds()
    return now


def test_scenario_count(capsys):
    # Runs after every test_parity case (pytest keeps file order): counts
    # the scenarios that ran on both backends and compared equal, not the
    # ones registered.
    compared = {name for name, _ in COMPARED}
    both = {name for name in compared
            if (name, 1) in COMPARED and (name, N_THREADS) in COMPARED}
    with capsys.disabled():
        print(f"\nparity scenarios: {len(NAMES)} registered, {len(both)} ran and "
              f"compared equal with stdlib on mt_asyncio at 1 and {N_THREADS} "
              f"workers, {ROUNDS} round(s)")
    if not COMPARED:
        pytest.skip("test_parity was not selected")
    # Every scenario this interpreter can run (some need a newer stdlib).
    runnable = [name for name in NAMES
                if sys.version_info >= (getattr(harness.SCENARIOS[name],
                                                "min_python", None) or (0,))]
    assert both == set(runnable)
    assert len(both) >= 380
