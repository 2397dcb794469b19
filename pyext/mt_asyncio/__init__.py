"""mt_asyncio: a parallel asyncio runtime for free-threaded CPython.

``import mt_asyncio.asyncio as asyncio`` is the entry point. The native core
(``mt_asyncio._core``) runs a pool of worker threads attached to the
interpreter; the control plane (``mt_asyncio.control``) lets an operator
inspect a live process with ``mtctl``.

Status: the runtime, the parallel loop and all of ``mt_asyncio.asyncio``
(tasks, combinators, primitives, queues, network I/O, child processes,
pipes, signal handlers) are implemented; docs/compatibility.md lists every
name and every known difference from stdlib's loop.
"""

import atexit as _atexit
import pkgutil as _pkgutil

# The control-plane extension is built in its own Bazel package; in a source
# tree it sits in a second ``mt_asyncio`` folder on sys.path. (In the wheel
# both live in this one folder, and extend_path changes nothing.)
__path__ = _pkgutil.extend_path(__path__, __name__)

from . import _core  # noqa: E402
from . import _admin  # noqa: E402

from . import _thread_identity  # noqa: E402

# threading.get_ident()/current_thread() in a loop's steps name the loop's
# thread, as on stdlib (see _thread_identity).
_thread_identity.install()

__version__ = "0.1.0"
__all__ = ["build_info", "runtime", "runtime_info", "start_runtime",
           "shutdown_runtime"]

build_info = _core.build_info


def start_runtime(threads=None, *, blocking_threadpool_size=128,
                  blocking_threadpool_idle_ttl=30):
    """Start the process-wide runtime.

    ``threads=None`` means ``os.cpu_count() + 4`` worker threads, as in the
    seed API. Raises RuntimeError if a runtime is already running.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise TypeError(f"threads must be an int or None, not {type(threads).__name__}")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
    _core.start_runtime(threads or 0, blocking_threadpool_size,
                        float(blocking_threadpool_idle_ttl))


def runtime(threads=None, *, context=False, blocking_threadpool_size=128,
            blocking_threadpool_idle_ttl=30, signals=None):
    """Configure the process-wide runtime up front (the seed API).

    Before the runtime runs, this starts it with these settings; once it
    runs, ``threads`` resizes the worker pool and
    ``blocking_threadpool_size`` the blocking pool's limit, live. The idle
    TTL can only be chosen before the runtime starts.

    ``context`` is accepted for the seed API's sake: the loop always runs
    every task and callback in its contextvars context, as asyncio requires,
    whatever it says.

    ``signals`` lists signals that begin a coordinated shutdown of the
    runtime: every ``asyncio.run()`` in progress has its main task
    cancelled (as Ctrl-C does in stdlib) and is waited for while it unwinds
    and closes; ``run()`` then raises KeyboardInterrupt for SIGINT and the
    main task's CancelledError otherwise. When no run is in progress the
    signal goes to the handler installed before. Main thread only.
    """
    if not isinstance(context, bool):
        raise TypeError(f"context must be a bool, not {type(context).__name__}")
    from . import _shutdown_signals
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
            _configure_threads(threads)
        if (blocking_threadpool_size != info["blocking"]["max_threads"]
                or ttl != info["config"]["blocking_idle_ttl_seconds"]):
            # Live changes go the control plane's way.
            _admin.call("SetBlockingPool", max_threads=blocking_threadpool_size,
                        idle_ttl_seconds=ttl)
    _shutdown_signals.listen(wanted)


def _configure_threads(threads):
    """Make the runtime run `threads` workers: start it, or resize it live."""
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int or None, not {type(threads).__name__}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
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


# Workers are attached to the interpreter: they must be gone before it
# finalizes.
_atexit.register(shutdown_runtime)


def _start_control_from_env():
    # MT_ASYNCIO_CONTROL=1 (or a path): the control plane without a code
    # change. Closed at exit, before the runtime stops. The off values are
    # control._ENV_OFF, repeated so that a service without the control
    # plane does not import it.
    import os
    value = os.environ.get("MT_ASYNCIO_CONTROL", "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return
    from . import control
    control._serve_from_env()  # serve() registers its close at exit.


_start_control_from_env()


def __getattr__(name):
    # `import mt_asyncio` then `mt_asyncio.compat.install()`, as the README
    # writes it: the public submodules load on first use (importing them
    # here would load all of asyncio for every `import mt_asyncio`).
    if name in ("asyncio", "compat", "control"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
