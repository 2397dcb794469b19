"""Scenarios: Lock, Event, Condition, Semaphore, BoundedSemaphore — under
contention from many tasks (on mt_asyncio, from several workers at once)."""

import threading
import time

from harness import aobserve, observe, scenario


class _Gauge:
    """Counts holders at once; records the maximum (thread-safe)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.max = 0
        self.total = 0

    def enter(self):
        with self.lock:
            self.now += 1
            self.total += 1
            self.max = max(self.max, self.now)

    def leave(self):
        with self.lock:
            self.now -= 1


def _nwaiters(primitive):
    # How many tasks wait on it (stdlib creates its deque lazily).
    return len(primitive._waiters or ())


async def _queue_in_order(aio, primitive, coros):
    """Tasks for `coros`, each started only once the previous one waits on
    `primitive`, so their places in its FIFO are defined."""
    tasks = []
    for coro in coros:
        tasks.append(aio.create_task(coro))
        while _nwaiters(primitive) < len(tasks):
            await aio.sleep(0.001)
    return tasks


def _spin(n=2000):
    x = 0
    for i in range(n):
        x += i
    return x


@scenario
async def lock_mutual_exclusion_under_contention(aio):
    lock = aio.Lock()
    gauge = _Gauge()

    async def worker():
        for _ in range(20):
            async with lock:
                gauge.enter()
                _spin()
                await aio.sleep(0)
                gauge.leave()
    await aio.gather(*(worker() for _ in range(16)))
    return [gauge.max, gauge.total, lock.locked()]


@scenario
async def lock_release_unlocked(aio):
    return observe(aio.Lock().release)[:2]


@scenario
async def lock_fifo_order(aio):
    lock = aio.Lock()
    order = []
    await lock.acquire()

    async def waiter(i):
        async with lock:
            order.append(i)
    tasks = await _queue_in_order(aio, lock, [waiter(i) for i in range(5)])
    lock.release()
    await aio.gather(*tasks)
    return order


async def _held_lock_with_two_waiters(aio):
    """A held Lock with tasks a then b queued on it; `got` records who
    held it, in order."""
    lock = aio.Lock()
    await lock.acquire()
    got = []

    async def waiter(i):
        async with lock:
            got.append(i)
    a, b = await _queue_in_order(aio, lock, [waiter("a"), waiter("b")])
    return lock, got, a, b


@scenario
async def lock_cancelled_waiter_passes_turn(aio):
    lock, got, a, b = await _held_lock_with_two_waiters(aio)
    a.cancel()
    lock.release()
    await aobserve(a)
    await b
    return [got, lock.locked()]


@scenario
async def event_wakes_every_waiter(aio):
    ev = aio.Event()
    woke = []

    async def waiter(i):
        await ev.wait()
        woke.append(i)
    ts = [aio.create_task(waiter(i)) for i in range(30)]
    await aio.sleep(0.01)
    before = [ev.is_set(), len(woke)]
    ev.set()
    await aio.gather(*ts)
    ev.clear()
    return [before, sorted(woke), ev.is_set()]


@scenario
async def event_wait_when_set_returns_at_once(aio):
    ev = aio.Event()
    ev.set()
    return await ev.wait()


@scenario
async def event_waiter_cancel(aio):
    ev = aio.Event()
    t = aio.create_task(ev.wait())
    await aio.sleep(0.005)
    t.cancel()
    r = await aobserve(t)
    ev.set()
    return [r[:2], _nwaiters(ev)]


@scenario
async def semaphore_bounds_holders(aio):
    sem = aio.Semaphore(3)
    gauge = _Gauge()

    async def worker():
        for _ in range(10):
            async with sem:
                gauge.enter()
                _spin()
                await aio.sleep(0)
                gauge.leave()
    await aio.gather(*(worker() for _ in range(12)))
    return [gauge.max <= 3, gauge.max >= 1, gauge.total, sem.locked()]


@scenario
async def semaphore_cancelled_waiters_do_not_leak_permits(aio):
    sem = aio.Semaphore(1)
    await sem.acquire()
    waiters = [aio.create_task(sem.acquire()) for _ in range(5)]
    while _nwaiters(sem) < 5:
        await aio.sleep(0.001)
    for w in waiters[:4]:
        w.cancel()
    sem.release()
    results = [await aobserve(w) for w in waiters]
    sem.release()
    return [[r[0] for r in results], sem._value, sem.locked()]


@scenario
async def semaphore_negative_value(aio):
    return observe(aio.Semaphore, -1)[:2]


@scenario
async def bounded_semaphore_over_release(aio):
    sem = aio.BoundedSemaphore(2)
    await sem.acquire()
    sem.release()
    return observe(sem.release)[:2]


@scenario
async def condition_notify_and_wait_for(aio):
    cond = aio.Condition()
    items = []
    consumed = []

    async def consumer():
        async with cond:
            await cond.wait_for(lambda: items)
            consumed.append(items.pop())
    ts = [aio.create_task(consumer()) for _ in range(5)]
    await aio.sleep(0.01)
    for i in range(5):
        async with cond:
            items.append(i)
            cond.notify(1)
        await aio.sleep(0.002)
    await aio.gather(*ts)
    return sorted(consumed)


async def _notified(cond, log, i):
    """Waits on `cond` once, then logs `i` (still holding its lock)."""
    async with cond:
        await cond.wait()
        log.append(i)


@scenario
async def condition_notify_all(aio):
    cond = aio.Condition()
    ready = []
    ts = [aio.create_task(_notified(cond, ready, i)) for i in range(10)]
    while _nwaiters(cond) < 10:
        await aio.sleep(0.001)
    async with cond:
        cond.notify_all()
    await aio.gather(*ts)
    return sorted(ready)


@scenario
async def condition_shares_lock(aio):
    lock = aio.Lock()
    cond = aio.Condition(lock)
    async with lock:
        return [cond.locked(), lock.locked()]


# --- acquire()/wait() as coroutines, hand-over edge cases ---------------------------------


@scenario
async def primitive_waits_are_coroutines_for_create_task(aio):
    lock, sem, ev = aio.Lock(), aio.Semaphore(1), aio.Event()
    kinds = []
    for make in (lock.acquire, sem.acquire, ev.wait):
        c = make()
        kinds.append(aio.iscoroutine(c))
        c.close()
    ev.set()
    got = [await aio.create_task(lock.acquire()), await aio.create_task(sem.acquire()),
           await aio.ensure_future(ev.wait())]
    return [kinds, got, lock.locked(), sem.locked()]


@scenario
async def primitive_wait_does_nothing_until_awaited(aio):
    lock = aio.Lock()
    pending = lock.acquire()
    before = lock.locked()
    got = await pending
    return [before, got, lock.locked()]


@scenario
async def primitive_awaiting_one_acquire_twice(aio):
    lock = aio.Lock()
    c = lock.acquire()
    await c
    second = await aobserve(c)
    return [second, lock.locked()]


@scenario
async def lock_woken_waiter_cancelled_before_running_hands_on(aio):
    lock, got, a, b = await _held_lock_with_two_waiters(aio)
    lock.release()  # Wakes a...
    a.cancel()      # ...which is cancelled before it can take the lock.
    ra = await aobserve(a)
    await aio.wait_for(b, 5)
    return [ra[:2], got, lock.locked(), _nwaiters(lock)]


@scenario
async def semaphore_woken_waiter_cancelled_returns_permit(aio):
    sem = aio.Semaphore(1)
    await sem.acquire()
    a, b = await _queue_in_order(aio, sem, [sem.acquire(), sem.acquire()])
    sem.release()
    a.cancel()
    ra = await aobserve(a)
    rb = await aio.wait_for(b, 5)
    return [ra[:2], rb, sem._value, sem.locked(), _nwaiters(sem)]


@scenario
async def semaphore_newcomer_queues_behind_woken_waiter(aio):
    sem = aio.Semaphore(1)
    await sem.acquire()
    order = []

    async def take(i):
        async with sem:
            order.append(i)
    a = aio.create_task(take("first"))
    while _nwaiters(sem) < 1:
        await aio.sleep(0.001)
    sem.release()
    # The permit is a's now, though a has not run yet.
    late = [sem.locked(), sem._value]
    await take("newcomer")
    await a
    return [late, order, sem._value]


@scenario
async def primitive_wait_for_timeouts_leave_no_waiter(aio):
    lock, sem, ev = aio.Lock(), aio.Semaphore(0), aio.Event()
    await lock.acquire()
    outcomes = [await aobserve(aio.wait_for(w, 0.01))
                for w in (lock.acquire(), sem.acquire(), ev.wait())]
    lock.release()
    sem.release()
    return [[o[:2] for o in outcomes], _nwaiters(lock), _nwaiters(sem), _nwaiters(ev),
            lock.locked(), sem._value, await aio.wait_for(lock.acquire(), 5)]


@scenario
async def primitive_bad_constructor_arguments(aio):
    return [observe(aio.Semaphore, "x")[:2], observe(aio.BoundedSemaphore, -2)[:2],
            observe(aio.Event, 1)[:2], observe(aio.Lock, 1)[:2],
            observe(aio.Semaphore, value=4)[0]]


@scenario
async def primitive_reprs(aio):
    lock, sem, ev = aio.Lock(), aio.BoundedSemaphore(2), aio.Event()
    await lock.acquire()
    await sem.acquire()
    ev.set()
    # Drop the "<module.Class object at 0x...": the module differs by design.
    return [repr(x).rsplit(" [", 1)[1] for x in (lock, sem, ev)] + [
        repr(lock).split(" object at ")[0].rsplit(".", 1)[1]]


@scenario
async def condition_wait_cancelled_holds_lock_again(aio):
    cond = aio.Condition()
    seen = []

    async def waiter():
        async with cond:
            try:
                await cond.wait()
            except aio.CancelledError:
                seen.append(("cancelled", cond.locked()))
                raise
    task = await _queue_in_order(aio, cond, [waiter()])
    # Cancelled while another task holds the lock: wait() must take it back
    # before the CancelledError comes out.
    async with cond:
        task[0].cancel()
        await aio.sleep(0.01)
        during = [task[0].done(), len(seen)]
    outcome = await aobserve(task[0])
    return [during, seen, outcome[:2], cond.locked(), _nwaiters(cond)]


@scenario
async def condition_notify_n_wakes_n(aio):
    cond = aio.Condition()
    woke = []
    tasks = await _queue_in_order(aio, cond, [_notified(cond, woke, i) for i in range(5)])
    async with cond:
        cond.notify(2)
    while len(woke) < 2:
        await aio.sleep(0.001)
    await aio.sleep(0.01)
    first = sorted(woke)
    async with cond:
        cond.notify(10)
    await aio.wait_for(aio.gather(*tasks), 5)
    return [first, sorted(woke), _nwaiters(cond)]


@scenario
async def condition_wait_and_notify_without_the_lock(aio):
    cond = aio.Condition()
    return [(await aobserve(cond.wait()))[:3], observe(cond.notify)[:3],
            observe(cond.notify_all)[:3], cond.locked()]


@scenario
async def lock_and_semaphore_subclasses_overriding_acquire_release(aio):
    log = []

    def logged(base):
        class Logged(base):
            async def acquire(self):
                log.append((base.__name__, "acquire"))
                return await super().acquire()

            def release(self):
                log.append((base.__name__, "release"))
                super().release()
        return Logged

    for prim in (logged(aio.Lock)(), logged(aio.Semaphore)(2),
                 logged(aio.BoundedSemaphore)(1)):
        async with prim as entered:
            log.append(("inside", entered, prim.locked()))
    cond = aio.Condition(logged(aio.Lock)())
    async with cond:
        cond.notify()
    return log


@scenario
async def condition_cancel_racing_notify_passes_wakeup(aio):
    # A waiter notified and then cancelled while it takes the lock again
    # must pass its wakeup on: the other waiter consumes the item.
    cond = aio.Condition()
    state = 0
    log = []
    order = []  # Who waits first: notify(1) wakes that one.
    ready = [aio.Event(), aio.Event()]

    async def consumer(i):
        nonlocal state
        try:
            async with cond:
                first = True
                while True:
                    if first:
                        order.append(i)
                        ready[i].set()
                        first = False
                    await cond.wait_for(lambda: state != 0)
                    if state < 0:
                        return
                    state -= 1
                    log.append("consumed by " + ("first" if i == order[0] else "second"))
        except aio.CancelledError:
            log.append(("first" if i == order[0] else "second") + " cancelled")
            raise

    c = [aio.create_task(consumer(i)) for i in range(2)]
    await ready[0].wait()
    await ready[1].wait()
    async with cond:  # Both are waiting once this lock is ours.
        state += 1
        cond.notify(1)
        await aio.sleep(0)
        c[order[0]].cancel()
        # Nobody notifies this waiter: it wakes by the timeout, and the
        # item must be gone by then (0), not still there (1).
        try:
            async with aio.timeout(0.2):
                await cond.wait_for(lambda: state == 0)
        except TimeoutError:
            pass
        log.append(f"state {state}")
        state = -1
        cond.notify_all()
    await aio.gather(*c, return_exceptions=True)
    return [state, sorted(log), c[order[0]].cancelled()]


@scenario
async def lock_waited_on_from_second_loop_raises(aio):
    # Once a task has waited on it, a primitive belongs to that loop: a
    # wait from a loop in another thread raises RuntimeError.
    lock = aio.Lock()
    await lock.acquire()
    waiter = aio.create_task(lock.acquire())
    # On a parallel loop the waiter's first step may run after this task's
    # next one: go on only once it is queued on the lock (it is after one
    # sleep(0) on asyncio's loop), so the lock is this loop's. Bounded by
    # time, not by turns: a worker the OS does not run for a while holds
    # the waiter's step however many turns this task takes meanwhile.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        await aio.sleep(0)
        if "waiters:1" in repr(lock):
            break

    def from_other_loop():
        async def use():
            try:
                await aio.wait_for(lock.acquire(), 1)
            except BaseException as e:  # noqa: BLE001
                return [type(e).__name__, "bound to a different event loop" in str(e)]
            return ["acquired"]
        return aio.run(use())

    result = await aio.to_thread(from_other_loop)
    lock.release()
    await waiter
    lock.release()
    return [result, lock.locked()]
