"""The parallel event loop: mt_asyncio's EventLoop.

The hot paths (call_soon, call_later, call_at, time, the run loop, Future
and Task) are C++ in ``mt_asyncio._core``; this module adds the rest of
``asyncio.AbstractEventLoop`` the way ``asyncio.base_events`` does:
run_until_complete, the exception handler API, task factories, async
generator hooks and executors. The network methods come from
``sockets.SocketMethods`` (add_reader, sock_*, name resolution) and
``connections.ConnectionMethods`` (create_connection, create_server, ...).

Callbacks and task steps run on the runtime's worker threads, in parallel.
The thread that calls run_forever() only waits; stop() wakes it.
"""

import asyncio as _asyncio
import concurrent.futures
import sys
import threading
import time
import traceback
import weakref
from asyncio import coroutines, events, futures

from . import _admin, _core, _shutdown, tasks
from ._loop.connections import ConnectionMethods
from ._loop.pipes import PipeMethods
from ._loop.processes import SubprocessMethods
from ._loop.sendfile import SendfileMethods
from ._loop.signals import SignalMethods
from ._loop.sockets import SocketMethods

__all__ = ["EventLoop", "new_event_loop"]

# asyncio's own logger, so logging configured for "asyncio" applies.
from asyncio.log import logger

# Context keys holding debug mode's stacks, and what each says.
_CREATED_AT = {"source_traceback": "Object created at",
               "handle_traceback": "Handle created at"}

# 3.14 renamed the internal check (the public one is deprecated there).
_iscoroutinefunction = getattr(coroutines, "_iscoroutinefunction", None) or \
    coroutines.iscoroutinefunction


def _serial_tasks():
    compat = sys.modules.get("mt_asyncio.compat")
    return compat is not None and compat.serial_tasks()


def _run_until_complete_cb(fut):
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # stdlib lets these escape run_forever; the loop is stopped by
            # the caller re-raising them.
            return
    futures._get_loop(fut).stop()


