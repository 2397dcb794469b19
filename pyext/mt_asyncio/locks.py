"""Synchronization primitives that are correct when their users run on
several worker threads at once.

Lock, Semaphore, BoundedSemaphore, Event, Condition and Barrier derive from
the C++ types of ``_core`` (pyext/src/sync/locks.cc, condition.cc, barrier.cc):
their state and FIFO of waiters are under a per-object mutex, and
acquire()/wait()/``async with`` run without a Python frame. The algorithms
are asyncio's (FIFO waiters, no barging past a woken waiter, a cancelled
waiter passes its turn on). Nothing holds a lock across an await.
"""


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


async def _aenter_via_wait(self):
    return await self.wait()


class Barrier(_core.Barrier):
    """Blocks tasks until `parties` of them are waiting, then releases them
    all (each gets its arrival index)."""

    def __init_subclass__(cls, **kwargs):
        # As for locks: asyncio's __aenter__ awaits self.wait(), so a
        # subclass that overrides wait() gets it called by `async with`.
        super().__init_subclass__(**kwargs)
        if cls.wait is not _core.Barrier.wait:
            cls.__aenter__ = _aenter_via_wait

    def __repr__(self):
        extra = self._state
        if not self.broken:
            extra += f", waiters:{self.n_waiting}/{self.parties}"
        return f"<{object.__repr__(self)[1:-1]} [{extra}]>"
