"""loop.add_signal_handler() / remove_signal_handler() on the parallel loop.

As stdlib's Unix loop does: the C-level signal handler writes the signal's
number to a wakeup socket (signal.set_wakeup_fd), whose read end the loop
watches like any reader; the loop's handler for that signal then runs as a
loop callback on a worker. All of a loop's signal handlers run from that
one reader callback, which never runs twice at once, so they never overlap
each other, as on stdlib's one thread, and each keeps one context across
its calls.

stdlib allows this on the loop the main thread runs, from that thread. Here
the loop's code runs on workers, so the calls are allowed from the main
thread and from the loop's own callbacks and tasks while the main thread
runs it; Python lets only the main thread install handlers, so a worker
hands signal.signal and set_wakeup_fd to the main thread (waiting in
run_forever) and waits for them. From any other thread: RuntimeError.

With `mt_asyncio.runtime(signals=...)` listening for the same signal, the
loop's handler takes the signal while it is installed; removing it hands the
signal back to the runtime's listener (stdlib would restore the default).
"""

import concurrent.futures
import errno
import signal
import socket
import sys
import threading
import warnings

from asyncio import coroutines, events
from asyncio.log import logger

from .. import _shutdown_signals, _thread_identity

# Signal dispositions and the wakeup fd are the process's: one lock for
# every loop's changes to them (never held while a handler runs).
_lock = threading.Lock()


def _sighandler_noop(signum, frame):
    """Python's C handler writes the wakeup byte; nothing is left to do."""


def _install_noop(sig):
    signal.signal(sig, _sighandler_noop)
    signal.siginterrupt(sig, False)  # SA_RESTART: fewer EINTRs.


def _clear_wakeup_fd(ours):
    old = signal.set_wakeup_fd(-1)
    if old not in (-1, ours):
        # Another loop's since we set ours: leave it theirs.
        signal.set_wakeup_fd(old)


class SignalMethods:
    """The signal-handler part of EventLoop."""

    _signal_handlers = None  # sig -> events.Handle, once one is added.
    _signal_rsock = None
    _signal_wsock = None

    def _check_signal(self, sig):
        if not isinstance(sig, int):
            raise TypeError(f'sig must be an int, not {sig!r}')
        if sig not in signal.valid_signals():
            raise ValueError(f'invalid signal number {sig}')

    def _on_main_thread(self, fn, *args):
        """fn(*args) on the main thread: here if we are it, else by the main
        thread in run_forever() while this worker waits."""
        if _thread_identity.on_main_os_thread():
            return fn(*args)
        if (events._get_running_loop() is not self or
                self._thread_id != threading.main_thread().ident):
            raise RuntimeError("set_wakeup_fd only works in main thread "
                               "of the main interpreter")
        done = concurrent.futures.Future()

        def call():
            try:
                done.set_result(fn(*args))
            except BaseException as exc:
                done.set_exception(exc)

        self._call_in_runner(call)
        return done.result()

    def _ensure_signal_socket(self):
        if self._signal_wsock is None:
            rsock, wsock = socket.socketpair()
            rsock.setblocking(False)
            wsock.setblocking(False)
            self._signal_rsock, self._signal_wsock = rsock, wsock
            self._add_reader(rsock.fileno(), self._read_signals)
        return self._signal_wsock

    def _close_signal_socket(self):
        if self._signal_rsock is not None:
            self._remove_reader(self._signal_rsock.fileno())
            self._signal_rsock.close()
            self._signal_wsock.close()
            self._signal_rsock = self._signal_wsock = None

    def add_signal_handler(self, sig, callback, *args):
        """Run callback(*args) on the loop whenever signal `sig` arrives.

        Main thread only (RuntimeError elsewhere, as stdlib); ValueError if
        the signal number is invalid, RuntimeError if it cannot be caught.
        """
        if (coroutines.iscoroutine(callback) or
                _iscoroutinefunction(callback)):
            raise TypeError("coroutines cannot be used "
                            "with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()
        with _lock:
            self._add_signal_handler_locked(sig, callback, args)

    def _add_signal_handler_locked(self, sig, callback, args):
        if self._signal_handlers is None:
            self._signal_handlers = {}
        try:
            # Refused off the main thread: checked before anything is
            # installed, as stdlib does.
            self._on_main_thread(signal.set_wakeup_fd,
                                 self._ensure_signal_socket().fileno())
        except (ValueError, OSError, RuntimeError) as exc:
            if not self._signal_handlers:
                self._close_signal_socket()
            raise RuntimeError(str(exc)) from None
        self._signal_handlers[sig] = events.Handle(callback, args, self, None)
        try:
            self._on_main_thread(_install_noop, sig)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                self._release_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f'sig {sig} cannot be caught')
            raise

    def remove_signal_handler(self, sig):
        """Remove the handler for `sig`; True if there was one."""
        self._check_signal(sig)
        with _lock:
            return self._remove_signal_handler_locked(sig)

    def _remove_signal_handler_locked(self, sig):
        try:
            del self._signal_handlers[sig]
        except (KeyError, TypeError):
            return False
        if sig in _shutdown_signals.listening():
            handler = _shutdown_signals.listener()
        elif sig == signal.SIGINT:
            handler = signal.default_int_handler
        else:
            handler = signal.SIG_DFL
        try:
            self._on_main_thread(signal.signal, sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f'sig {sig} cannot be caught')
            raise
        if not self._signal_handlers:
            self._release_wakeup_fd()
        return True

    def _release_wakeup_fd(self):
        try:
            self._on_main_thread(_clear_wakeup_fd, self._signal_wsock.fileno())
        except (ValueError, OSError, RuntimeError) as exc:
            logger.info('set_wakeup_fd(-1) failed: %s', exc)
        self._close_signal_socket()

    def _read_signals(self):
        # The reader callback: one byte per signal delivered.
        while True:
            try:
                data = self._signal_rsock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            except (AttributeError, OSError):
                return  # Closed meanwhile.
            if not data:
                return
            for signum in data:
                self._handle_signal(signum)

    def _handle_signal(self, sig):
        handle = (self._signal_handlers or {}).get(sig)
        if handle is None:
            return  # Removed while the byte was on its way.
        if handle._cancelled:
            self.remove_signal_handler(sig)
        else:
            handle._run()

    def _remove_signal_handlers(self):
        """At close(): what stdlib's Unix loop does."""
        if not self._signal_handlers:
            return
        if not sys.is_finalizing():
            for sig in list(self._signal_handlers):
                self.remove_signal_handler(sig)
        else:
            warnings.warn(f"Closing the loop {self!r} "
                          f"on interpreter shutdown "
                          f"stage, skipping signal handlers removal",
                          ResourceWarning,
                          source=self)
            self._signal_handlers.clear()
        self._close_signal_socket()


try:
    _iscoroutinefunction = coroutines._iscoroutinefunction
except AttributeError:  # 3.13
    _iscoroutinefunction = coroutines.iscoroutinefunction
