"""The C++ primitives (Lock, Semaphore, BoundedSemaphore, Event, Queue)
under stress from several workers, and the awaiter protocol they return.

The parity suite checks they behave like stdlib's; these tests check what
only a multi-threaded loop can break: holders counted across workers,
permits and turns never lost when waiters are cancelled or time out at
random moments, and waiters removed when a coroutine is dropped mid-wait."""

import asyncio as stdlib_asyncio
import collections.abc
import gc
import os
import random
import sys
import threading

import pytest

import mt_asyncio.asyncio as asyncio
from mt_asyncio import _core

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loop_harness
from loop_harness import WAIT, loop, run, runtime  # noqa: F401 (fixtures)


class Gauge:
    def __init__(self):
        self.mu = threading.Lock()
        self.now = self.max = self.total = 0

    def enter(self):
        with self.mu:
            self.now += 1
            self.total += 1
            self.max = max(self.max, self.now)

    def leave(self):
        with self.mu:
            self.now -= 1


def test_awaiters_follow_the_coroutine_protocol(loop):
    lock = asyncio.Lock()
    aw = lock.acquire()
    assert isinstance(aw, _core.PrimitiveAwaiter)
    assert isinstance(aw, collections.abc.Coroutine)
    assert stdlib_asyncio.iscoroutine(aw)
    aw.close()
    assert not lock.locked()  # Never started: nothing was taken.

    async def main():
        first = lock.acquire()
        assert await first is True
        with pytest.raises(RuntimeError, match="cannot reuse"):
            await first
        # A thrown exception comes out as thrown, before anything is taken.
        sem = asyncio.Semaphore(0)
        aw = sem.acquire()
        with pytest.raises(KeyError):
            aw.throw(KeyError("x"))
        lock.release()
        return True
    assert run(loop, main())


@pytest.mark.parametrize("kind", ["lock", "semaphore", "event", "queue_get", "queue_put"])
def test_closing_a_waiting_coroutine_leaves_the_queue(loop, kind):
    async def main():
        if kind == "lock":
            prim = asyncio.Lock()
            await prim.acquire()
            waiting, release = prim.acquire(), prim.release
        elif kind == "semaphore":
            prim = asyncio.Semaphore(0)
            waiting, release = prim.acquire(), prim.release
        elif kind == "event":
            prim = asyncio.Event()
            waiting, release = prim.wait(), prim.set
        elif kind == "queue_get":
            queue = asyncio.Queue()
            waiting = queue.get()
            release = lambda: queue.put_nowait("x")  # noqa: E731
        else:
            queue = asyncio.Queue(1)
            queue.put_nowait("first")
            waiting = queue.put("second")
            release = queue.get_nowait
        fut = waiting.send(None)  # Queues a waiter future and yields it.
        assert asyncio.isfuture(fut) and not fut.done()
        waiters = (lambda: queue._getters) if kind == "queue_get" else (
            (lambda: queue._putters) if kind == "queue_put" else (lambda: prim._waiters))
        assert len(waiters()) == 1
        waiting.close()
        assert fut.cancelled() and len(waiters()) == 0
        release()
        # What the closed waiter would have taken is still there.
        if kind == "lock":
            assert not prim.locked()
        elif kind == "semaphore":
            assert prim._value == 1
        elif kind == "queue_get":
            assert queue.get_nowait() == "x"
        elif kind == "queue_put":
            assert queue.empty()  # "second" was never put.
        return True
    assert run(loop, main())


def test_waiting_coroutine_dropped_without_close_leaves_the_queue(loop):
    async def main():
        lock = asyncio.Lock()
        await lock.acquire()
        waiting = lock.acquire()
        waiting.send(None)
        assert len(lock._waiters) == 1
        del waiting
        gc.collect()
        assert len(lock._waiters) == 0
        lock.release()
        return await asyncio.wait_for(lock.acquire(), WAIT)
    assert run(loop, main()) is True


def _contend(prim, limit, rounds, cancel_rate):
    """Many tasks take `prim` while a chaos task cancels some of them and
    others give up through short timeouts. Returns what the invariants
    need."""
    gauge = Gauge()
    outcomes = collections.Counter()

    async def worker(rng):
        for _ in range(rounds):
            try:
                if rng.random() < 0.2:
                    await asyncio.wait_for(prim.acquire(), rng.choice((0, 0.0005, 0.002)))
                else:
                    await prim.acquire()
            except (asyncio.TimeoutError, asyncio.CancelledError):
                outcomes["gave_up"] += 1
                continue
            gauge.enter()
            try:
                for _ in range(rng.randrange(50)):
                    pass
                await asyncio.sleep(0)
            finally:
                gauge.leave()
                prim.release()

    async def chaos(tasks, rng):
        while not all(t.done() for t in tasks):
            victim = rng.choice(tasks)
            if rng.random() < cancel_rate:
                victim.cancel()
            await asyncio.sleep(0.0005)

    async def main():
        rng = random.Random(1234)
        tasks = [asyncio.create_task(worker(random.Random(i))) for i in range(24)]
        chaos_task = asyncio.create_task(chaos(tasks, rng))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await chaos_task
        outcomes["cancelled"] = sum(isinstance(r, asyncio.CancelledError) for r in results)
        return results

    return gauge, outcomes, main


