"""One benchmark cell in this process: ``cell.py '[backend, workload,
threads, scale]'`` runs the workload once to warm up and once timed, and
prints the result as one line of JSON.

The driver (bench.py) starts one such process per cell and round. This
script imports only what the cell needs, so a cell's process start is
mostly the interpreter's and its backend's own.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backends  # noqa: E402
import workloads  # noqa: E402


def gil_enabled():
    return bool(getattr(sys, "_is_gil_enabled", lambda: True)())


def run_cell(backend, workload, threads, scale):
    run = backends.BACKENDS[backend]
    make = workloads.WORKLOADS[workload]
    run(make(scale), threads)  # Warm-up.
    factories = make(scale)
    start = time.perf_counter()
    balance = run(factories, threads)
    elapsed = time.perf_counter() - start
    if isinstance(balance, backends.Timed):
        balance, elapsed = balance.balance, balance.elapsed
    result = {"time": elapsed, "balance": balance, "coroutines": len(factories),
              "gil_enabled_after": gil_enabled()}
    if backends.WORKER_PROFILE is not None:
        result["workers"] = backends.WORKER_PROFILE
    return result


if __name__ == "__main__":
    print(json.dumps(run_cell(*json.loads(sys.argv[1]))))
