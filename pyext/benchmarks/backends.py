"""Backends: where a workload's top-level coroutines run.

Each backend is ``run(factories, threads) -> per_thread_counts``: it runs
every coroutine to completion and returns how the work spread over its
threads (the balance column of the report): top-level coroutines per loop
for stdlib backends, units run per worker for mt_asyncio.
"""

import asyncio
import importlib
import threading


def _run_on_one_loop(aio, factories, loop_factory=None):
    async def main():
        await aio.gather(*(f(aio) for f in factories))
    if loop_factory is None:
        aio.run(main())
    else:
        with aio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())


def _on_loops_per_thread(factories, threads, loop_factory=None):
    """One loop per thread (`loop_factory`'s, or stdlib's), the top-level
    coroutines partitioned up front."""
    shares = [factories[i::threads] for i in range(threads)]
    errors = []

    def worker(share):
        try:
            _run_on_one_loop(asyncio, share, loop_factory)
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


def run_asyncio(factories, threads):
    """stdlib asyncio: one loop on the calling thread (threads must be 1)."""
    if threads != 1:
        raise ValueError("the asyncio backend runs one loop; threads must be 1")
    _run_on_one_loop(asyncio, factories)
    return [len(factories)]


def run_asyncio_multiloop(factories, threads):
    """stdlib asyncio, one loop per thread, coroutines partitioned up front."""
    return _on_loops_per_thread(factories, threads)


def _peer_loop_backends(module_name, what):
    """The two backends of an asyncio event loop from another package
    (its `new_event_loop`): one loop, and one loop per thread with the
    coroutines partitioned up front, as asyncio-multiloop."""
    def loop_factory():
        return importlib.import_module(module_name).new_event_loop

    def one_loop(factories, threads):
        if threads != 1:
            raise ValueError(f"the {module_name} backend runs one loop; threads must be 1")
        _run_on_one_loop(asyncio, factories, loop_factory())
        return [len(factories)]

    def loop_per_thread(factories, threads):
        return _on_loops_per_thread(factories, threads, loop_factory())

    one_loop.__doc__ = f"{what}: one loop (threads must be 1)."
    loop_per_thread.__doc__ = f"One {module_name} loop per thread, coroutines partitioned up front."
    return one_loop, loop_per_thread


run_uvloop, run_uvloop_multiloop = _peer_loop_backends("uvloop", "uvloop")
run_rloop, run_rloop_multiloop = _peer_loop_backends(
    "rloop", "rloop (a Rust event loop for asyncio)")


class _TonioNames:
    """The asyncio names a workload uses, from tonio's own API (its
    async/await flavour, tonio.colored): sleep (yield_now for 0), gather
    (spawn, which joins and returns the results in order), Lock and
    Semaphore. A workload that needs anything else (create_task, TaskGroup,
    Queue, Event, wait_for, to_thread, cancellation) is not expressible:
    the cell fails, saying which name."""

    def __init__(self):
        import tonio.colored
        import tonio.colored.sync
        self._tonio = tonio.colored
        self.Lock = tonio.colored.sync.Lock
        self.Semaphore = tonio.colored.sync.Semaphore

    def sleep(self, delay):
        return self._tonio.sleep(delay) if delay else self._tonio.yield_now()

    async def gather(self, *coros):
        return await self._tonio.spawn(*coros)

    def __getattr__(self, name):
        raise NotImplementedError(
            f"not expressible with tonio's API: the workload uses asyncio.{name}")


_tonio_runtime = []