@pytest.mark.parametrize("limit", [1, 3])
def test_semaphore_under_cancellation_and_timeouts(loop, limit):
    for _ in range(3):
        sem = asyncio.BoundedSemaphore(limit)
        gauge, outcomes, main = _contend(sem, limit, rounds=60, cancel_rate=0.3)
        results = run(loop, main())
        assert all(r is None or isinstance(r, asyncio.CancelledError) for r in results)
        assert 1 <= gauge.max <= limit
        assert gauge.now == 0
        # Every permit came back; nobody is left queued.
        assert sem._value == limit and not sem.locked()
        assert len(sem._waiters) == 0


def test_lock_under_cancellation_and_timeouts(loop):
    for _ in range(3):
        lock = asyncio.Lock()
        gauge, outcomes, main = _contend(lock, 1, rounds=60, cancel_rate=0.3)
        run(loop, main())
        assert gauge.max == 1 and gauge.now == 0
        assert not lock.locked() and len(lock._waiters) == 0
        assert gauge.total > 0


def test_event_set_and_clear_from_many_workers(loop):
    async def main():
        ev = asyncio.Event()
        woke = collections.Counter()
        mu = threading.Lock()

        async def waiter(i):
            for _ in range(50):
                await ev.wait()
                with mu:
                    woke[i] += 1
                await asyncio.sleep(0)

        async def toggler():
            for _ in range(400):
                ev.set()
                await asyncio.sleep(0)
                ev.clear()
                await asyncio.sleep(0)
            ev.set()  # Leave it set so every waiter finishes.

        await asyncio.gather(toggler(), *(waiter(i) for i in range(16)))
        return woke, ev
    woke, ev = run(loop, main())
    assert all(woke[i] == 50 for i in range(16))
    assert len(ev._waiters) == 0


class _ThroughNowait(asyncio.Queue):
    """Overrides put_nowait()/get_nowait(), so its put()/get() are the
    Python ones that wait in line and then call them (queues.py)."""

    def put_nowait(self, item):
        super().put_nowait(item)

    def get_nowait(self):
        return super().get_nowait()


@pytest.mark.parametrize("queue_type", [asyncio.Queue, _ThroughNowait])
def test_queue_loses_and_duplicates_nothing_under_cancellation(loop, queue_type):
    assert (queue_type.put is asyncio.Queue.put) == (queue_type is asyncio.Queue)

    async def main():
        queue = queue_type(maxsize=8)
        taken = collections.Counter()
        mu = threading.Lock()
        per_producer = 400

        async def producer(p):
            for i in range(per_producer):
                await queue.put((p, i))

        async def consumer(rng):
            while True:
                try:
                    if rng.random() < 0.3:
                        item = await asyncio.wait_for(queue.get(), rng.choice((0, 0.0005)))
                    else:
                        item = await queue.get()
                except asyncio.TimeoutError:
                    continue
                except asyncio.QueueShutDown:
                    return
                with mu:
                    taken[item] += 1
                queue.task_done()

        async def chaos(victims, rng):
            # Cancels consumers mid-get and replaces them.
            for _ in range(40):
                await asyncio.sleep(0.001)
                i = rng.randrange(len(victims))
                victims[i].cancel()
                victims[i] = asyncio.create_task(consumer(random.Random(rng.random())))

        rng = random.Random(7)
        consumers = [asyncio.create_task(consumer(random.Random(i))) for i in range(12)]
        producers = [asyncio.create_task(producer(p)) for p in range(6)]
        await asyncio.gather(*producers, chaos(consumers, rng))
        await queue.join()
        queue.shutdown()
        await asyncio.gather(*consumers, return_exceptions=True)
        return queue, taken, per_producer

    queue, taken, per_producer = run(loop, main())
    expected = {(p, i) for p in range(6) for i in range(per_producer)}
    # A cancelled get takes nothing: every item was consumed exactly once.
    assert set(taken) == expected
    assert all(n == 1 for n in taken.values())
    assert queue.empty() and queue._unfinished_tasks == 0
    assert queue._getters == [] and queue._putters == []


