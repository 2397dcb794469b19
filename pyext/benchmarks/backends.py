"""Backends: where a workload's top-level coroutines run.

Each backend is ``run(factories, threads) -> per_thread_counts``: it runs
every coroutine to completion and returns how the work spread over its
threads (the balance column of the report): top-level coroutines per loop
for stdlib backends, units run per worker for mt_asyncio.
"""

import asyncio
import threading


def _run_on_one_loop(aio, factories):
    async def main():
        await aio.gather(*(f(aio) for f in factories))
    aio.run(main())


def run_asyncio(factories, threads):
    """stdlib asyncio: one loop on the calling thread (threads must be 1)."""
    if threads != 1:
        raise ValueError("the asyncio backend runs one loop; threads must be 1")
    _run_on_one_loop(asyncio, factories)
    return [len(factories)]


def run_asyncio_multiloop(factories, threads):
    """stdlib asyncio, one loop per thread, coroutines partitioned up front."""
    shares = [factories[i::threads] for i in range(threads)]
    errors = []

    def worker(share):
        try:
            _run_on_one_loop(asyncio, share)
        except BaseException as exc:  # Reported after join, not swallowed.
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(s,)) for s in shares]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return [len(s) for s in shares]


def _units_run_per_worker():
    import mt_asyncio
    return {w["index"]: w["units_run"] for w in mt_asyncio.runtime_info()["workers"]}


def run_mt_asyncio(factories, threads):
    """mt_asyncio's parallel loop: one loop, every coroutine a Task stepped
    on the runtime's `threads` workers.

    The coroutines run exactly as on the other backends (no wrapper that
    would cost only this backend); balance is how many runtime units
    (task steps and callbacks) each worker ran, from the runtime's own
    per-worker counters.
    """
    import mt_asyncio.asyncio as aio

    async def main():
        await aio.gather(*(f(aio) for f in factories))

    before = _units_run_per_worker()
    aio.run(main(), threads=threads)
    after = _units_run_per_worker()
    counts = [n - before.get(i, 0) for i, n in after.items()]
    return sorted(counts, reverse=True)


BACKENDS = {
    "asyncio": run_asyncio,
    "asyncio-multiloop": run_asyncio_multiloop,
    "mt_asyncio": run_mt_asyncio,
}

SINGLE_THREADED = {"asyncio"}

# Backends that run on mt_asyncio._core; the driver refuses to measure them
# on a debug or sanitizer build of the extension.
USES_EXTENSION = {"mt_asyncio"}
