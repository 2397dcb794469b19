"""A coordinated runtime shutdown, as the Python side runs it.

The runtime (runtime/runtime.cc) begins a coordinated shutdown when the
control plane asks for one or a signal given to
``mt_asyncio.runtime(signals=...)`` arrives (_shutdown_signals). Its drain
step calls drain() here, which winds everything down the way Ctrl-C winds
down asyncio.run():

* every server stops accepting (servers register in _live_servers);
* the main task of every run in progress (the runs registry:
  runners.Runner enters it for as long as it runs and closes) is
  cancelled, so finally blocks and ``async with`` exits run;
* until the grace ends, drain waits for those runs to finish; then the
  connections still open are aborted, and runs that waited on them get a
  short allowance to close their loops.

This module sits below runners, base_events and the signal code, which
all use it, and imports none of them.
"""

import contextlib
import signal
import threading
import time
import weakref

from . import _core

# Runs in progress: runner -> [nesting depth, main task while run() runs].
_busy_lock = threading.Lock()
_busy = {}

# Main tasks a shutdown cancelled -> the signal that began it (or None).
cancelled_by_shutdown = weakref.WeakKeyDictionary()

# The signal of the shutdown being drained now (set by the signal handler
# that requests it; None otherwise).
shutdown_signal = None

# When the grace of the shutdown being drained ends (time.monotonic()),
# else None: a run waiting for its blocking jobs gives up then.
drain_deadline = None

# Servers that accept connections (weakly held; each adds and removes
# itself).
_servers_lock = threading.Lock()
_live_servers = weakref.WeakSet()

# How long runs get to finish after the grace (the runtime's cancel phase
# gives tasks the same, runtime/runtime.cc).
_UNWIND_SECONDS = 1.0


@contextlib.contextmanager
def busy_while(runner, main_task=None):
    """While the block runs, `runner` counts as a run in progress (and
    `main_task`, if given, is what a shutdown cancels)."""
    with _busy_lock:
        entry = _busy.setdefault(runner, [0, None])
        entry[0] += 1
        if main_task is not None:
            entry[1] = main_task
    try:
        yield
    finally:
        with _busy_lock:
            entry[0] -= 1
            if main_task is not None:
                entry[1] = None
            if entry[0] == 0:
                del _busy[runner]


def any_busy():
    """Whether any run is in progress."""
    with _busy_lock:
        return bool(_busy)


def add_server(server):
    with _servers_lock:
        _live_servers.add(server)


def discard_server(server):
    with _servers_lock:
        _live_servers.discard(server)


def _stop_accepting_everywhere():
    """Every server stops accepting (and closes its listening sockets).
    Returns the servers, whose connections the cancel phase closes."""
    with _servers_lock:
        servers = list(_live_servers)
    for server in servers:
        try:
            server._loop.call_soon_threadsafe(server.close)
        except RuntimeError:
            server.close()  # Its loop is closed: nothing runs there now.
    return servers


def _wait_for_runs(deadline):
    while any_busy() and time.monotonic() < deadline:
        time.sleep(0.002)


def drain(grace):
    """The runtime's drain hook (see the module docstring). Runs on the
    thread running the shutdown."""
    global shutdown_signal, drain_deadline
    signum = shutdown_signal
    reason = "mt_asyncio runtime shutdown"
    if signum is not None:
        reason += f" ({signal.Signals(signum).name})"
    # Servers stop accepting first, so nothing new starts while the runs
    # below wind down.
    servers = _stop_accepting_everywhere()
    with _busy_lock:
        runs = [(runner._loop, entry[1]) for runner, entry in _busy.items()]
    for loop, task in runs:
        if task is None or task.done():
            continue
        cancelled_by_shutdown[task] = signum
        try:
            loop.call_soon_threadsafe(task.cancel, reason)
        except RuntimeError:
            pass  # Its loop closed meanwhile: nothing left to wind down.
    drain_deadline = time.monotonic() + grace
    try:
        _wait_for_runs(drain_deadline)
    finally:
        shutdown_signal = None  # The next signal begins a new shutdown.
        # The cancel phase: connections the runs did not close are aborted
        # (a loop that closes aborts its own transports too).
        for server in servers:
            server.abort_clients()
    # A run that waited on those connections (Server.wait_closed) now
    # finishes and closes its loop: the runtime must not stop under it, so
    # it gets the cancel phase's unwind allowance to do so.
    try:
        _wait_for_runs(time.monotonic() + _UNWIND_SECONDS)
    finally:
        # Kept until here: a run waiting for its blocking jobs polls it.
        drain_deadline = None


_core._set_drain_hook(drain)
