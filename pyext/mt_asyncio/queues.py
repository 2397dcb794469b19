"""Queue, LifoQueue and PriorityQueue safe for producers and consumers on
several worker threads, with asyncio's shutdown() semantics.

The queue itself is the C++ ``_core.Queue`` (pyext/src/sync/queues.cc): items,
waiting getters and putters and the unfinished-task count are under one
per-queue mutex, and get()/put()/join() run without a Python frame. Queue
and LifoQueue keep their items in C++. A subclass that defines its own
``_init``/``_put``/``_get`` (asyncio's subclassing contract, which
PriorityQueue uses) gets them called instead, under the queue's mutex.
"""

import collections
import heapq
import types
from asyncio.queues import QueueEmpty, QueueFull, QueueShutDown

from . import _core

__all__ = ["Queue", "PriorityQueue", "LifoQueue", "QueueFull", "QueueEmpty",
           "QueueShutDown"]

_STORAGE_METHODS = ("_init", "_put", "_get")


class Queue(_core.Queue):
    """A FIFO queue for tasks; maxsize <= 0 means unbounded."""

    # "fifo"/"lifo": items kept in C++; None: the class's _init/_put/_get.
    _native_storage = "fifo"

    __class_getitem__ = classmethod(types.GenericAlias)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Overrides count wherever they come from in the MRO (mixins too):
        # a hook that differs from the one of the class whose storage this
        # one inherits makes the storage the hooks'.
        if "_native_storage" not in cls.__dict__:
            owner = next(base for base in cls.__mro__[1:]
                         if "_native_storage" in base.__dict__)
            if (owner._native_storage is not None
                    and any(getattr(cls, name) is not getattr(owner, name)
                            for name in _STORAGE_METHODS)):
                cls._native_storage = None
        # asyncio's put()/get() end in self.put_nowait()/get_nowait(); the
        # C++ ones do not call them, so a subclass overriding either gets
        # put()/get() written asyncio's way.
        if (cls.put_nowait is not _core.Queue.put_nowait
                and cls.put is _core.Queue.put):
            cls.put = _put_via_put_nowait
        if (cls.get_nowait is not _core.Queue.get_nowait
                and cls.get is _core.Queue.get):
            cls.get = _get_via_get_nowait

    # asyncio's storage hooks, used when a subclass overrides only some of
    # them (the others then work on this deque).
    def _init(self, maxsize):
        self._queue = collections.deque()

    def _put(self, item):
        self._queue.append(item)

    def _get(self):
        return self._queue.popleft()

    def __getattr__(self, name):
        # asyncio exposes the items as `_queue`; with native storage that
        # is a snapshot.
        if name == "_queue" and type(self)._native_storage is not None:
            return collections.deque(self._items())
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        return f"<{type(self).__name__} at {id(self):#x} {self._format()}>"

    def __str__(self):
        return f"<{type(self).__name__} {self._format()}>"

    def _format(self):
        result = f"maxsize={self.maxsize!r}"
        if self._queue:
            result += f" _queue={list(self._queue)!r}"
        if self._getters:
            result += f" _getters[{len(self._getters)}]"
        if self._putters:
            result += f" _putters[{len(self._putters)}]"
        if self._unfinished_tasks:
            result += f" tasks={self._unfinished_tasks}"
        if self._is_shutdown:
            result += " shutdown"
        return result


async def _put_via_put_nowait(self, item):
    """Put an item into the queue, waiting while it is full."""
    while True:
        stores = await self._wait_for_room()  # QueueShutDown if full and shut down.
        try:
            return self.put_nowait(item)
        except QueueFull:
            # Another task filled the slot this one saw first: wait again.
            # A QueueFull with nothing stored meanwhile is the subclass's own.
            if self._stores == stores:
                raise


async def _get_via_get_nowait(self):
    """Remove and return an item, waiting while the queue is empty."""
    while True:
        takes = await self._wait_for_item()  # QueueShutDown once shut down and empty.
        try:
            return self.get_nowait()
        except QueueEmpty:
            if self._takes == takes:
                raise


class PriorityQueue(Queue):
    """Lowest item first (heapq order)."""

    _native_storage = None

    def _init(self, maxsize):
        self._queue = []

    def _put(self, item, heappush=heapq.heappush):
        heappush(self._queue, item)

    def _get(self, heappop=heapq.heappop):
        return heappop(self._queue)


class LifoQueue(Queue):
    """Last in, first out."""

    _native_storage = "lifo"

    # asyncio's LifoQueue keeps a list; a subclass overriding some hooks
    # (asyncpg's pool overrides _get and pops by index) works on one too.
    def _init(self, maxsize):
        self._queue = []

    def _put(self, item):
        self._queue.append(item)

    def _get(self):
        return self._queue.pop()
