"""Scenarios: Queue, LifoQueue, PriorityQueue (with shutdown) and Barrier,
with producers and consumers racing on several workers."""

import threading

from harness import aobserve, observe, scenario


@scenario
async def queue_loses_and_duplicates_nothing(aio):
    q = aio.Queue(maxsize=8)
    got = []
    lock = threading.Lock()

    async def producer(base):
        for i in range(100):
            await q.put(base + i)

    async def consumer():
        while True:
            item = await q.get()
            if item is None:
                q.task_done()
                return
            with lock:
                got.append(item)
            q.task_done()
    consumers = [aio.create_task(consumer()) for _ in range(6)]
    await aio.gather(*(producer(1000 * p) for p in range(6)))
    await q.join()
    for _ in consumers:
        await q.put(None)
    await aio.gather(*consumers)
    return [len(got), sorted(got) == sorted(1000 * p + i for p in range(6) for i in range(100)),
            q.empty(), q.qsize()]


@scenario
async def queue_nowait_errors(aio):
    q = aio.Queue(maxsize=1)
    q.put_nowait(1)
    full = observe(q.put_nowait, 2)[:2]
    item = q.get_nowait()
    empty = observe(q.get_nowait)[:2]
    return [full, item, empty, q.full(), q.maxsize]


@scenario
async def queue_task_done_too_many(aio):
    q = aio.Queue()
    q.put_nowait(1)
    q.get_nowait()
    q.task_done()
    return observe(q.task_done)[:2]


@scenario
async def queue_join_waits_for_task_done(aio):
    q = aio.Queue()
    for i in range(5):
        q.put_nowait(i)
    done = []

    async def worker():
        while not q.empty():
            q.get_nowait()
            await aio.sleep(0.001)
            done.append(1)
            q.task_done()
    t = aio.create_task(worker())
    await q.join()
    await t
    return len(done)


@scenario
async def queue_fifo_single_consumer(aio):
    q = aio.Queue()
    for i in range(10):
        await q.put(i)
    return [await q.get() for _ in range(10)]


@scenario
async def lifo_and_priority_order(aio):
    lq, pq = aio.LifoQueue(), aio.PriorityQueue()
    for i in (3, 1, 2):
        lq.put_nowait(i)
        pq.put_nowait(i)
    return [[lq.get_nowait() for _ in range(3)], [pq.get_nowait() for _ in range(3)]]


class _EvenFirst:
    """A LifoQueue subclass the way asyncpg's pool writes one: _get picks
    by index from the list asyncio keeps, and a method of its own takes an
    item and wakes a putter with _wakeup_next(self._putters)."""

    def _get(self):
        for i in range(len(self._queue) - 1, -1, -1):
            if self._queue[i] % 2 == 0:
                return self._queue.pop(i)
        return super()._get()

    def take_odd_nowait(self):
        for i in range(len(self._queue)):
            if self._queue[i] % 2:
                item = self._queue.pop(i)
                self._wakeup_next(self._putters)
                return item
        raise IndexError("no odd item")


@scenario
async def lifo_subclass_with_its_own_get_and_wakeup_next(aio):
    q = type("EvenFirst", (_EvenFirst, aio.LifoQueue), {})(maxsize=3)
    for x in (1, 2, 3):
        q.put_nowait(x)
    blocked = aio.create_task(q.put(4))  # Full: waits for room.
    for _ in range(1000):
        if q._putters:
            break
        await aio.sleep(0.001)
    odd = q.take_odd_nowait()  # Makes room and wakes the putter.
    await aio.wait_for(blocked, 5)
    got = [q.get_nowait() for _ in range(q.qsize())]
    return [type(q._queue).__name__, odd, got, q.empty()]


@scenario
async def queue_getter_cancel_does_not_lose_items(aio):
    q = aio.Queue()
    g1 = aio.create_task(q.get())
    g2 = aio.create_task(q.get())
    await aio.sleep(0.005)
    g1.cancel()
    q.put_nowait("x")
    r1 = await aobserve(g1)
    r2 = await aobserve(g2)
    # Exactly one of the two getters may have it, or it is still queued.
    taken = [r for r in (r1, r2) if r[0] == "ok"]
    left = q.qsize()
    return len(taken) + left


@scenario
async def queue_bounded_put_waits(aio):
    q = aio.Queue(maxsize=2)
    await q.put(1)
    await q.put(2)
    t = aio.create_task(q.put(3))
    await aio.sleep(0.005)
    blocked = not t.done()
    first = await q.get()
    await t
    return [blocked, first, q.qsize()]


@scenario
async def queue_shutdown_graceful(aio):
    q = aio.Queue()
    q.put_nowait(1)
    q.shutdown()
    put = observe(q.put_nowait, 2)[:2]
    item = await q.get()
    after = (await aobserve(q.get()))[:2]
    return [put, item, after]


