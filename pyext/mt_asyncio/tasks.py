"""Task helpers and combinators that stay correct when done callbacks run
in parallel on several workers.

stdlib's gather() and wait() count finished children in closure variables
updated from done callbacks; on mt_asyncio two children can finish on two
workers at the same moment, so every piece of shared bookkeeping here is
under a lock, and every "check, then complete the outer future" tolerates
losing a race to a concurrent cancel.
"""

import asyncio as _stdlib_asyncio
import reprlib
import threading
from asyncio import base_futures, coroutines, events, exceptions, futures

from . import _core

__all__ = [
    "Task", "create_task", "ensure_future", "current_task", "all_tasks",
    "gather", "wait", "shield", "sleep", "as_completed",
    "run_coroutine_threadsafe", "eager_task_factory", "create_eager_task_factory",
    "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED",
]

Task = _core.Task
sleep = _stdlib_asyncio.sleep  # Built on call_later and futures: safe here.

FIRST_COMPLETED = _stdlib_asyncio.FIRST_COMPLETED
FIRST_EXCEPTION = _stdlib_asyncio.FIRST_EXCEPTION
ALL_COMPLETED = _stdlib_asyncio.ALL_COMPLETED


# stdlib's own, kept before compat.install() points asyncio.current_task
# and all_tasks at ours (which would then call themselves).
_stdlib_current_task = _stdlib_asyncio.tasks.current_task
_stdlib_all_tasks = _stdlib_asyncio.tasks.all_tasks


def current_task(loop=None):
    """The task running on this thread (its loop must be `loop` if given)."""
    if loop is None:
        loop = events.get_running_loop()
    task = _core._current_task()
    if task is None:
        # A stdlib task on a stdlib loop, or none at all.
        return _stdlib_current_task(loop)
    return task if task.get_loop() is loop else None


def all_tasks(loop=None):
    """The loop's tasks that are not done yet."""
    if loop is None:
        loop = events.get_running_loop()
    if isinstance(loop, _core.Loop):
        # The loop keeps a registry of its pending tasks (C++, sharded).
        return {t for t in loop._all_tasks() if not t.done()}
    return _stdlib_all_tasks(loop)


def create_task(coro, **kwargs):
    """Schedule a coroutine on the running loop; return its Task."""
    loop = events.get_running_loop()
    return loop.create_task(coro, **kwargs)


def ensure_future(coro_or_future, *, loop=None):
    """A future for the argument: futures as they are, coroutines and
    awaitables wrapped in a Task."""
    if futures.isfuture(coro_or_future):
        if loop is not None and loop is not futures._get_loop(coro_or_future):
            raise ValueError("The future belongs to a different loop than "
                             "the one specified as the loop argument")
        return coro_or_future
    if not coroutines.iscoroutine(coro_or_future):
        if hasattr(coro_or_future, "__await__"):
            coro_or_future = _wrap_awaitable(coro_or_future)
        else:
            raise TypeError("An asyncio.Future, a coroutine or an awaitable "
                            "is required")
    if loop is None:
        loop = events.get_event_loop()
    return loop.create_task(coro_or_future)


async def _wrap_awaitable(awaitable):
    return await awaitable


# gather() wraps coroutines itself; everything else goes through here.
_core._set_gather_fallback(ensure_future)


# stdlib's own: its factory runs the first step inside create_task (our
# Task does that, on the calling worker, when the loop is running there),
# and libraries recognize an eager factory by stdlib's code object (anyio
# reads the task constructor out of its closure and starts its own tasks
# lazily, which it needs); a factory of ours with its own code would not be
# recognized by a library imported before compat.install().
create_eager_task_factory = _stdlib_asyncio.tasks.create_eager_task_factory


eager_task_factory = create_eager_task_factory(Task)