class EventLoop(_core.Loop, SocketMethods, ConnectionMethods,
                SendfileMethods, SignalMethods, PipeMethods, SubprocessMethods,
                events.AbstractEventLoop):
    """An asyncio event loop whose callbacks and tasks run on the mt_asyncio
    runtime's worker threads, in parallel."""

    def __init__(self):
        self._exception_handler = None
        self._debug = coroutines._is_debug_mode()
        self._set_core_debug(self._debug)
        self._default_executor = None
        self._executor_shutdown_called = False
        # Futures of jobs on the blocking pool: the pool holds them from
        # C++, where the diagnostics' walk up a future's referrers cannot
        # see; through this set it sees that the loop holds them.
        self._blocking_futures = weakref.WeakSet()
        self._asyncgens = weakref.WeakSet()
        self._asyncgens_lock = threading.Lock()
        self._asyncgens_shutdown_called = False
        self._thread_id = None
        self._native_thread_id = 0  # For the control plane's ListLoops.
        self.slow_callback_duration = 0.1
        if _serial_tasks():
            # Tasks created before the first run_until_complete() join the
            # strand its main task will step on (serial_tasks.cc).
            _core._adopt_serial_strand(self)
        self._subprocesses = set()  # Children not reaped yet.
        self._subprocesses_lock = threading.Lock()
        # fd -> the object add_reader/add_writer was given, per direction
        # (index: writing): a closed socket's registration is found by it.
        self._fd_objects = ({}, {})
        _admin.register_loop(self)

    def __repr__(self):
        return (f"<{self.__class__.__name__} running={self.is_running()} "
                f"closed={self.is_closed()} debug={self.get_debug()}>")

    # --- running and stopping ------------------------------------------------

    def _check_closed(self):
        if self.is_closed():
            raise RuntimeError("Event loop is closed")

    def _check_running(self):
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if events._get_running_loop() is not None:
            raise RuntimeError(
                "Cannot run the event loop while another loop is running")

    def run_forever(self):
        """Run until stop() is called."""
        self._check_closed()
        self._check_running()
        old_hooks = sys.get_asyncgen_hooks()
        self._thread_id = threading.get_ident()
        self._native_thread_id = threading.get_native_id()
        # Code in this loop's steps is told it runs on this thread
        # (threading.current_thread()): make sure threading knows it.
        threading.current_thread()
        sys.set_asyncgen_hooks(firstiter=self._asyncgen_firstiter_hook,
                               finalizer=self._asyncgen_finalizer_hook)
        events._set_running_loop(self)
        try:
            self._run_until_stopped()
        finally:
            events._set_running_loop(None)
            self._thread_id = None
            self._native_thread_id = 0
            sys.set_asyncgen_hooks(*old_hooks)

    def run_until_complete(self, future):
        """Run until the future (a coroutine is wrapped in a Task) is done;
        return its result or raise its exception."""
        self._check_closed()
        self._check_running()
        new_task = not futures.isfuture(future)
        if new_task and coroutines.iscoroutine(future) and _serial_tasks():
            # Under compat.install(), the coroutine a program runs this way
            # is its main task as much as asyncio.run()'s is: it and the
            # tasks it starts step one at a time (runners.Runner.run).
            future = _core._serial_task(self, future, None)
        else:
            future = tasks.ensure_future(future, loop=self)
        future.add_done_callback(_run_until_complete_cb)
        try:
            self.run_forever()
        except BaseException:
            if new_task and future.done() and not future.cancelled():
                # The caller gets the exception; don't also log it.
                future.exception()
            raise
        finally:
            future.remove_done_callback(_run_until_complete_cb)
        if not future.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return future.result()

    def close(self):
        """Close the loop: pending callbacks are dropped, the default
        executor is shut down without waiting."""
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self.is_closed():
            return
        self._remove_signal_handlers()
        self._close_core()
        self._fd_objects = ({}, {})  # Readers and writers are gone.
        self._reap_subprocesses()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)

    # --- futures and tasks ---------------------------------------------------

    # create_future, create_task, set_task_factory and get_task_factory are
    # the C++ core's (pyext/src/loop/loop.cc): they are on every hot path.

    # --- executors -----------------------------------------------------------

    def run_in_executor(self, executor, func, *args):
        self._check_closed()
        if self._debug and (coroutines.iscoroutine(func) or _iscoroutinefunction(func)):
            # Checked in debug mode only, as stdlib does.
            raise TypeError("coroutines cannot be used with run_in_executor()")
        if executor is None:
            executor = self._default_executor
            if executor is None:
                if self._executor_shutdown_called:
                    raise RuntimeError("Executor shutdown has been called")
                # The runtime's blocking pool: threads on demand up to
                # blocking_threadpool_size, retired after the idle TTL.
                fut = self.create_future()
                self._blocking_futures.add(fut)
                self._run_blocking(fut, func, args)
                return fut
        return futures.wrap_future(executor.submit(func, *args), loop=self)

    def set_default_executor(self, executor):
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout=None):
        self._executor_shutdown_called = True
        if self._default_executor is None:
            # Our default executor is the runtime's blocking pool, shared
            # by every loop: wait for this loop's jobs in it to be over, as
            # stdlib joins its own executor's threads.
            thread = None
            over = self._blocking_jobs_over()
        else:
            over = self.create_future()
            thread = threading.Thread(target=self._do_shutdown, args=(over,))
            thread.start()
        try:
            async with _asyncio.timeouts.timeout(timeout):
                await over
        except TimeoutError:
            import warnings
            warnings.warn("The executor did not finishing joining "
                          f"its threads within {timeout} seconds.",
                          RuntimeWarning, stacklevel=2)
            if thread is not None:
                self._default_executor.shutdown(wait=False)
        else:
            if thread is not None:
                thread.join()

    async def _blocking_jobs_over(self):
        # Polled: a job's end is a count going down on a pool thread, and
        # this runs once, at shutdown. Backs off from 1 ms to 50 ms. A
        # coordinated runtime shutdown gives jobs its grace, no more: the
        # runtime abandons (and reports) those still running after it, so
        # the run ends as its cancelled main task says.
        delay = 0.001
        while self._blocking_jobs():
            deadline = _shutdown.drain_deadline
            if deadline is not None and time.monotonic() >= deadline:
                return
            await _asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _do_shutdown(self, future):
        try:
            self._default_executor.shutdown(wait=True)
            if not self.is_closed():
                self.call_soon_threadsafe(futures._set_result_unless_cancelled,
                                          future, None)
        except Exception as ex:
            if not self.is_closed() and not future.cancelled():
                self.call_soon_threadsafe(future.set_exception, ex)

    # --- async generators ----------------------------------------------------

    def _asyncgen_finalizer_hook(self, agen):
        with self._asyncgens_lock:
            self._asyncgens.discard(agen)
        if not self.is_closed():
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    def _asyncgen_firstiter_hook(self, agen):
        if self._asyncgens_shutdown_called:
            import warnings
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                f"loop.shutdown_asyncgens() call",
                ResourceWarning, source=self)
        with self._asyncgens_lock:
            self._asyncgens.add(agen)

    async def shutdown_asyncgens(self):
        self._asyncgens_shutdown_called = True
        with self._asyncgens_lock:
            if not len(self._asyncgens):
                return
            closing = list(self._asyncgens)
            self._asyncgens.clear()
        for agen in closing:
            try:
                await agen.aclose()
            except Exception as result:  # noqa: BLE001 - reported below.
                self.call_exception_handler({
                    "message": f"an error occurred during closing of "
                               f"asynchronous generator {agen!r}",
                    "exception": result,
                    "asyncgen": agen,
                })

    # --- errors and debug ----------------------------------------------------

    def get_exception_handler(self):
        return self._exception_handler

    def set_exception_handler(self, handler):
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context):
        """Log the context: the message, then every other key, and the
        exception's traceback if there is one."""
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info = ((type(exception), exception, exception.__traceback__)
                    if exception is not None else False)
        lines = [message]
        for key in sorted(context):
            if key in {"message", "exception"}:
                continue
            value = context[key]
            created = _CREATED_AT.get(key)
            if created is not None:
                # Debug mode's stacks, as frames the way tracebacks read.
                frames = "".join(traceback.format_list(value)).rstrip()
                lines.append(f"{key}: {created} (most recent call last):\n{frames}")
            else:
                lines.append(f"{key}: {value!r}")
        logger.error("\n".join(lines), exc_info=exc_info)

    def call_exception_handler(self, context):
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            # The handler runs in the context of what failed (a task's, a
            # callback handle's), as in asyncio, so it sees the context
            # variables the failing code set.
            thing = context.get("task")
            if thing is None:
                thing = context.get("future")
            if thing is None:
                thing = context.get("handle")
            ctx = thing.get_context() if hasattr(thing, "get_context") else None
            if ctx is not None and hasattr(ctx, "run"):
                ctx.run(handler, self, context)
            else:
                handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler({
                    "message": "Unhandled error in exception handler",
                    "exception": exc,
                    "context": context,
                })
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error("Exception in default exception handler "
                             "while handling an unexpected error "
                             "in custom exception handler", exc_info=True)

    def get_debug(self):
        return self._debug

    def set_debug(self, enabled):
        self._debug = bool(enabled)
        self._set_core_debug(self._debug)


def new_event_loop():
    """A new mt_asyncio event loop (the runtime starts on first use)."""
    return EventLoop()
