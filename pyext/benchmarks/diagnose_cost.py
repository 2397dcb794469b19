"""What one Diagnose call (mtctl doctor) costs: the call timed in a
process with N waiting tasks (half on timers, half on queues of their own)
and H extra objects on the heap, medians over repeats.

    bazel run -c opt //pyext:diagnose_cost -- --tasks 1000 10000 --heap 0 300000

Each cell runs in a fresh process (the heap it measures is its own)."""

import argparse
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import statistics, sys, time
import mt_asyncio, mt_asyncio.asyncio as asyncio
from mt_asyncio import _admin, diagnose  # diagnose answers Diagnose.
tasks, heap, repeats = map(int, sys.argv[1:4])
junk = [{"k": i, "v": [i]} for i in range(heap)]

async def waiter(queue):
    await queue.get()

async def main():
    queues = [asyncio.Queue() for _ in range(tasks // 2)]
    pending = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(tasks - len(queues))]
    pending += [asyncio.create_task(waiter(q)) for q in queues]
    await asyncio.sleep(0.5)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await asyncio.to_thread(_admin.call, "Diagnose", spin_window_seconds=0.01)
        times.append(time.perf_counter() - start - 0.01)
    for task in pending:
        task.cancel()
    print(statistics.median(times))

mt_asyncio.start_runtime(2)
asyncio.run(main())
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--heap", type=int, nargs="+", default=[0, 300000],
                        help="extra dicts on the heap (each with a list: 3 objects)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    print("| waiting tasks | extra objects | Diagnose call, median |")
    print("|---|---|---|")
    for tasks in args.tasks:
        for heap in args.heap:
            out = subprocess.run([sys.executable, "-c", _CHILD, str(tasks), str(heap),
                                  str(args.repeats)], capture_output=True, text=True,
                                 check=True, timeout=600, env=env).stdout
            print(f"| {tasks:,} | {heap * 3:,} | {float(out) * 1e3:.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
