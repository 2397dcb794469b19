"""Workloads from BENCHMARKS.md, written once for every backend.

A workload is a function ``(aio, n_tasks_scale) -> list of coroutine
factories``: each factory returns one top-level coroutine. The backend
decides where those coroutines run (one loop, one loop per thread, or the
parallel loop), so the work itself is identical everywhere.
"""

# The CPU kernel: a pure-Python integer loop (an LCG step per iteration).
#
# The constants are bound to locals on purpose. On 3.14t the constants of a
# function in an imported module are not immortal, so every iteration would
# incref and decref the same three int objects from every thread; that
# cross-core refcount traffic (measured: 2 threads no faster than 1) would
# swamp what the benchmark is about. Locals are read without refcounting.
def burn(iterations, mul=1664525, add=1013904223, mask=0xFFFFFFFF):
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


WORKLOADS = {
    "mixed": mixed,
}
