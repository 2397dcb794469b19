"""Workloads from BENCHMARKS.md, written once for every backend.

A workload is a function ``(aio, n_tasks_scale) -> list of coroutine
factories``: each factory returns one top-level coroutine. The backend
decides where those coroutines run (one loop, one loop per thread, or the
parallel loop), so the work itself is identical everywhere.
"""

# The CPU kernel: a pure-Python integer loop (an LCG step per iteration).
#
# The three constants are made per call on purpose. CPython 3.14t does not
# immortalize the constants of code compiled by builtin compile(), which is
# how imported modules are compiled, so a literal here would be one shared
# int object whose refcount every thread bumps on every iteration; default
# arguments are shared the same way. Measured on 2 cores: two threads ran
# two calls 1.33x faster than one thread with shared constants, 1.68x with
# per-call ones. The kernel must measure CPU work, not that contention
# (docs/benchmarks.md).
def burn(iterations):
    mul, add, mask = int("1664525"), int("1013904223"), int("4294967295")
    v = 0
    for i in range(iterations):
        v = (v * mul + add + i) & mask
    return v


def mixed(aio, scale):
    """32 tasks x 4 steps; each step yields with sleep(0), then burns CPU."""
    tasks, steps = 32, 4
    iterations = max(1, int(1_500_000 * scale))

    async def one_task():
        acc = 0
        for _ in range(steps):
            await aio.sleep(0)
            acc ^= burn(iterations)
        return acc

    return [one_task for _ in range(tasks)]


def one_million(aio, scale):
    """1,000,000 trivial coroutines created and run to completion."""
    count = max(1, int(1_000_000 * scale))

    async def trivial():
        return None

    return [trivial] * count


WORKLOADS = {
    "mixed": mixed,
    "one_million": one_million,
}
