"""asyncio.run() and Runner on mt_asyncio's parallel loop."""

import contextvars
import enum
import functools
import inspect
import signal
import sys
import threading
from asyncio import constants, coroutines, events, exceptions

from . import _core, _runtime, _shutdown, base_events, tasks
from .base_events import _serial_tasks

__all__ = ["Runner", "run"]


class _State(enum.Enum):
    CREATED = "created"
    INITIALIZED = "initialized"
    CLOSED = "closed"


def _custom_policy():
    """The event loop policy in force if it is a custom one (it makes its
    own loops), else None: the default policy, or a subclass of it that
    still makes stdlib's SelectorEventLoop."""
    getter = getattr(events, "_get_event_loop_policy", None) or events.get_event_loop_policy
    policy = getter()
    base = (getattr(events, "_BaseDefaultEventLoopPolicy", None)
            or getattr(events, "BaseDefaultEventLoopPolicy"))
    if (isinstance(policy, base)
            and type(policy).new_event_loop is base.new_event_loop
            and getattr(policy, "_loop_factory", None) is _stdlib_selector_loop()):
        return None
    return policy


def _stdlib_selector_loop():
    from asyncio import unix_events
    return unix_events.SelectorEventLoop


def _new_default_loop():
    """The loop asyncio.run()/Runner make without a loop_factory: ours —
    unless, under compat.install(), a custom event loop policy is in
    force, whose new_event_loop() stdlib would call (and so do we)."""
    if sys.modules.get("mt_asyncio.compat") is not None:
        compat = sys.modules["mt_asyncio.compat"]
        if compat.installed():
            policy = _custom_policy()
            if policy is not None:
                return policy.new_event_loop()
    return base_events.new_event_loop()


class Runner:
    """Runs coroutines on one mt_asyncio loop and closes it cleanly: the
    same contract as asyncio.Runner."""

    def __init__(self, *, debug=None, loop_factory=None):
        self._state = _State.CREATED
        self._debug = debug
        self._loop_factory = loop_factory
        self._loop = None
        self._context = None
        self._interrupt_count = 0
        self._set_event_loop = False

    def __enter__(self):
        self._lazy_init()
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def close(self):
        if self._state is not _State.INITIALIZED:
            return
        try:
            loop = self._loop
            with _shutdown.busy_while(self):
                _cancel_all_tasks(loop)
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(
                    loop.shutdown_default_executor(constants.THREAD_JOIN_TIMEOUT))
        finally:
            if self._set_event_loop:
                events.set_event_loop(None)
            loop.close()
            self._loop = None
            self._state = _State.CLOSED

    def get_loop(self):
        self._lazy_init()
        return self._loop

    def run(self, coro, *, context=None):
        if events._get_running_loop() is not None:
            raise RuntimeError(
                "Runner.run() cannot be called from a running event loop")
        self._lazy_init()
        if not coroutines.iscoroutine(coro):
            # As the running Python's asyncio: 3.14 wraps any awaitable,
            # 3.13 takes coroutines only.
            if sys.version_info < (3, 14):
                raise ValueError(f"a coroutine was expected, got {coro!r}")
            if inspect.isawaitable(coro):
                coro = tasks._wrap_awaitable(coro)
            else:
                raise TypeError("An asyncio.Future, a coroutine or an "
                                "awaitable is required")
        if context is None:
            context = self._context
        if _serial_tasks() and isinstance(self._loop, _core.Loop):
            task = _core._serial_task(self._loop, coro, context)
        else:
            task = self._loop.create_task(coro, context=context)
        sigint_installed = False
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            try:
                signal.signal(signal.SIGINT,
                              functools.partial(self._on_sigint, main_task=task))
                sigint_installed = True
            except ValueError:
                # The main thread may not take signals (an embedding
                # interpreter that did not register them): run without.
                pass
        self._interrupt_count = 0
        try:
            with _shutdown.busy_while(self, task):
                return self._loop.run_until_complete(task)
        except exceptions.CancelledError:
            interrupted = (self._interrupt_count > 0
                           or _shutdown.cancelled_by_shutdown.get(task) == signal.SIGINT)
            if interrupted:
                uncancel = getattr(task, "uncancel", None)
                if uncancel is not None and uncancel() == 0:
                    raise KeyboardInterrupt()
            raise
        finally:
            if sigint_installed and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    def _lazy_init(self):
        if self._state is _State.CLOSED:
            raise RuntimeError("Runner is closed")
        if self._state is _State.INITIALIZED:
            return
        if self._loop_factory is None:
            self._loop = _new_default_loop()
            if not self._set_event_loop:
                events.set_event_loop(self._loop)
                self._set_event_loop = True
        else:
            self._loop = self._loop_factory()
        if self._debug is not None:
            self._loop.set_debug(self._debug)
        self._context = contextvars.copy_context()
        self._state = _State.INITIALIZED

    def _on_sigint(self, signum, frame, main_task):
        self._interrupt_count += 1
        if self._interrupt_count == 1 and not main_task.done():
            main_task.cancel()
            self._loop.call_soon_threadsafe(lambda: None)
            return
        raise KeyboardInterrupt()


def run(main, *, debug=None, loop_factory=None, threads=None):
    """Run a coroutine on a new mt_asyncio loop and close it, like
    asyncio.run(). `threads` sizes the runtime's worker pool first (the
    option of mt-asyncio 0.3.0a1's API; None keeps the current size, or cpu_count() + 4
    when the runtime starts here)."""
    if events._get_running_loop() is not None:
        raise RuntimeError(
            "asyncio.run() cannot be called from a running event loop")
    if threads is not None:
        _runtime.configure_threads(threads)
    runner = Runner(debug=debug, loop_factory=loop_factory)
    # Busy from start to close: a shutdown in between waits for the close.
    with _shutdown.busy_while(runner), runner:
        return runner.run(main)


def _cancel_all_tasks(loop):
    to_cancel = tasks.all_tasks(loop)
    if not to_cancel:
        return
    for task in to_cancel:
        task.cancel()
    loop.run_until_complete(tasks.gather(*to_cancel, return_exceptions=True))
    for task in to_cancel:
        if task.cancelled():
            continue
        if task.exception() is not None:
            loop.call_exception_handler({
                "message": "unhandled exception during asyncio.run() shutdown",
                "exception": task.exception(),
                "task": task,
            })