def test_queue_shutdown_wakes_blocked_getters_and_putters_on_every_worker(loop):
    async def main():
        empty, full = asyncio.Queue(), asyncio.Queue(1)
        full.put_nowait(0)
        getters = [asyncio.create_task(empty.get()) for _ in range(20)]
        putters = [asyncio.create_task(full.put(i)) for i in range(20)]
        while len(empty._getters) < 20 or len(full._putters) < 20:
            await asyncio.sleep(0.001)
        empty.shutdown()
        full.shutdown()
        got = await asyncio.gather(*getters, *putters, return_exceptions=True)
        return [type(r).__name__ for r in got], full
    names, full = run(loop, main())
    assert names == ["QueueShutDown"] * 40
    assert full.get_nowait() == 0  # Not immediate: what was queued stays.


def test_condition_loses_no_notification_under_cancellation(loop):
    async def main():
        cond = asyncio.Condition()
        items = []
        taken = collections.Counter()
        mu = threading.Lock()
        total = 600

        async def consumer():
            while True:
                async with cond:
                    await cond.wait_for(lambda: items)
                    item = items.pop()
                    # wait() hands the lock back even when cancelled, so
                    # holding it here is always true.
                    assert cond.locked()
                if item is None:
                    return
                with mu:
                    taken[item] += 1

        async def producer():
            for i in range(total):
                async with cond:
                    items.append(i)
                    cond.notify()
                if i % 16 == 0:
                    await asyncio.sleep(0)

        consumers = [asyncio.create_task(consumer()) for _ in range(8)]
        victims = [asyncio.create_task(consumer()) for _ in range(8)]
        await asyncio.sleep(0.001)
        for v in victims:
            v.cancel()  # Mid-wait, or just after being notified.
        await producer()
        async with cond:
            items.extend([None] * len(consumers))
            cond.notify_all()
        await asyncio.gather(*consumers)
        cancelled = await asyncio.gather(*victims, return_exceptions=True)
        return cond, items, taken, total, cancelled

    cond, items, taken, total, cancelled = run(loop, main())
    # Whatever the cancelled consumers took counts too: nothing lost, nothing
    # twice, and nobody is left waiting or holding the lock.
    assert sum(taken.values()) + len(items) == total
    assert all(n == 1 for n in taken.values())
    assert not cond.locked() and cond._waiters == []
    assert all(isinstance(c, asyncio.CancelledError) or c is None for c in cancelled)


def test_condition_wait_closed_after_notify_passes_the_notification_on(loop):
    async def main():
        cond = asyncio.Condition()
        await cond.acquire()
        waiting = cond.wait()
        fut = waiting.send(None)  # Queued first; the lock is released.
        assert not cond.locked() and len(cond._waiters) == 1

        async def other():
            async with cond:
                await cond.wait()
                return "other"
        task = asyncio.create_task(other())
        while len(cond._waiters) < 2:
            await asyncio.sleep(0.001)
        await cond.acquire()
        cond.notify()  # The first waiter gets it...
        waiting.close()  # ...and is closed before it could use it.
        assert fut.done() and len(cond._waiters) == 1
        cond.release()
        return await asyncio.wait_for(task, WAIT)
    assert run(loop, main()) == "other"


def test_barrier_rounds_across_workers(loop):
    # One task per party, many rounds: lock-step, each round hands out every
    # index once, and nobody leaves round r before all arrived at it.
    parties, rounds = 6, 40

    async def main():
        barrier = asyncio.Barrier(parties)
        arrivals = collections.Counter()
        per_round = collections.defaultdict(list)
        mu = threading.Lock()

        async def party():
            for r in range(rounds):
                with mu:
                    arrivals[r] += 1
                index = await barrier.wait()
                with mu:
                    per_round[r].append(index)
                    assert arrivals[r] == parties

        await asyncio.wait_for(asyncio.gather(*(party() for _ in range(parties))), WAIT)
        return barrier, per_round

    barrier, per_round = run(loop, main())
    assert len(per_round) == rounds
    assert all(sorted(v) == list(range(parties)) for v in per_round.values())
    assert barrier.n_waiting == 0 and barrier._count == 0
    assert barrier._state == "filling" and barrier._waiters == []