def run_tonio(factories, threads):
    """tonio (Rust runtime with its own API, not asyncio's): its runtime
    with `threads` workers, made once per process (the warm-up run makes
    it), and every top-level coroutine spawned on it (_TonioNames)."""
    import tonio
    if not _tonio_runtime:
        _tonio_runtime.append(tonio.runtime(threads=threads, context=True))
    aio = _TonioNames()

    async def main():
        await aio.gather(*(f(aio) for f in factories))
    try:
        _tonio_runtime[0].run_until_complete(main())
    except ExceptionGroup as group:  # spawn's: say what the first child hit.
        first = group
        while isinstance(first, ExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [len(factories)]


_pypi_runtime_started = []


def run_pypi_mt_asyncio(factories, threads):
    """PyPI's mt-asyncio 0.3.0a1 (Rust), run by its
    venv's interpreter: its runtime with `threads` workers, then its
    `mt_asyncio.asyncio.run()` (one loop, tasks on those workers)."""
    import mt_asyncio
    if not _pypi_runtime_started:
        # Once per process (its runtime cannot be made again): the warm-up
        # run starts it, so the counted run finds it running, as ours does.
        mt_asyncio.runtime(threads=threads, context=True)
        _pypi_runtime_started.append(threads)
    import mt_asyncio.asyncio as aio

    async def main():
        await aio.gather(*(f(aio) for f in factories))
    aio.run(main())
    return [len(factories)]


# What each worker did in the last run_mt_asyncio() call, from the
# runtime's own per-worker counters: units run, busy seconds, parks and
# steals (the bench's --workers table).
WORKER_PROFILE = None
_PROFILED = ("units_run", "busy_ns", "parks", "steals")


def _worker_counters():
    import mt_asyncio
    return {w["index"]: {k: w[k] for k in _PROFILED}
            for w in mt_asyncio.runtime_info()["workers"]}


def run_mt_asyncio(factories, threads):
    """mt_asyncio's parallel loop: one loop, every coroutine a Task stepped
    on the runtime's `threads` workers.

    The coroutines run exactly as on the other backends (no wrapper that
    would cost only this backend); balance is how many runtime units
    (task steps and callbacks) each worker ran, from the runtime's own
    per-worker counters.
    """
    global WORKER_PROFILE
    import time

    import mt_asyncio.asyncio as aio

    async def main():
        await aio.gather(*(f(aio) for f in factories))

    before = _worker_counters()
    start = time.perf_counter()
    aio.run(main(), threads=threads)
    elapsed = time.perf_counter() - start
    after = _worker_counters()
    zero = dict.fromkeys(_PROFILED, 0)
    WORKER_PROFILE = [
        {"elapsed": elapsed,
         **{k: n[k] - before.get(i, zero)[k] for k in _PROFILED}}
        for i, n in sorted(after.items())]
    return sorted((w["units_run"] for w in WORKER_PROFILE), reverse=True)


def run_mt_asyncio_ssl(factories, threads):
    """mt_asyncio with TLS through the ssl module (asyncio's sslproto over
    our transports) instead of the native engine: the TLS workloads'
    comparison row."""
    import workloads
    workloads.TLS_PATH = "ssl"
    return run_mt_asyncio(factories, threads)


class Timed:
    """A backend's result that carries its own timing of the workload
    (when the backend does setup the cell must not count)."""

    def __init__(self, balance, elapsed):
        self.balance = balance
        self.elapsed = elapsed


def _mtctl():
    # Under `bazel run` mtctl sits in the runfiles beside this package;
    # from a wheel it is a script on PATH.
    import os
    import shutil
    here = os.path.dirname(os.path.abspath(__file__))
    candidate = os.path.join(here, "..", "..", "control", "mtctl")
    return candidate if os.path.exists(candidate) else shutil.which("mtctl")


def run_mt_asyncio_watched(factories, threads):
    """mt_asyncio with the control plane served and an operator watching:
    `mtctl watch --interval 0.1 --loops` (the Watch stream at 10 Hz, with
    the loops' task counts) reads it for the whole run. Its row against
    mt_asyncio's is the control plane's cost on the hot paths."""
    import os
    import shutil
    import subprocess
    import tempfile
    import time

    import mt_asyncio.control

    mtctl = _mtctl()
    if mtctl is None:
        raise RuntimeError("mtctl not found (bazel run //pyext:bench ships it)")
    folder = tempfile.mkdtemp(prefix="mtbench-", dir="/tmp")
    server = mt_asyncio.control.serve(os.path.join(folder, "control.sock"))
    # The client writes its updates (one line each, flushed) to a file: no
    # thread of the measured process reads them.
    updates_path = os.path.join(folder, "updates.jsonl")
    with open(updates_path, "w") as out:
        watcher = subprocess.Popen(
            [mtctl, "--target", server.target, "-o", "json", "watch", "--interval", "0.1",
             "--loops"], stdout=out, stderr=subprocess.DEVNULL)
    try:
        # The first update shows the client is connected and watching.
        deadline = time.monotonic() + 10
        while os.path.getsize(updates_path) == 0:
            if watcher.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mtctl watch printed nothing")
            time.sleep(0.01)
        start = time.perf_counter()
        balance = run_mt_asyncio(factories, threads)
        elapsed = time.perf_counter() - start
        with open(updates_path) as f:
            updates = sum(1 for _ in f)
    finally:
        watcher.terminate()
        watcher.wait(timeout=10)
        server.close()
        shutil.rmtree(folder, ignore_errors=True)
    # Starved of CPU by a loaded machine the client may fall behind (the
    # stream then skips ticks); one far below 10 Hz did not really watch.
    if elapsed > 1 and updates < 3 * elapsed:
        raise RuntimeError(f"the watcher got {updates} updates in {elapsed:.2f} s")
    # Timed here: serving and starting the client are not the workload.
    return Timed(balance, elapsed)


BACKENDS = {
    "asyncio": run_asyncio,
    "asyncio-multiloop": run_asyncio_multiloop,
    "uvloop": run_uvloop,
    "uvloop-multiloop": run_uvloop_multiloop,
    "rloop": run_rloop,
    "rloop-multiloop": run_rloop_multiloop,
    "mt-asyncio-0.3.0a1": run_pypi_mt_asyncio,
    "tonio": run_tonio,
    "mt_asyncio": run_mt_asyncio,
    "mt_asyncio+watch": run_mt_asyncio_watched,
    "mt_asyncio+ssl": run_mt_asyncio_ssl,
}

SINGLE_THREADED = {"asyncio", "uvloop", "rloop"}
# The import each peer needs (checked in the driver, not in a cell).
PEER_MODULES = {"uvloop": "uvloop", "uvloop-multiloop": "uvloop",
                "rloop": "rloop", "rloop-multiloop": "rloop", "tonio": "tonio"}

# Backends that run on mt_asyncio._core; the driver refuses to measure them
# on a debug or sanitizer build of the extension.
USES_EXTENSION = {"mt_asyncio", "mt_asyncio+watch", "mt_asyncio+ssl"}