@reprlib.recursive_repr()
def _running_task_repr(task):
    """repr() of a task that another worker is stepping right now: stdlib's
    form, with the coroutine shown as "name() running" and no "at
    file:line" (its frame cannot be read while another thread executes
    it; see Task._while_not_stepped)."""
    info = base_futures._future_repr_info(task)
    if task.cancelling() and not task.done():
        info[0] = "cancelling"
    info.insert(1, f"name={task.get_name()!r}")
    fut_waiter = task._fut_waiter
    if fut_waiter is not None:
        info.insert(2, f"wait_for={fut_waiter!r}")
    coro = task._coro
    if coro:
        name = (getattr(coro, "__qualname__", None) or getattr(coro, "__name__", None)
                or f"<{type(coro).__name__} without __name__>")
        info.insert(2, f"coro=<{name}() running>")
    return f"<{type(task).__name__} {' '.join(info)}>"


_core._set_running_task_repr(_running_task_repr)


# gather() is C++ (pyext/src/loop/gather.cc): its children report through a
# native done callback that tolerates finishing on several workers at once,
# with no Python frame or loop round trip per child.
_GatheringFuture = _core._GatheringFuture
gather = _core.gather


def _complete(setter, value):
    # Losing the race to a concurrent cancel() of the outer future is fine.
    try:
        setter(value)
    except exceptions.InvalidStateError:
        pass


async def wait(fs, *, timeout=None, return_when=ALL_COMPLETED):
    """Wait for futures and tasks; return (done, pending) sets."""
    if futures.isfuture(fs) or coroutines.iscoroutine(fs):
        raise TypeError(f"expect a list of futures, not {type(fs).__name__}")
    # Copied before the emptiness check: a set that other workers empty
    # meanwhile (tasks removing themselves when done) must not pass the
    # check and then be waited on empty, which would never return.
    fs = set(fs)
    if not fs:
        raise ValueError("Set of Tasks/Futures is empty.")
    if return_when not in (FIRST_COMPLETED, FIRST_EXCEPTION, ALL_COMPLETED):
        raise ValueError(f"Invalid return_when value: {return_when}")
    if any(coroutines.iscoroutine(f) for f in fs):
        raise TypeError("Passing coroutines is forbidden, use tasks explicitly.")
    loop = events.get_running_loop()
    return await _wait(fs, timeout, return_when, loop)


async def _wait(fs, timeout, return_when, loop):
    waiter = loop.create_future()
    cur_task = current_task()
    lock = threading.Lock()
    state = {"left": len(fs)}
    timeout_handle = None
    if timeout is not None:
        timeout_handle = loop.call_later(timeout, _release_waiter, waiter)

    def _on_completion(f):
        with lock:
            state["left"] -= 1
            left = state["left"]
        _core.future_discard_from_awaited_by(f, cur_task)
        if (left <= 0 or return_when == FIRST_COMPLETED
                or (return_when == FIRST_EXCEPTION and not f.cancelled()
                    and f.exception() is not None)):
            _release_waiter(waiter)

    for f in fs:
        f.add_done_callback(_on_completion)
        _core.future_add_to_awaited_by(f, cur_task)
    try:
        await waiter
    finally:
        if timeout_handle is not None:
            timeout_handle.cancel()
        for f in fs:
            f.remove_done_callback(_on_completion)
            _core.future_discard_from_awaited_by(f, cur_task)
    done, pending = set(), set()
    for f in fs:
        (done if f.done() else pending).add(f)
    return done, pending


def _release_waiter(waiter, *args):
    if not waiter.done():
        _complete(waiter.set_result, None)


async def _cancel_and_wait(fut):
    loop = events.get_running_loop()
    waiter = loop.create_future()
    cb = lambda f: _release_waiter(waiter)  # noqa: E731
    fut.add_done_callback(cb)
    try:
        fut.cancel()
        await waiter
    finally:
        fut.remove_done_callback(cb)


