"""Queue, LifoQueue and PriorityQueue safe for producers and consumers on
several worker threads, with asyncio's shutdown() semantics.

The items, the waiter queues and the unfinished-task count are under the
queue's own ``threading.Lock``; waiters are woken outside it, and a woken
waiter that was cancelled before it could act passes its turn on.
"""

import collections
import heapq
import threading
from asyncio import events
from asyncio.queues import QueueEmpty, QueueFull, QueueShutDown

from . import locks

__all__ = ["Queue", "PriorityQueue", "LifoQueue", "QueueFull", "QueueEmpty",
           "QueueShutDown"]


class Queue:
    """A FIFO queue for tasks; maxsize <= 0 means unbounded."""

    def __init__(self, maxsize=0):
        self._maxsize = maxsize
        self._mutex = threading.Lock()
        self._getters = collections.deque()
        self._putters = collections.deque()
        self._unfinished_tasks = 0
        self._finished = locks.Event()
        self._finished.set()
        self._is_shutdown = False
        self._init(maxsize)

    # Overridden by LifoQueue and PriorityQueue.
    def _init(self, maxsize):
        self._queue = collections.deque()

    def _get(self):
        return self._queue.popleft()

    def _put(self, item):
        self._queue.append(item)

    def __repr__(self):
        return f"<{type(self).__name__} at {id(self):#x} {self._format()}>"

    def __str__(self):
        return f"<{type(self).__name__} {self._format()}>"

    def _format(self):
        result = f"maxsize={self._maxsize!r}"
        if getattr(self, "_queue", None):
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

    def qsize(self):
        return len(self._queue)

    @property
    def maxsize(self):
        return self._maxsize

    def empty(self):
        return not self._queue

    def full(self):
        return 0 < self._maxsize <= self.qsize()

    @staticmethod
    def _pop_live(waiters):
        # Called under the mutex: the first waiter not yet done, removed.
        while waiters:
            w = waiters.popleft()
            if not w.done():
                return w
        return None

    def _put_locked(self, item):
        self._put(item)
        self._unfinished_tasks += 1
        self._finished.clear()
        return self._pop_live(self._getters)

    async def put(self, item):
        """Put an item, waiting while the queue is full."""
        loop = events.get_running_loop()
        while True:
            with self._mutex:
                if self._is_shutdown:
                    raise QueueShutDown
                if not self.full():
                    getter = self._put_locked(item)
                    break
                putter = loop.create_future()
                self._putters.append(putter)
            try:
                await putter
            except BaseException:
                putter.cancel()
                with self._mutex:
                    try:
                        self._putters.remove(putter)
                    except ValueError:
                        pass  # A getter popped it to wake it.
                    nxt = (self._pop_live(self._putters)
                           if not self.full() and not self._is_shutdown else None)
                if nxt is not None:
                    locks._wake(nxt, None)
                raise
        if getter is not None:
            locks._wake(getter, None)

    def put_nowait(self, item):
        """Put an item now; QueueFull if there is no room."""
        with self._mutex:
            if self._is_shutdown:
                raise QueueShutDown
            if self.full():
                raise QueueFull
            getter = self._put_locked(item)
        if getter is not None:
            locks._wake(getter, None)

    async def get(self):
        """Remove and return an item, waiting while the queue is empty."""
        loop = events.get_running_loop()
        while True:
            with self._mutex:
                if self._queue:
                    item = self._get()
                    putter = self._pop_live(self._putters)
                    break
                if self._is_shutdown:
                    raise QueueShutDown
                getter = loop.create_future()
                self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                with self._mutex:
                    try:
                        self._getters.remove(getter)
                    except ValueError:
                        pass  # A putter popped it to wake it.
                    nxt = self._pop_live(self._getters) if self._queue else None
                if nxt is not None:
                    locks._wake(nxt, None)
                raise
        if putter is not None:
            locks._wake(putter, None)
        return item

    def get_nowait(self):
        """Remove and return an item now; QueueEmpty if there is none."""
        with self._mutex:
            if not self._queue:
                if self._is_shutdown:
                    raise QueueShutDown
                raise QueueEmpty
            item = self._get()
            putter = self._pop_live(self._putters)
        if putter is not None:
            locks._wake(putter, None)
        return item

    def task_done(self):
        """One item taken earlier is fully processed."""
        with self._mutex:
            if self._unfinished_tasks <= 0:
                raise ValueError("task_done() called too many times")
            self._unfinished_tasks -= 1
            finished = self._unfinished_tasks == 0
        if finished:
            self._finished.set()

    async def join(self):
        """Wait until every item put has been marked done."""
        if self._unfinished_tasks > 0:
            await self._finished.wait()

    def shutdown(self, immediate=False):
        """Refuse new items; wake every blocked put(). With `immediate`,
        also drop what is queued and wake every blocked get()."""
        with self._mutex:
            self._is_shutdown = True
            if immediate:
                while self._queue:
                    self._get()
                    if self._unfinished_tasks > 0:
                        self._unfinished_tasks -= 1
            finished = self._unfinished_tasks == 0
            waiters = list(self._getters) + list(self._putters)
            self._getters.clear()
            self._putters.clear()
        if immediate and finished:
            self._finished.set()
        for w in waiters:
            locks._wake(w, None)


class PriorityQueue(Queue):
    """Lowest item first (heapq order)."""

    def _init(self, maxsize):
        self._queue = []

    def _put(self, item, heappush=heapq.heappush):
        heappush(self._queue, item)

    def _get(self, heappop=heapq.heappop):
        return heappop(self._queue)


class LifoQueue(Queue):
    """Last in, first out."""

    def _init(self, maxsize):
        self._queue = []

    def _put(self, item):
        self._queue.append(item)

    def _get(self):
        return self._queue.pop()
