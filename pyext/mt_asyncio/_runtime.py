"""The process-wide runtime from Python: start it, size it (up front or
live), read its state, stop it. ``mt_asyncio`` re-exports the public names;
runners uses configure_threads for ``run(threads=...)``.

The API follows PyPI's ``mt-asyncio`` 0.3.0a1 (``mt_asyncio.runtime(...)``,
``start_runtime(threads)``, ``asyncio.run(..., threads=N)``).
"""

from . import _admin, _core, _shutdown_signals

__all__ = ["configure_threads", "runtime", "runtime_info", "shutdown_runtime",
           "start_runtime"]


def _check_threads(threads):
    """A worker count: an int >= 1 (TypeError or ValueError otherwise)."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int or None, not {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")


def start_runtime(threads=None, *, blocking_threadpool_size=128,
                  blocking_threadpool_idle_ttl=30):
    """Start the process-wide runtime.

    ``threads=None`` means ``os.cpu_count() + 4`` worker threads, as in
    mt-asyncio 0.3.0a1. Raises RuntimeError if a runtime is already
    running.
    """
    if threads is not None:
        _check_threads(threads)
    _core.start_runtime(threads or 0, blocking_threadpool_size,
                        float(blocking_threadpool_idle_ttl))


def runtime(threads=None, *, context=False, blocking_threadpool_size=128,
            blocking_threadpool_idle_ttl=30, signals=None):
    """Configure the process-wide runtime up front.

    Before the runtime runs, this starts it with these settings; once it
    runs, ``threads`` resizes the worker pool and
    ``blocking_threadpool_size`` the blocking pool's limit, live. The idle
    TTL can only be chosen before the runtime starts.

    ``context`` is accepted for mt-asyncio 0.3.0a1's API: the loop always
    runs every task and callback in its contextvars context, as asyncio
    requires, whatever it says.

    ``signals`` lists signals that begin a coordinated shutdown of the
    runtime: every ``asyncio.run()`` in progress has its main task
    cancelled (as Ctrl-C does in stdlib) and is waited for while it unwinds
    and closes; ``run()`` then raises KeyboardInterrupt for SIGINT and the
    main task's CancelledError otherwise. When no run is in progress the
    signal goes to the handler installed before. Main thread only.
    """
    if not isinstance(context, bool):
        raise TypeError(f"context must be a bool, not {type(context).__name__}")
    wanted = _shutdown_signals.parse(signals)
    for name, value in (("blocking_threadpool_size", blocking_threadpool_size),
                        ("blocking_threadpool_idle_ttl", blocking_threadpool_idle_ttl)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(blocking_threadpool_size, float) or blocking_threadpool_size < 1:
        raise ValueError("blocking_threadpool_size must be an int >= 1, got "
                         f"{blocking_threadpool_size!r}")
    if blocking_threadpool_idle_ttl < 0:
        raise ValueError("blocking_threadpool_idle_ttl must be >= 0, got "
                         f"{blocking_threadpool_idle_ttl!r}")
    info = runtime_info()
    if info["state"] != "running":
        start_runtime(threads, blocking_threadpool_size=blocking_threadpool_size,
                      blocking_threadpool_idle_ttl=blocking_threadpool_idle_ttl)
    else:
        ttl = float(blocking_threadpool_idle_ttl)
        if ttl == 0 and ttl != info["config"]["blocking_idle_ttl_seconds"]:
            raise RuntimeError("blocking_threadpool_idle_ttl=0 can only be chosen "
                               "before the runtime starts")
        if threads is not None:
            configure_threads(threads)
        if (blocking_threadpool_size != info["blocking"]["max_threads"]
                or ttl != info["config"]["blocking_idle_ttl_seconds"]):
            # Live changes go the control plane's way.
            _admin.call("SetBlockingPool", max_threads=blocking_threadpool_size,
                        idle_ttl_seconds=ttl)
    _shutdown_signals.listen(wanted)


def configure_threads(threads):
    """Make the runtime run `threads` workers: start it, or resize it live."""
    _check_threads(threads)
    if runtime_info()["state"] == "running":
        _admin.call("ResizeWorkers", target=threads)
    else:
        start_runtime(threads)


def shutdown_runtime():
    """Run what is queued, then stop and join the workers. Idempotent."""
    _core.shutdown_runtime()


def runtime_info():
    """A dict snapshot of the runtime: state, live configuration, the
    blocking pool and per-worker counters and states.

    The same document the control plane's GetInfo carries (the JSON form
    of ``mt.control.v1.RuntimeInfo``), with enum values shortened for
    Python: ``"running"`` rather than ``"RUNTIME_STATE_RUNNING"``.
    """
    return _admin.runtime_info()