def test_barrier_many_tasks_one_wait_each(loop):
    # Far more tasks than parties, arriving from every worker while earlier
    # groups drain: every group of `parties` gets each index once. (One wait
    # each: tasks that loop could run ahead and leave too few for a group.)
    parties, groups = 6, 60

    async def main():
        barrier = asyncio.Barrier(parties)
        got = await asyncio.wait_for(
            asyncio.gather(*(barrier.wait() for _ in range(parties * groups))), WAIT)
        return barrier, collections.Counter(got)

    barrier, indices = run(loop, main())
    assert indices == {i: groups for i in range(parties)}
    assert barrier.n_waiting == 0 and barrier._count == 0
    assert barrier._state == "filling" and barrier._waiters == []


async def _waiting_at(barrier, n):
    """Tasks for n waits at `barrier`, once all n are counted there."""
    tasks = [asyncio.create_task(barrier.wait()) for _ in range(n)]

    async def counted():
        while barrier.n_waiting < n:
            await asyncio.sleep(0.001)
    await asyncio.wait_for(counted(), WAIT)
    return tasks


def test_barrier_waiters_cancelled_mid_wait_leave_the_count(loop):
    async def main():
        barrier = asyncio.Barrier(3)
        waiting = await _waiting_at(barrier, 2)
        waiting[0].cancel()
        await asyncio.gather(waiting[0], return_exceptions=True)
        assert barrier.n_waiting == 1
        # Two more arrivals complete the round with the one still waiting.
        got = await asyncio.wait_for(
            asyncio.gather(waiting[1], barrier.wait(), barrier.wait()), WAIT)
        # A wait dropped without ever being awaited, and one closed mid-wait,
        # leave no trace either.
        barrier.wait()
        closed = barrier.wait()
        closed.send(None)
        assert barrier.n_waiting == 1
        closed.close()
        return barrier, sorted(got)

    barrier, got = run(loop, main())
    # Indices are the count at arrival (stdlib's): the newcomers got 1 and 2
    # whichever of the first two was cancelled; a count the cancelled waiter
    # had not given back would have released the round one arrival early.
    assert got in ([0, 1, 2], [1, 1, 2])
    assert barrier.n_waiting == 0 and barrier._count == 0 and barrier._waiters == []


def test_barrier_reset_and_abort_reach_waiters_on_every_worker(loop):
    async def main():
        barrier = asyncio.Barrier(20)
        waiting = await _waiting_at(barrier, 16)
        await barrier.reset()
        reset = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), WAIT)
        assert barrier._state == "filling"  # Everyone has left.
        waiting = await _waiting_at(barrier, 16)
        await barrier.abort()
        aborted = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), WAIT)
        later = await asyncio.gather(barrier.wait(), return_exceptions=True)
        return barrier, reset, aborted, later

    barrier, reset, aborted, later = run(loop, main())
    for outcome in reset + aborted + later:
        assert isinstance(outcome, asyncio.BrokenBarrierError)
    assert [str(e) for e in later] == ["Barrier aborted"]
    assert barrier.broken and barrier._count == 0 and barrier._waiters == []


def test_barrier_under_timeouts_and_resets_keeps_its_count(loop):
    # Waits that time out (a cancel mid-wait) at random moments, rounds that
    # complete and resets from another task, on every worker: whatever
    # happens, the count is only of tasks still waiting, so once everyone
    # has stopped the barrier is empty again and no waiter is left queued.
    async def main():
        barrier = asyncio.Barrier(4)
        outcomes = collections.Counter()
        mu = threading.Lock()

        async def party(rng):
            for _ in range(150):
                try:
                    await asyncio.wait_for(barrier.wait(), rng.choice((0.0005, 0.002, 0.05)))
                    outcome = "released"
                except asyncio.TimeoutError:
                    outcome = "timed out"
                except asyncio.BrokenBarrierError:
                    outcome = "broken"
                with mu:
                    outcomes[outcome] += 1

        async def resetter(rng):
            for _ in range(30):
                await asyncio.sleep(rng.choice((0.001, 0.003)))
                await barrier.reset()

        rng = random.Random(11)
        await asyncio.wait_for(asyncio.gather(
            *(party(random.Random(rng.random())) for _ in range(10)),
            resetter(random.Random(rng.random()))), WAIT)
        return barrier, outcomes

    barrier, outcomes = run(loop, main())
    assert sum(outcomes.values()) == 1500
    assert outcomes["released"] > 0 and outcomes["timed out"] > 0
    assert barrier._count == 0 and barrier.n_waiting == 0 and barrier._waiters == []
    assert barrier._state == "filling"  # The last one out of a reset refilled it.


