"""The thread a loop's code is told it runs on (installed on import).

A loop's steps and callbacks run on the runtime's workers, yet code in
them is told the ident of the loop's own thread (the one in its
run_forever()), as on stdlib, where that is the only thread a loop's code
ever runs on: libraries decide "am I on the loop's thread?" with
threading.get_ident() and current_thread() (anyio's portals, callbacks
asserting the main thread, logging's thread fields). Installed when
mt_asyncio is imported, so that a library importing the name later
(``from threading import get_ident``) gets it too; outside a running
loop's work it is the plain ident. See pyext/src/loop/loop_thread_identity.cc.

The main thread's loop is then also "the main thread" to the APIs that
only the main thread may call: signal.signal() and signal.set_wakeup_fd()
from one of its steps (uvicorn installs its SIGINT/SIGTERM handlers when
it sees the main thread) run on the thread in that loop's run_forever()
while the worker waits, as add_signal_handler() does.
"""

import _thread
import functools
import signal
import threading

from asyncio import events

from . import _core

def on_main_os_thread():
    """Whether the calling OS thread is the main thread (not the loop's
    thread a step is told it runs on)."""
    return _thread.get_ident() == threading.main_thread().ident


def _on_worker_of_main_loop():
    """The running loop, if the caller is a worker told it is the main
    thread (a step of the main thread's loop); else None."""
    if on_main_os_thread() or _core.loop_thread_ident() != threading.main_thread().ident:
        return None
    loop = events._get_running_loop()
    return loop if hasattr(loop, "_on_main_thread") else None


def _main_thread_only(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        loop = _on_worker_of_main_loop()
        if loop is None:
            return fn(*args, **kwargs)
        return loop._on_main_thread(functools.partial(fn, *args, **kwargs))
    call.__wrapped_main_thread_only__ = fn
    return call


def install():
    threading.get_ident = _core.loop_thread_ident
    for name in ("signal", "set_wakeup_fd"):
        fn = getattr(signal, name)
        if not hasattr(fn, "__wrapped_main_thread_only__"):
            setattr(signal, name, _main_thread_only(fn))
