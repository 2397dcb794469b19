"""Synchronization primitives that are correct when their users run on
several worker threads at once.

Lock, Semaphore, BoundedSemaphore, Event and Condition derive from the C++
types of ``_core`` (pyext/src/locks.cc, condition.cc): their state and FIFO
of waiters are under a per-object mutex, and acquire()/wait()/``async
with`` run without a Python frame. The algorithms are asyncio's (FIFO
waiters, no barging past a woken waiter, a cancelled waiter passes its turn
on). Barrier is built on Condition here. Nothing holds a lock across an
await.
"""

from asyncio import exceptions

from . import _core

__all__ = ["Lock", "Event", "Condition", "Semaphore", "BoundedSemaphore", "Barrier"]


def _describe(obj, extra):
    waiters = obj._waiters
    if waiters:
        extra = f"{extra}, waiters:{len(waiters)}"
    return f"<{object.__repr__(obj)[1:-1]} [{extra}]>"


async def _aenter_via_acquire(self):
    await self.acquire()
    return None


async def _aexit_via_release(self, exc_type, exc, tb):
    self.release()


class _ContextViaOverrides:
    """The C++ types' ``async with`` goes straight to their own acquire and
    release. asyncio's calls ``self.acquire()``/``self.release()``, so a
    subclass that overrides either gets asyncio's __aenter__/__aexit__."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "acquire" in cls.__dict__ or "release" in cls.__dict__:
            cls.__aenter__ = _aenter_via_acquire
            cls.__aexit__ = _aexit_via_release


class Lock(_ContextViaOverrides, _core.Lock):
    """A mutex for tasks: acquire() waits in FIFO order."""

    def __repr__(self):
        return _describe(self, "locked" if self.locked() else "unlocked")


class Event(_core.Event):
    """A flag tasks can wait for."""

    def __repr__(self):
        return _describe(self, "set" if self.is_set() else "unset")


class Condition(_core.Condition):
    """Tasks wait for a notification while holding an associated Lock."""

    def __init__(self, lock=None):
        if lock is None:
            lock = Lock()
        super().__init__(lock)
        self.locked = lock.locked
        self.acquire = lock.acquire
        self.release = lock.release

    def __repr__(self):
        return _describe(self, "locked" if self.locked() else "unlocked")

    # `async with cond` is `async with cond._lock`: with our Lock, the C++
    # awaiters, no Python frame.
    def __aenter__(self):
        return self._lock.__aenter__()

    def __aexit__(self, exc_type, exc, tb):
        return self._lock.__aexit__(exc_type, exc, tb)

    async def wait_for(self, predicate):
        result = predicate()
        while not result:
            await self.wait()
            result = predicate()
        return result


class Semaphore(_ContextViaOverrides, _core.Semaphore):
    """A counter of permits; acquire() waits in FIFO order when none is
    left."""

    def __repr__(self):
        extra = "locked" if self.locked() else f"unlocked, value:{self._value}"
        return _describe(self, extra)


class BoundedSemaphore(_ContextViaOverrides, _core.BoundedSemaphore):
    """A Semaphore that refuses to be released above its initial value."""

    def __repr__(self):
        extra = "locked" if self.locked() else f"unlocked, value:{self._value}"
        return _describe(self, extra)


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
        return f"<{object.__repr__(self)[1:-1]} [{extra}]>"

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
