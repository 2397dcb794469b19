"""Synchronization primitives that are correct when their users run on
several worker threads at once.

The algorithms are asyncio's (FIFO waiters, no barging past a woken waiter,
cancel-safe hand-over), but every synchronous section that touches shared
state — the flags, the counters and the waiter queue — runs under the
object's own ``threading.Lock``. A waiter's future is completed outside that
lock. Nothing here holds the lock across an await.
"""

import collections
import threading
from asyncio import events, exceptions

__all__ = ["Lock", "Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier"]


class _ContextManagerMixin:
    async def __aenter__(self):
        await self.acquire()
        return None

    async def __aexit__(self, exc_type, exc, tb):
        self.release()


def _wake(fut, value=True):
    """Complete a waiter unless it was cancelled meanwhile. Returns True if
    this call woke it."""
    if fut.done():
        return False
    try:
        fut.set_result(value)
    except exceptions.InvalidStateError:
        return False  # Cancelled concurrently.
    return True


class Lock(_ContextManagerMixin):
    """A mutex for tasks: acquire() waits in FIFO order."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters = collections.deque()

    def __repr__(self):
        extra = "locked" if self._locked else "unlocked"
        if self._waiters:
            extra = f"{extra}, waiters:{len(self._waiters)}"
        return f"<{self.__class__.__name__} [{extra}]>"

    def locked(self):
        return self._locked

    async def acquire(self):
        loop = events.get_running_loop()
        with self._mutex:
            # Free, and nobody queued ahead of us who is still waiting.
            if not self._locked and all(w.cancelled() for w in self._waiters):
                self._locked = True
                return True
            fut = loop.create_future()
            self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            with self._mutex:
                self._waiters.remove(fut)
                # Woken but cancelled before taking it: pass the turn on.
                nxt = self._first_waiter_locked() if not self._locked else None
            if nxt is not None:
                _wake(nxt)
            raise
        # Leaving the queue and taking the lock are one step: in between, a
        # newcomer on another worker would see a free lock and no waiter.
        with self._mutex:
            self._waiters.remove(fut)
            self._locked = True
        return True

    def release(self):
        with self._mutex:
            if not self._locked:
                raise RuntimeError("Lock is not acquired.")
            self._locked = False
            nxt = self._first_waiter_locked()
        if nxt is not None:
            _wake(nxt)

    def _first_waiter_locked(self):
        for fut in self._waiters:
            if not fut.done():
                return fut
        return None


class Event:
    """A flag tasks can wait for."""

    def __init__(self):
        self._mutex = threading.Lock()
        self._waiters = collections.deque()
        self._value = False

    def __repr__(self):
        extra = "set" if self._value else "unset"
        if self._waiters:
            extra = f"{extra}, waiters:{len(self._waiters)}"
        return f"<{self.__class__.__name__} [{extra}]>"

    def is_set(self):
        return self._value

    def set(self):
        with self._mutex:
            if self._value:
                return
            self._value = True
            waiters = list(self._waiters)
        for fut in waiters:
            _wake(fut)

    def clear(self):
        with self._mutex:
            self._value = False

    async def wait(self):
        loop = events.get_running_loop()
        with self._mutex:
            if self._value:
                return True
            fut = loop.create_future()
            self._waiters.append(fut)
        try:
            await fut
            return True
        finally:
            with self._mutex:
                self._waiters.remove(fut)


class Condition(_ContextManagerMixin):
    """Tasks wait for a notification while holding an associated Lock."""

    def __init__(self, lock=None):
        if lock is None:
            lock = Lock()
        self._lock = lock
        self.locked = lock.locked
        self.acquire = lock.acquire
        self.release = lock.release
        self._mutex = threading.Lock()
        self._waiters = collections.deque()

    def __repr__(self):
        extra = "locked" if self.locked() else "unlocked"
        if self._waiters:
            extra = f"{extra}, waiters:{len(self._waiters)}"
        return f"<{self.__class__.__name__} [{extra}]>"

    async def wait(self):
        if not self.locked():
            raise RuntimeError("cannot wait on un-acquired lock")
        loop = events.get_running_loop()
        cancelled = None
        # Queue up *before* releasing the lock: the moment it is released, a
        # task on another worker may take it and notify, and that
        # notification must find us.
        fut = loop.create_future()
        with self._mutex:
            self._waiters.append(fut)
        try:
            self.release()
        except BaseException:
            with self._mutex:
                self._waiters.remove(fut)
            raise
        try:
            try:
                await fut
                return True
            except exceptions.CancelledError:
                if fut.done() and not fut.cancelled():
                    # Notified, then cancelled: the notification goes on to
                    # another waiter rather than being lost.
                    self._notify(1)
                raise
            finally:
                with self._mutex:
                    self._waiters.remove(fut)
        finally:
            # Re-acquire even if cancelled; remember the cancel for later.
            while True:
                try:
                    await self.acquire()
                    break
                except exceptions.CancelledError as exc:
                    cancelled = exc
            try:
                if cancelled is not None:
                    raise cancelled
            finally:
                cancelled = None

    async def wait_for(self, predicate):
        result = predicate()
        while not result:
            await self.wait()
            result = predicate()
        return result

    def notify(self, n=1):
        if not self.locked():
            raise RuntimeError("cannot notify on un-acquired lock")
        self._notify(n)

    def _notify(self, n):
        woken = 0
        with self._mutex:
            candidates = list(self._waiters)
        for fut in candidates:
            if woken >= n:
                break
            if _wake(fut, False):
                woken += 1

    def notify_all(self):
        self.notify(len(self._waiters))


class Semaphore(_ContextManagerMixin):
    """A counter of permits; acquire() waits in FIFO order when none is
    left."""

    def __init__(self, value=1):
        if value < 0:
            raise ValueError("Semaphore initial value must be >= 0")
        self._mutex = threading.Lock()
        self._waiters = collections.deque()
        self._value = value

    def __repr__(self):
        extra = "locked" if self.locked() else f"unlocked, value:{self._value}"
        if self._waiters:
            extra = f"{extra}, waiters:{len(self._waiters)}"
        return f"<{self.__class__.__name__} [{extra}]>"

    def locked(self):
        with self._mutex:
            return self._value == 0 or any(not w.cancelled() for w in self._waiters)

    async def acquire(self):
        loop = events.get_running_loop()
        with self._mutex:
            if self._value > 0 and all(w.cancelled() for w in self._waiters):
                self._value -= 1
                return True
            fut = loop.create_future()
            self._waiters.append(fut)
        try:
            try:
                await fut
            finally:
                with self._mutex:
                    self._waiters.remove(fut)
        except exceptions.CancelledError:
            # Woken (a permit was reserved for us) but cancelled: give the
            # permit back to the next waiter.
            if fut.done() and not fut.cancelled():
                with self._mutex:
                    self._value += 1
            self._wake_next()
            raise
        return True

    def release(self):
        with self._mutex:
            self._check_release_locked()
            self._value += 1
        self._wake_next()

    def _check_release_locked(self):
        pass

    def _wake_next(self):
        # Hand a permit to the first live waiter; the permit is taken out of
        # the counter here, under the lock, so a newcomer cannot take it.
        while True:
            with self._mutex:
                if self._value <= 0:
                    return
                nxt = None
                for fut in self._waiters:
                    if not fut.done():
                        nxt = fut
                        break
                if nxt is None:
                    return
                self._value -= 1
            if _wake(nxt):
                return
            with self._mutex:
                self._value += 1  # It was cancelled meanwhile; try the next.


class BoundedSemaphore(Semaphore):
    """A Semaphore that refuses to be released above its initial value."""

    def __init__(self, value=1):
        self._bound_value = value
        super().__init__(value)

    def _check_release_locked(self):
        if self._value >= self._bound_value:
            raise ValueError("BoundedSemaphore released too many times")


class _BarrierState:
    FILLING = "filling"
    DRAINING = "draining"
    RESETTING = "resetting"
    BROKEN = "broken"


class Barrier:
    """Blocks tasks until `parties` of them are waiting, then releases them
    all (each gets its arrival index)."""

    def __init__(self, parties):
        if parties < 1:
            raise ValueError("parties must be >= 1")
        self._cond = Condition()
        self._parties = parties
        self._state = _BarrierState.FILLING
        self._count = 0

    def __repr__(self):
        extra = f"{self._state}"
        if not self.broken:
            extra += f", waiters:{self.n_waiting}/{self.parties}"
        return f"<{self.__class__.__name__} [{extra}]>"

    async def __aenter__(self):
        return await self.wait()

    async def __aexit__(self, *args):
        pass

    async def wait(self):
        """Wait for the barrier; returns this task's arrival index."""
        async with self._cond:
            await self._block()
            try:
                index = self._count
                self._count += 1
                if index + 1 == self._parties:
                    self._state = _BarrierState.DRAINING
                    self._cond.notify_all()
                else:
                    await self._cond.wait_for(
                        lambda: self._state != _BarrierState.FILLING)
                    if self._state in (_BarrierState.BROKEN, _BarrierState.RESETTING):
                        raise exceptions.BrokenBarrierError("Abort or reset of barrier")
                return index
            finally:
                self._count -= 1
                if self._count == 0:
                    if self._state in (_BarrierState.RESETTING, _BarrierState.DRAINING):
                        self._state = _BarrierState.FILLING
                    self._cond.notify_all()

    async def _block(self):
        # A new round cannot start while the last one drains or resets.
        await self._cond.wait_for(lambda: self._state not in (
            _BarrierState.DRAINING, _BarrierState.RESETTING))
        if self._state == _BarrierState.BROKEN:
            raise exceptions.BrokenBarrierError("Barrier aborted")

    async def reset(self):
        """Back to the empty state; tasks waiting get BrokenBarrierError."""
        async with self._cond:
            if self._count > 0:
                self._state = _BarrierState.RESETTING
            else:
                self._state = _BarrierState.FILLING
            self._cond.notify_all()

    async def abort(self):
        """Break the barrier: present and future waiters get
        BrokenBarrierError."""
        async with self._cond:
            self._state = _BarrierState.BROKEN
            self._cond.notify_all()

    @property
    def parties(self):
        return self._parties

    @property
    def n_waiting(self):
        return self._count if self._state == _BarrierState.FILLING else 0

    @property
    def broken(self):
        return self._state == _BarrierState.BROKEN
