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

from . import _core, _thread_identity  # noqa: E402
from ._runtime import (  # noqa: E402
    runtime, runtime_info, shutdown_runtime, start_runtime,
)

# threading.get_ident()/current_thread() in a loop's steps name the loop's
# thread, as on stdlib (see _thread_identity).
_thread_identity.install()

__version__ = "0.1.0"
__all__ = ["build_info", "runtime", "runtime_info", "start_runtime",
           "shutdown_runtime"]

build_info = _core.build_info


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


def _start_metrics_from_env():
    # MT_ASYNCIO_METRICS=1 (or a port, HOST:PORT or a path): the metrics
    # endpoint without a code change (metrics._ENV_OFF, repeated for the
    # same reason). Its thread is a daemon: nothing to close at exit.
    import os
    value = os.environ.get("MT_ASYNCIO_METRICS", "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return
    from . import metrics
    metrics._serve_from_env()


_start_metrics_from_env()


def __getattr__(name):
    # `import mt_asyncio` then `mt_asyncio.compat.install()`, as the README
    # writes it: the public submodules load on first use (importing them
    # here would load all of asyncio for every `import mt_asyncio`).
    if name in ("asyncio", "compat", "control", "metrics"):
        import importlib
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