def test_queue_storage_hooks_may_call_the_queue(loop):
    # PriorityQueue compares items (Python __lt__) and a subclass's _put
    # runs Python code, under the queue's mutex: calling the queue from
    # there (as asyncio allows) must not deadlock the worker.
    box = {}

    class Item:
        def __init__(self, v):
            self.v = v

        def __lt__(self, other):
            box["sizes"].append(box["q"].qsize())
            return self.v < other.v

    class Recording(asyncio.Queue):
        def _put(self, item):
            box["seen"].append((item, self.qsize(), self.empty()))
            super()._put(item)

    async def main():
        box["q"] = asyncio.PriorityQueue()
        box["sizes"] = []
        for v in (3, 1, 2):
            box["q"].put_nowait(Item(v))
        order = [box["q"].get_nowait().v for _ in range(3)]
        box["seen"] = []
        rq = Recording()
        await rq.put("a")
        rq.put_nowait("b")
        return order, box["seen"], await rq.get()

    result = []
    done = threading.Event()

    def drive():
        result.append(run(loop, main()))
        done.set()

    threading.Thread(target=drive, daemon=True).start()
    assert done.wait(WAIT), "a queue's own Python hook deadlocked calling it"
    order, seen, first = result[0]
    assert order == [1, 2, 3]
    assert box["sizes"]  # The comparisons ran, and saw the queue.
    assert seen == [("a", 0, True), ("b", 1, False)]
    assert first == "a"


@pytest.mark.parametrize("name,method", [
    ("Lock", "acquire"), ("Lock", "release"), ("Lock", "locked"),
    ("Event", "wait"), ("Event", "set"), ("Event", "clear"), ("Event", "is_set"),
    ("Semaphore", "acquire"), ("Semaphore", "release"), ("Semaphore", "locked"),
    ("Condition", "wait"), ("Condition", "notify"), ("Condition", "notify_all"),
    ("Barrier", "wait"), ("Barrier", "reset"), ("Barrier", "abort"),
    ("Queue", "get"), ("Queue", "put"), ("Queue", "get_nowait"),
    ("Queue", "put_nowait"), ("Queue", "join"), ("Queue", "task_done"),
    ("Queue", "qsize"), ("Queue", "empty"), ("Queue", "full"),
    ("Queue", "shutdown"),
    ("Future", "result"), ("Future", "exception"), ("Future", "set_result"),
    ("Future", "set_exception"),
    ("Future", "remove_done_callback"), ("Future", "cancel"),
    ("Future", "cancelled"), ("Future", "done"), ("Future", "get_loop"),
    ("Task", "cancel"), ("Task", "cancelling"), ("Task", "uncancel"),
    ("Task", "get_coro"), ("Task", "get_context"), ("Task", "get_name"),
    ("Task", "set_name"), ("Task", "get_stack"), ("Task", "print_stack"),
    ("EventLoop", "call_soon"), ("EventLoop", "call_soon_threadsafe"),
    ("EventLoop", "call_later"), ("EventLoop", "call_at"), ("EventLoop", "time"),
    ("EventLoop", "stop"), ("EventLoop", "is_running"), ("EventLoop", "is_closed"),
    ("EventLoop", "create_future"), ("EventLoop", "set_task_factory"),
    ("EventLoop", "get_task_factory"),
    ("Handle", "cancel"), ("Handle", "cancelled"), ("Handle", "get_context"),
    ("TimerHandle", "when"),
])
def test_c_methods_have_stdlibs_signatures(name, method):
    # inspect.signature() reads our C methods (their docstrings open with
    # a signature line) and finds stdlib's parameters, defaults included.
    import inspect
    ours = inspect.signature(getattr(getattr(asyncio, name), method))
    theirs = inspect.signature(getattr(getattr(stdlib_asyncio, name), method))
    assert [(p.name, p.default) for p in ours.parameters.values()] == \
        [(p.name, p.default) for p in theirs.parameters.values()]


def test_a_finished_wait_ends_the_same_way_by_each_protocol():
    # Lock.acquire() and Event.wait() return True, Queue.put() None: next()
    # and send(None) raise StopIteration(value) for each (the tp_iternext
    # slot's shortcut for None must not show through them).
    async def scenario():
        lock, queue, event = asyncio.Lock(), asyncio.Queue(), asyncio.Event()
        event.set()
        ends = []
        for make, undo in ((lock.acquire, lock.release), (lambda: queue.put(1), queue.get_nowait),
                           (event.wait, lambda: None)):
            for step in (next, lambda aw: aw.send(None)):
                with pytest.raises(StopIteration) as stop:
                    step(make())
                ends.append(stop.value.value)
                undo()
            ends.append(await make())
            undo()
        return ends

    assert asyncio.run(scenario()) == [True, True, True, None, None, None, True, True, True]