@scenario
async def queue_shutdown_wakes_blocked_getters(aio):
    q = aio.Queue()
    getters = [aio.create_task(q.get()) for _ in range(4)]
    await aio.sleep(0.005)
    q.shutdown()
    return [(await aobserve(g))[:2] for g in getters]


@scenario
async def queue_shutdown_immediate_drops_items(aio):
    q = aio.Queue()
    for i in range(3):
        q.put_nowait(i)
    q.shutdown(immediate=True)
    await q.join()  # Dropped items count as done.
    return [q.qsize(), (await aobserve(q.get()))[:2]]


@scenario
async def queue_shutdown_wakes_blocked_putters(aio):
    q = aio.Queue(maxsize=1)
    q.put_nowait(0)
    putters = [aio.create_task(q.put(i)) for i in range(3)]
    await aio.sleep(0.005)
    q.shutdown()
    return [(await aobserve(p))[:2] for p in putters]


@scenario
async def priority_queue_unorderable_item_raises_type_error(aio):
    q = aio.PriorityQueue()
    q.put_nowait((1, "a"))
    bad = observe(q.put_nowait, "not a tuple")
    later = await aobserve(q.put(None))
    # heapq keeps what it appended before the comparison failed (stdlib
    # too); the unfinished count never saw the failed puts.
    return [bad[:2], later[:2], q.qsize(), q._unfinished_tasks]


@scenario
async def queue_items_visible_as_queue_attribute(aio):
    kinds = []
    for make in (aio.Queue, aio.LifoQueue, aio.PriorityQueue):
        q = make()
        for item in (3, 1, 2):
            q.put_nowait(item)
        kinds.append([sorted(q._queue), q.qsize(), q.full(), q.empty(), q.maxsize])
    return kinds


@scenario
async def queue_subclass_with_its_own_storage(aio):
    class Newest(aio.Queue):
        def _init(self, maxsize):
            self._queue = []

        def _put(self, item):
            self._queue.append(item)
            del self._queue[:-2]

        def _get(self):
            return self._queue.pop(0)

    q = Newest(maxsize=5)
    for i in range(4):
        await q.put(i)
    got = [q.qsize(), await q.get(), q.get_nowait(), q.empty()]
    waiter = aio.create_task(q.get())
    await aio.sleep(0.005)
    q.put_nowait("late")
    return [got, await aio.wait_for(waiter, 5), q._unfinished_tasks]


@scenario
async def queue_join_returns_when_items_done_on_other_tasks(aio):
    q = aio.Queue()
    for i in range(50):
        q.put_nowait(i)
    seen = []
    lock = threading.Lock()

    async def worker():
        while True:
            try:
                item = q.get_nowait()
            except aio.QueueEmpty:
                return
            await aio.sleep(0)
            with lock:
                seen.append(item)
            q.task_done()
    joiners = [aio.create_task(q.join()) for _ in range(3)]
    await aio.gather(*(worker() for _ in range(6)))
    await aio.wait_for(aio.gather(*joiners), 5)
    return [sorted(seen), q._unfinished_tasks, await q.join()]


@scenario
async def queue_shutdown_immediate_counts_dropped_items_done(aio):
    q = aio.Queue()
    for i in range(3):
        q.put_nowait(i)
    q.get_nowait()  # Taken and not yet marked done: join() still waits for it.
    joiner = aio.create_task(q.join())
    await aio.sleep(0.005)
    q.shutdown(immediate=True)
    await aio.sleep(0.005)
    still_waiting = not joiner.done()
    q.task_done()
    await aio.wait_for(joiner, 5)
    return [still_waiting, q.qsize(), q._unfinished_tasks,
            observe(q.put_nowait, 1)[:2], observe(q.get_nowait)[:2]]


@scenario
async def queue_maxsize_any_real_number(aio):
    out = []
    for maxsize in (3, 2.5, float("inf"), 0, -1, True, 10**30):
        q = aio.Queue(maxsize)
        n = 0
        while not q.full() and n < 10:
            q.put_nowait(n)
            n += 1
        out.append([q.maxsize == maxsize, type(q.maxsize).__name__, n, q.full()])
    return out


@scenario
async def barrier_releases_all_parties(aio):
    b = aio.Barrier(5)
    indices = await aio.gather(*(b.wait() for _ in range(5)))
    return [sorted(indices), b.n_waiting, b.broken, b.parties]


@scenario
async def barrier_reusable_rounds(aio):
    b = aio.Barrier(3)
    rounds = []

    async def party():
        for _ in range(4):
            rounds.append(await b.wait())
    await aio.gather(*(party() for _ in range(3)))
    return sorted(rounds)


async def _waiting_at(aio, barrier, n):
    """Tasks for n waits at `barrier`, once all n are counted (bounded)."""
    tasks = [aio.create_task(barrier.wait()) for _ in range(n)]
    for _ in range(5000):
        if barrier.n_waiting >= n:
            break
        await aio.sleep(0.001)
    return tasks