def shield(arg):
    """Protect an awaitable from cancellation of the task awaiting it."""
    # The task calling shield() awaits `inner` until inner is done
    # (call-graph introspection). A task made here from a coroutine is
    # recorded so before its first step, as it is on one thread.
    loop = events._get_running_loop()
    cur_task = current_task(loop) if loop is not None else None
    if cur_task is not None and coroutines.iscoroutine(arg):
        inner = _core._create_awaited_task(loop, cur_task, arg, None, None)
        if inner.done():  # An eager task that finished in its first step.
            _core.future_discard_from_awaited_by(inner, cur_task)
            return inner
    else:
        inner = ensure_future(arg)
        if inner.done():
            return inner
        loop = futures._get_loop(inner)
        cur_task = current_task(loop) if loop is not None else None
        if cur_task is not None:
            _core.future_add_to_awaited_by(inner, cur_task)
    outer = loop.create_future()
    if cur_task is not None:
        inner.add_done_callback(
            lambda inner: _core.future_discard_from_awaited_by(inner, cur_task))

    def _inner_done_callback(inner):
        if outer.cancelled():
            if not inner.cancelled():
                inner.exception()  # Mark it retrieved.
            return
        if inner.cancelled():
            outer.cancel()
        else:
            exc = inner.exception()
            if exc is not None:
                _complete(outer.set_exception, exc)
            else:
                _complete(outer.set_result, inner.result())

    def _outer_done_callback(outer):
        if not inner.done():
            inner.remove_done_callback(_inner_done_callback)

    inner.add_done_callback(_inner_done_callback)
    outer.add_done_callback(_outer_done_callback)
    return outer


class _Channel:
    """Items put from any thread (done callbacks on any worker), taken with
    ``await get()`` by one consumer."""

    def __init__(self, loop):
        self._loop = loop
        self._lock = threading.Lock()
        self._items = []
        self._waiter = None

    def put(self, item):
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            _release_waiter(waiter)

    async def get(self):
        while True:
            with self._lock:
                if self._items:
                    return self._items.pop(0)
                self._waiter = waiter = self._loop.create_future()
            await waiter


class _AsCompletedIterator:
    """What as_completed() returns: iterate it plainly to get awaitables
    (each resolves to the next result to finish), or with ``async for`` to
    get the futures themselves in completion order."""

    _TIMEOUT = object()

    def __init__(self, aws, timeout):
        loop = events.get_event_loop()
        todo = {ensure_future(aw, loop=loop) for aw in set(aws)}
        self._channel = _Channel(loop)
        self._left = len(todo)
        self._todo = todo
        self._timeout_handle = None
        if timeout is not None and todo:
            self._timeout_handle = loop.call_later(timeout, self._handle_timeout)
        # A snapshot: a future already done has its callback run at once on
        # another worker, which takes it out of the set meanwhile.
        for f in list(todo):
            f.add_done_callback(self._handle_completion)

    def _handle_completion(self, f):
        with self._channel._lock:
            if f not in self._todo:
                return  # Already reported as timed out.
            self._todo.discard(f)
            last = not self._todo
        self._channel.put(f)
        if last and self._timeout_handle is not None:
            self._timeout_handle.cancel()

    def _handle_timeout(self):
        with self._channel._lock:
            pending = list(self._todo)
            self._todo.clear()
        for f in pending:
            f.remove_done_callback(self._handle_completion)
            self._channel.put(self._TIMEOUT)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if not self._left:
            raise StopAsyncIteration
        self._left -= 1
        return await self._wait_for_one()

    def __iter__(self):
        return self

    def __next__(self):
        if not self._left:
            raise StopIteration
        self._left -= 1
        return self._wait_for_one(resolve=True)

    async def _wait_for_one(self, resolve=False):
        f = await self._channel.get()
        if f is self._TIMEOUT:
            raise TimeoutError
        return f.result() if resolve else f


def as_completed(fs, *, timeout=None):
    """Iterate over awaitables in the order they complete."""
    if futures.isfuture(fs) or coroutines.iscoroutine(fs):
        raise TypeError(f"expect an iterable of futures, not {type(fs).__name__}")
    return _AsCompletedIterator(fs, timeout)


def run_coroutine_threadsafe(coro, loop):
    """Submit a coroutine to `loop` from any thread; return a
    concurrent.futures.Future for its result."""
    import concurrent.futures

    if not coroutines.iscoroutine(coro):
        raise TypeError("A coroutine object is required")
    result = concurrent.futures.Future()

    def callback():
        try:
            futures._chain_future(ensure_future(coro, loop=loop), result)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if result.set_running_or_notify_cancel():
                result.set_exception(exc)
            raise

    loop.call_soon_threadsafe(callback)
    return result
