"""uvicorn and gunicorn on mt_asyncio's parallel loop.

uvicorn (0.36 and later: ``--loop`` takes a loop factory by import
path)::

    uvicorn app:app --loop mt_asyncio.uvicorn:loop_factory

gunicorn with uvicorn's worker, one parallel loop in each worker process::

    gunicorn app:app -k mt_asyncio.uvicorn.UvicornWorker

Importing this module installs mt_asyncio.compat (stdlib ``asyncio``'s
names pointing at mt_asyncio's) before uvicorn loads the application, so
the application and the libraries it imports (Starlette, FastAPI, anyio)
get the thread-safe primitives the parallel loop needs. ``MT_ASYNCIO_THREADS``
in the environment sizes the runtime's worker pool in each process
(default ``os.cpu_count() + 4``). docs/servers.md has the commands of
every server.
"""

from . import base_events, compat

__all__ = ["loop_factory", "UvicornWorker"]

compat.install()


def loop_factory():
    """A new parallel loop (what uvicorn's ``--loop`` calls). The runtime
    starts with it, sized by ``MT_ASYNCIO_THREADS`` when that is set."""
    return base_events.new_event_loop()


def _worker_class():
    try:
        from uvicorn_worker import UvicornWorker as base
    except ImportError:  # uvicorn's own, deprecated since 0.30.
        from uvicorn.workers import UvicornWorker as base

    class UvicornWorker(base):
        """uvicorn's gunicorn worker with the parallel loop."""

        CONFIG_KWARGS = {**base.CONFIG_KWARGS, "loop": "mt_asyncio.uvicorn:loop_factory"}

    UvicornWorker.__module__ = __name__
    return UvicornWorker


def __getattr__(name):
    # gunicorn is imported only by those who ask for its worker.
    if name == "UvicornWorker":
        worker = _worker_class()
        globals()[name] = worker
        return worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