@scenario
async def barrier_abort_breaks_waiters(aio):
    b = aio.Barrier(3)
    waiters = await _waiting_at(aio, b, 2)
    await b.abort()
    results = [(await aobserve(w))[:2] for w in waiters]
    return [results, b.broken, (await aobserve(b.wait()))[:2]]


@scenario
async def barrier_reset_breaks_waiters_then_is_reusable(aio):
    b = aio.Barrier(3)
    waiters = await _waiting_at(aio, b, 2)
    await b.reset()
    broken = [(await aobserve(w))[:3] for w in waiters]
    again = await aio.gather(*(b.wait() for _ in range(3)))
    return [broken, b.broken, sorted(again), b.n_waiting]


@scenario
async def barrier_async_with_repr_and_parties_that_compare_equal(aio):
    # `parties` is compared with `index + 1`, as stdlib does: 2.0 releases
    # pairs; `async with` gives the arrival index.
    b = aio.Barrier(2.0)
    reprs = [repr(b).rsplit(" [", 1)[1]]

    async def enter():
        async with b as index:
            return index
    waiter = aio.create_task(enter())
    for _ in range(5000):
        if b.n_waiting >= 1:
            break
        await aio.sleep(0.001)
    reprs.append(repr(b).rsplit(" [", 1)[1])
    got = sorted([await enter(), await waiter])
    await b.abort()
    reprs.append(repr(b).rsplit(" [", 1)[1])
    return [got, b.parties, reprs]


@scenario
async def barrier_subclass_overriding_wait_is_used_by_async_with(aio):
    log = []

    class Logged(aio.Barrier):
        async def wait(self):
            log.append("wait")
            return await super().wait()

    b = Logged(1)
    async with b as index:
        log.append(index)
    return log


@scenario
async def barrier_cancelled_waiter_gives_its_place_back(aio):
    b = aio.Barrier(2)
    [first] = await _waiting_at(aio, b, 1)
    first.cancel()
    r = (await aobserve(first))[:2]
    waiting_after_cancel = b.n_waiting
    got = sorted(await aio.gather(b.wait(), b.wait()))
    return [r, waiting_after_cancel, got]


@scenario
async def barrier_bad_parties(aio):
    return observe(aio.Barrier, 0)[:2]


class _Tagging:
    """Queue mixin overriding put_nowait/get_nowait: asyncio's put()/get()
    end by calling them, so every item is tagged on the way in and out."""

    def put_nowait(self, item):
        super().put_nowait(("in", item))

    def get_nowait(self):
        return ("out", super().get_nowait())


@scenario
async def queue_put_and_get_go_through_overridden_nowait_methods(aio):
    class Tagging(_Tagging, aio.Queue):
        pass

    q = Tagging(maxsize=1)
    await q.put(1)
    blocked_put = aio.create_task(q.put(2))
    await aio.sleep(0.005)
    first = await q.get()
    await aio.wait_for(blocked_put, 5)
    second = await q.get()
    blocked_get = aio.create_task(q.get())
    await aio.sleep(0.005)
    q.put_nowait(3)
    return [first, second, await aio.wait_for(blocked_get, 5), q.empty()]


@scenario
async def queue_overridden_nowait_methods_under_contention(aio):
    # Producers and consumers racing on a one-slot queue through the
    # overrides: every item passes both exactly once.
    class Tagging(_Tagging, aio.Queue):
        pass

    q = Tagging(maxsize=1)
    got = []

    async def produce(base):
        for i in range(50):
            await q.put(base + i)

    async def consume():
        for _ in range(50):
            got.append(await q.get())

    await aio.wait_for(aio.gather(produce(0), produce(1000), consume(), consume()), 30)
    return [len(got), sorted(got) == sorted(("out", ("in", v)) for b in (0, 1000)
                                            for v in range(b, b + 50))]


@scenario
async def queue_overridden_nowait_methods_and_shutdown(aio):
    class Tagging(_Tagging, aio.Queue):
        pass

    q = Tagging(maxsize=1)
    q.put_nowait("a")
    blocked_put = aio.create_task(q.put("b"))
    empty = Tagging()
    blocked_get = aio.create_task(empty.get())
    await aio.sleep(0.005)
    q.shutdown()
    empty.shutdown()
    r = [await aobserve(blocked_put), await aobserve(blocked_get),
         await aobserve(q.put("c"))]
    return r + [await q.get(), await aobserve(q.get())]


@scenario
async def queue_overridden_nowait_methods_decide_on_a_shut_down_queue(aio):
    # With room (or an item), put()/get() leave it to put_nowait()/
    # get_nowait(), shut down or not; only a full (empty) queue that is shut
    # down raises before calling them.
    calls = []

    class Logged(aio.Queue):
        def put_nowait(self, item):
            calls.append(item)
            super().put_nowait(item)

        def get_nowait(self):
            calls.append("get")
            return super().get_nowait()

    q = Logged()
    q.put_nowait(1)
    q.shutdown()
    r = [await aobserve(q.put(2)), await aobserve(q.get()), await aobserve(q.get())]
    return [r, calls]
