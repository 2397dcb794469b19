"""mt_asyncio.runtime(signals=...): signals that shut the runtime down.

A listed signal begins the runtime's coordinated shutdown. Its drain step
(_shutdown.drain) cancels the main task of every asyncio.run()/Runner.run()
in progress — what Ctrl-C does to stdlib's asyncio.run() — and waits for
those runs to unwind and close their loops; then the runtime stops. run()
raises KeyboardInterrupt for SIGINT, as stdlib does, and otherwise the main
task's CancelledError, whose message names the signal.

A listed signal that arrives while no mt_asyncio run is in progress, or
again while the first one's shutdown runs, is handed to the handler that
was installed before (for SIGTERM the default: the process ends; for
SIGINT: KeyboardInterrupt), so listening never swallows a signal and a
second one forces the issue.
"""

import signal
import threading

from . import _core, _shutdown, _thread_identity

# Signal -> the handler installed before ours.
_previous = {}
_lock = threading.Lock()


def parse(signals):
    """The signals to listen for, checked: TypeError or ValueError, as
    signal.signal() raises, for something that is not a signal, and
    ValueError off the main thread."""
    if signals is None:
        return []
    try:
        wanted = [signal.Signals(s) for s in signals]
    except TypeError:
        raise TypeError(
            f"signals must be an iterable of signal numbers, got {signals!r}") from None
    if wanted and not _thread_identity.on_main_os_thread():
        raise ValueError("mt_asyncio.runtime(signals=...) must be called from the main thread")
    return wanted


def listen(wanted):
    """Install our handler for each signal of parse()'s list (once each)."""
    for sig in wanted:
        with _lock:
            if sig in _previous:
                continue
            previous = signal.signal(sig, _on_signal)
            _previous[sig] = signal.SIG_DFL if previous is None else previous


def listening():
    """The signals runtime(signals=...) listens for."""
    with _lock:
        return set(_previous)


def listener():
    """The handler runtime(signals=...) installs (a loop's
    remove_signal_handler() gives a signal it listens for back to it)."""
    return _on_signal


def _on_signal(signum, frame):
    if _shutdown.any_busy() and _shutdown.shutdown_signal is None:
        _shutdown.shutdown_signal = signum
        _core.request_shutdown()
        return
    # Nothing of ours runs, or this is a second signal while the first
    # shutdown winds down (as a second Ctrl-C does in asyncio, it acts at
    # once): the handler installed before decides.
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        # The default action (for most signals: end the process).
        with _lock:
            _previous.pop(signum, None)
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
