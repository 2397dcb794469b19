"""The parallel EventLoop end to end: running, timers, tasks, cancellation,
contextvars, and proof that tasks step on several workers at once."""

import asyncio as stdlib_asyncio
import contextlib
import contextvars
import os
import sys
import sysconfig
import threading
import time

import pytest

import mt_asyncio
import mt_asyncio.asyncio as asyncio
from mt_asyncio import _core
from mt_asyncio.base_events import EventLoop

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # loop_harness
from loop_harness import WAIT, loop, run, runtime  # noqa: F401 (fixtures)

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_run_until_complete_returns_and_raises(loop):
    async def ok():
        await asyncio.sleep(0)
        return 41 + 1

    async def bad():
        await asyncio.sleep(0)
        raise KeyError("nope")

    assert loop.run_until_complete(ok()) == 42
    with pytest.raises(KeyError):
        loop.run_until_complete(bad())
    assert not loop.is_running()


def test_running_loop_and_current_task_inside_steps(loop):
    seen = {}

    async def probe():
        seen["loop"] = asyncio.get_running_loop()
        seen["stdlib_task"] = stdlib_asyncio.current_task()
        seen["our_task"] = _core._current_task()
        await asyncio.sleep(0)
        seen["after_yield"] = asyncio.current_task()
        return asyncio.current_task()

    task = loop.create_task(probe())
    assert loop.run_until_complete(task) is task
    assert seen["loop"] is loop
    assert seen["our_task"] is task
    if sys.version_info >= (3, 14):
        # Before 3.14 stdlib keeps one current task per loop, which steps on
        # several workers would clash over: only ours answers there.
        assert seen["stdlib_task"] is task
    assert seen["after_yield"] is task


def test_call_soon_call_later_and_cancelled_handles(loop):
    ran = []
    done = threading.Event()
    loop.call_soon(ran.append, "soon")
    cancelled = loop.call_later(0.01, ran.append, "never")
    cancelled.cancel()
    assert cancelled.cancelled()
    t0 = loop.time()
    timer = loop.call_later(0.05, lambda: (ran.append("later"), loop.stop()))
    assert timer.when() == pytest.approx(t0 + 0.05, abs=0.01)
    loop.run_forever()
    assert loop.time() - t0 >= 0.05
    assert sorted(ran) == ["later", "soon"]


def test_callbacks_wait_while_the_loop_is_stopped(loop):
    ran = []
    loop.call_soon(ran.append, 1)
    time.sleep(0.05)
    assert ran == [] and loop._deferred_count() == 1
    loop.call_soon(loop.stop)
    loop.run_forever()
    # stop() may overtake the first callback on another worker; run again.
    if not ran:
        loop.call_later(0.02, loop.stop)
        loop.run_forever()
    assert ran == [1]


def test_sleep_durations(loop):
    async def sleeper():
        t0 = loop.time()
        await asyncio.sleep(0.05)
        return loop.time() - t0

    assert run(loop, sleeper()) >= 0.05


def test_many_tasks_all_finish(loop):
    async def worker(i):
        for _ in range(5):
            await asyncio.sleep(0)
        return i

    async def main():
        tasks = [loop.create_task(worker(i)) for i in range(500)]
        return [await t for t in tasks]

    assert run(loop, main()) == list(range(500))


def test_many_tasks_awaiting_one_future_on_several_workers(loop):
    # Regression: every awaiting task used to read and clear the future's
    # one shared _asyncio_future_blocking flag, so two tasks suspending on
    # the same future at the same moment on two workers could see it
    # cleared ("yield was used instead of yield from").
    async def round_of_waiters():
        fut = asyncio.get_running_loop().create_future()

        async def waiter():
            return await fut

        tasks = [asyncio.create_task(waiter()) for _ in range(200)]
        await asyncio.sleep(0.001)
        fut.set_result("shared")
        return await asyncio.gather(*tasks)

    for _ in range(20):
        assert run(loop, round_of_waiters()) == ["shared"] * 200


def test_gather_cancel_racing_children_finishing_on_other_workers(loop):
    # Children finish on several workers while the gather is cancelled: if
    # cancel() said True the gather must end cancelled (stdlib's promise),
    # whatever return_exceptions says; if it said False every child had
    # finished and the results are all there. It must never hang.
    import random
    rng = random.Random(7)

    async def child(k, spins):
        for _ in range(spins):
            await asyncio.sleep(0)
        return k

    async def one_round(return_exceptions):
        spins = [rng.randrange(4) for _ in range(50)]
        g = asyncio.gather(*(child(k, n) for k, n in enumerate(spins)),
                           return_exceptions=return_exceptions)
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)
        took = g.cancel()
        try:
            results = await g
        except asyncio.CancelledError:
            return "cancelled", took
        return ("results" if results == list(range(50)) else results), took

    async def rounds():
        outcomes = []
        for i in range(200):
            outcomes.append(await one_round(return_exceptions=bool(i % 2)))
        return outcomes

    for outcome, took in run(loop, rounds(), timeout=60):
        assert outcome == ("cancelled" if took else "results")


def test_gather_children_cancelled_from_another_worker_while_being_made(loop):
    # gather() holds its children's first steps until every callback is
    # attached; a cancel from another worker in that window must still end
    # the child, and the held step queued later must not run it again.
    # Every child ends once, and every gather completes.
    ends = []
    mu = threading.Lock()

    async def child(r, k):
        try:
            await asyncio.sleep(0)
            return k
        finally:
            with mu:
                ends.append((r, k))

    async def canceller(stop, spare):
        me = asyncio.current_task()
        cancelled = 0
        while not stop.is_set():
            for t in asyncio.all_tasks():
                if t is not me and t is not spare and t.cancel():
                    cancelled += 1
            await asyncio.sleep(0)
        return cancelled

    async def main():
        stop = asyncio.Event()
        cancelled = 0
        for r in range(20):
            stop.clear()
            killer = asyncio.create_task(canceller(stop, asyncio.current_task()))
            await asyncio.sleep(0)
            results = await asyncio.gather(
                *(child(r, k) for k in range(500)), return_exceptions=True)
            stop.set()
            cancelled += await killer
            assert len(results) == 500
            assert all(res == k or isinstance(res, asyncio.CancelledError)
                       for k, res in enumerate(results))
        return cancelled

    cancelled = run(loop, main(), timeout=60)
    assert cancelled > 0  # The race was exercised.
    with mu:
        assert len(ends) == len(set(ends))


def test_cancel_a_sleeping_task(loop):
    async def sleeper():
        await asyncio.sleep(30)

    async def main():
        task = loop.create_task(sleeper())
        await asyncio.sleep(0.01)
        assert task.cancel("enough") is True
        assert task.cancelling() == 1
        try:
            await task
        except asyncio.CancelledError as e:
            return task.cancelled(), e.args
        return None

    assert run(loop, main()) == (True, ("enough",))


def test_cancel_caught_and_uncancelled(loop):
    async def stubborn():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            assert me.cancelling() == 1
            me.uncancel()
            return "survived"

    async def main():
        task = loop.create_task(stubborn())
        await asyncio.sleep(0.01)
        task.cancel()
        return await task, task.cancelling()

    assert run(loop, main()) == ("survived", 0)


def test_cancel_before_first_step(loop):
    started = []

    async def never():
        started.append(1)

    async def main():
        task = loop.create_task(never())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.cancelled()

    assert run(loop, main()) is True
    assert started == []


def test_timeout_context_manager(loop):
    async def main():
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(30)
        except TimeoutError:
            return "timed out", asyncio.current_task().cancelling()

    assert run(loop, main()) == ("timed out", 0)


def test_awaiting_stdlib_and_concurrent_futures(loop):
    async def main():
        fut = loop.create_future()
        loop.call_later(0.01, fut.set_result, "ours")
        cf = loop.run_in_executor(None, lambda: "from a thread")
        return await fut, await cf

    assert run(loop, main()) == ("ours", "from a thread")


def test_default_executor_is_the_runtime_blocking_pool(loop):
    before = mt_asyncio.runtime_info()["blocking"]["completed"]

    async def main():
        names = await asyncio.gather(*(
            loop.run_in_executor(None, lambda: threading.current_thread().name)
            for _ in range(8)))
        with pytest.raises(ZeroDivisionError):
            await loop.run_in_executor(None, lambda: 1 / 0)
        return names

    names = run(loop, main())
    assert len(names) == 8
    # The pool counts a job once it has returned, just after the future
    # was completed: give the last one a moment.
    deadline = time.monotonic() + WAIT
    while (mt_asyncio.runtime_info()["blocking"]["completed"] < before + 9
           and time.monotonic() < deadline):
        time.sleep(0.001)
    info = mt_asyncio.runtime_info()["blocking"]
    assert info["completed"] >= before + 9
    assert info["max_threads"] == 128


def test_bad_yield_raises_inside_the_task(loop):
    class Bad:
        def __await__(self):
            yield "not a future"

    async def main():
        with pytest.raises(RuntimeError, match="bad yield"):
            await Bad()
        return "ok"

    assert run(loop, main()) == "ok"


def test_contextvars_isolated_per_task(loop):
    var = contextvars.ContextVar("var")

    async def child(i):
        var.set(i)
        for _ in range(3):
            await asyncio.sleep(0)
            assert var.get() == i
        return var.get()

    async def main():
        var.set("parent")
        tasks = [loop.create_task(child(i)) for i in range(100)]
        results = [await t for t in tasks]
        return results, var.get()

    assert run(loop, main()) == (list(range(100)), "parent")


def test_unhandled_exception_in_callback_goes_to_handler(loop):
    reports = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx))

    def boom():
        raise ValueError("in callback")

    loop.call_soon(boom)
    loop.call_later(0.05, loop.stop)
    loop.run_forever()
    assert len(reports) == 1
    assert isinstance(reports[0]["exception"], ValueError)
    assert reports[0]["message"].startswith("Exception in callback")


def test_argument_errors_match_stdlib(loop):
    async def coro():
        pass

    loop.set_debug(True)  # As in stdlib, callbacks are checked in debug mode.
    with pytest.raises(TypeError, match="coroutines cannot be used with call_soon"):
        loop.call_soon(coro)
    with pytest.raises(TypeError, match="a callable object was expected"):
        loop.call_soon(42)
    loop.set_debug(False)
    with pytest.raises(TypeError, match="delay must not be None"):
        loop.call_later(None, print)
    with pytest.raises(TypeError, match="a coroutine was expected"):
        loop.create_task(42)
    c = coro()
    c.close()


def test_closed_loop_refuses_work():
    loop = EventLoop()
    loop.call_soon(print)  # Never runs: dropped at close.
    loop.close()
    assert loop.is_closed()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon(print)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_forever()
    loop.close()  # Idempotent.


def test_stdlib_run_with_our_loop_factory():
    async def main():
        await asyncio.sleep(0.01)
        return type(asyncio.get_running_loop()).__name__

    assert stdlib_asyncio.run(main(), loop_factory=EventLoop) == "EventLoop"


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded CPython build")
def test_tasks_step_on_several_workers_at_once(loop):
    """Proof of parallelism: the CPU time the steps themselves used (each
    measured with time.thread_time, which a time-sliced thread does not
    accumulate while another runs) adds up to more than the wall-clock time
    the run took. One core at a time can never do that; overlapping
    wall-clock intervals alone would not prove it (time slicing gives them
    too). One worker measures 1.0 at most, two about 2.0 on a quiet
    machine; anything past 1.05 needs two cores at once."""
    records = []
    lock = threading.Lock()

    def spin_cpu(seconds):
        end = time.thread_time() + seconds
        x = 0
        while time.thread_time() < end:
            x += 1
        return x

    async def busy():
        for _ in range(3):
            cpu = time.thread_time()
            spin_cpu(0.02)
            with lock:
                records.append((threading.get_native_id(), time.thread_time() - cpu))
            await asyncio.sleep(0)

    async def main():
        tasks = [loop.create_task(busy()) for _ in range(8)]
        for t in tasks:
            await t

    best = 0.0
    for _ in range(20):  # Other processes may hold a core for a while.
        records.clear()
        wall = time.perf_counter()
        run(loop, main())
        wall = time.perf_counter() - wall
        best = max(best, sum(cpu for _, cpu in records) / wall)
        if best > 1.05:
            break
    threads = {tid for tid, _ in records}
    assert len(threads) >= 2, f"steps ran on {len(threads)} thread(s)"
    assert best > 1.05, f"steps used {best:.2f}x the wall time in CPU: not in parallel"
    assert not sys._is_gil_enabled()
    per_worker = [w["units_run"] for w in mt_asyncio.runtime_info()["workers"]]
    assert sum(1 for n in per_worker if n > 0) >= 2


@pytest.mark.skipif(sys.version_info < (3, 14), reason="call graphs are 3.14's API")
def test_call_graphs_of_tasks_stepping_on_other_workers(loop):
    # capture_call_graph() and get_stack() read another task's coroutine
    # frames only while no worker steps it; here 12 tasks step nested
    # coroutines on 4 workers while two readers take their graphs, stacks
    # and text over and over. Nothing may crash or hang, every graph names
    # its task, and once all is done no task is left awaited by anyone.
    # (The readers stop first: stdlib's graph of a finished task has a
    # frame of None, which its own formatting cannot print.)
    stop = threading.Event()
    stop_reading = threading.Event()

    async def leaf(i):
        await asyncio.sleep(0)
        return i

    async def middle(i):
        total = 0
        for k in range(3):
            total += await leaf(k)
        return total

    async def stepper(i):
        rounds = 0
        while not stop.is_set():
            await middle(i)
            rounds += 1
        return rounds

    async def reader(tasks, seed):
        reads = busy = 0
        k = seed
        while not stop_reading.is_set():
            t = tasks[k % len(tasks)]
            k += 7
            graph = asyncio.capture_call_graph(t)
            assert graph.future is t
            busy += not graph.call_stack
            assert isinstance(t.get_stack(), list)
            assert asyncio.format_call_graph(t).startswith("* Task(name=")
            assert repr(t).startswith("<Task pending name=")
            reads += 1
            await asyncio.sleep(0)
        return reads, busy

    async def main():
        tasks = [asyncio.create_task(stepper(i)) for i in range(12)]
        readers = [asyncio.create_task(reader(tasks, s)) for s in range(2)]
        await asyncio.sleep(1.0)
        stop_reading.set()
        results = await asyncio.gather(*readers)
        stop.set()
        rounds = await asyncio.gather(*tasks)
        return tasks, rounds, results

    tasks, rounds, results = run(loop, main(), timeout=30)
    assert all(r > 0 for r in rounds)
    assert sum(reads for reads, _ in results) > 100
    assert all(t._asyncio_awaited_by is None for t in tasks)


def test_repr_of_a_task_running_on_another_worker_does_not_read_its_frame(loop):
    # stdlib's repr reads the coroutine's frame ("running at file:line");
    # while another worker executes the coroutine that is unsafe, so the
    # repr says "running" without a place. Once the task is suspended the
    # full form comes back.
    started = threading.Event()
    release = threading.Event()

    async def busy():
        started.set()
        release.wait(WAIT)  # Holds its worker: a step in progress.
        await asyncio.sleep(0)
        return "done"

    async def main():
        t = asyncio.create_task(busy(), name="busy")
        deadline = time.monotonic() + WAIT
        while not started.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        assert started.is_set(), "the task never started"
        while_running = repr(t)
        release.set()
        result = await t
        return while_running, repr(t), result

    while_running, after, result = run(loop, main(), timeout=3 * WAIT)
    assert result == "done"
    assert "name='busy'" in while_running
    assert "coro=<test_repr_of_a_task_running_on_another_worker_does_not_read_its_frame" in while_running
    assert while_running.endswith("busy() running>>"), while_running
    assert " at " not in while_running
    assert "done, defined at" in after and "result='done'" in after


def test_as_completed_over_futures_already_done():
    # A done future's callback runs at once on another worker, taking the
    # future out of as_completed()'s pending set while as_completed() was
    # still adding callbacks to the rest of it ("Set changed size during
    # iteration" in most rounds before the fix).
    async def main():
        loop = asyncio.get_running_loop()
        counts = []
        for _ in range(100):
            futs = [loop.create_future() for _ in range(64)]
            for f in futs:
                f.set_result(None)
            seen = 0
            async for _ in asyncio.as_completed(futs):
                seen += 1
            counts.append(seen)
        return counts

    assert asyncio.run(asyncio.wait_for(main(), WAIT), threads=4) == [64] * 100


@contextlib.contextmanager
def _workers(n):
    """The module's runtime resized to n workers for the block, then back."""
    mt_asyncio._runtime.configure_threads(n)
    try:
        assert _eventually(lambda: mt_asyncio.runtime_info()["live_workers"] == n)
        yield
    finally:
        mt_asyncio._runtime.configure_threads(4)


def _eventually(pred, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


@pytest.mark.parametrize("workers", [1, 4])
def test_a_step_blocking_on_another_loop_gets_its_answer(loop, workers):
    # anyio's BlockingPortal: a step hands work to another loop running in
    # another thread (both ours, on one runtime) and blocks until it is
    # done. The other loop's work must not wait in the blocked worker's
    # own queue or LIFO slot, where nobody else takes it; stdlib answers in
    # about a millisecond. Repeated: a unit left there shows at once. At
    # one worker nobody else can run it: a stand-in worker does, once the
    # only worker has been held for a moment.
    import concurrent.futures
    other = EventLoop()
    runner = threading.Thread(target=other.run_forever)
    runner.start()
    held = contextlib.ExitStack()
    held.enter_context(_workers(workers))

    async def answer(i):
        await asyncio.sleep(0)
        return i

    async def blocking_step(i):
        by_coroutine = asyncio.run_coroutine_threadsafe(answer(i), other).result(timeout=5)
        done = concurrent.futures.Future()
        other.call_soon_threadsafe(done.set_result, i)
        return by_coroutine + done.result(timeout=5)

    def blocking_callback(fut, i):
        try:
            fut.set_result(asyncio.run_coroutine_threadsafe(answer(i), other).result(timeout=5))
        except BaseException as e:  # noqa: BLE001 - the test reports it.
            fut.set_exception(e)

    async def main():
        got = []
        for i in range(50):
            got.append(await blocking_step(i))
            fut = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(blocking_callback, fut, i)
            got.append(await fut)
        return got

    try:
        started = time.monotonic()
        assert run(loop, main()) == [v for i in range(50) for v in (2 * i, i)]
        # A stand-in starts within about 50 ms of a block; 150 blocks.
        assert time.monotonic() - started < (5 if workers > 1 else 20)
    finally:
        held.close()
        other.call_soon_threadsafe(other.stop)
        runner.join(WAIT)
        other.close()


def test_a_blocked_steps_loop_runs_nothing_beside_it_at_one_worker(loop):
    # The stand-in that answers for the other loop runs none of the blocked
    # step's own loop: at one worker that loop still runs one unit at a
    # time, as on stdlib, where a task made before the step blocked, and
    # its callbacks, run only once the step returns; and what the blocked
    # loop had queued keeps its order.
    other = EventLoop()
    runner = threading.Thread(target=other.run_forever)
    runner.start()
    log = []

    async def answer():
        await asyncio.sleep(0.02)  # The stand-in drives the timers too.
        log.append("answered")
        return "answer"

    async def bystander(i):
        log.append(f"bystander {i}")

    async def main():
        lp = asyncio.get_running_loop()
        tasks = [asyncio.create_task(bystander(i)) for i in range(3)]
        lp.call_soon(log.append, "callback")
        log.append("blocking")
        got = asyncio.run_coroutine_threadsafe(answer(), other).result(timeout=WAIT)
        log.append(got)
        await asyncio.gather(*tasks)
        return log

    try:
        with _workers(1):
            for _ in range(5):
                log.clear()
                assert run(loop, main()) == [
                    "blocking", "answered", "answer",
                    "bystander 0", "bystander 1", "bystander 2", "callback"]
            info = mt_asyncio.runtime_info()
            assert info["stand_ins_started"] >= 5
            assert info["stand_in_units_run"] >= 5
    finally:
        other.call_soon_threadsafe(other.stop)
        runner.join(WAIT)
        other.close()


def test_a_closed_loop_is_freed():
    # anyio's test_asyncio_run_does_not_leak_event_loop: the workers that
    # ran the loop held it through their running loop and asyncgen hooks,
    # and let go only as they parked after the close.
    import gc
    import weakref

    async def main():
        async def agen():
            yield 1

        async def step():
            async for _ in agen():  # Installs the asyncgen hooks there.
                await asyncio.sleep(0)
        await asyncio.gather(*(step() for _ in range(64)))
        return weakref.ref(asyncio.get_running_loop())

    # Free as soon as close() has returned, as on stdlib (anyio checks
    # with one gc.collect()): close() waits for the workers to let go.
    for _ in range(20):
        ref = asyncio.run(main())
        gc.collect()
        assert ref() is None
        loop = EventLoop()
        ref = weakref.ref(loop)
        loop.run_until_complete(main())
        loop.close()
        del loop
        gc.collect()
        assert ref() is None


def _round_trips_in_two_yields(aio, rounds=30):
    """Data written to one end of a socket pair, then two sleep(0): how
    many times had the other end's protocol received it?"""
    import socket

    class Receiver(aio.Protocol):
        def __init__(self):
            self.got = b""

        def data_received(self, data):
            self.got += data

    async def main():
        lp = aio.get_running_loop()
        seen = 0
        for _ in range(rounds):
            a, b = socket.socketpair()
            ta, _ = await lp.create_connection(aio.Protocol, sock=a)
            tb, pb = await lp.create_connection(Receiver, sock=b)
            ta.write(b"ping")
            await aio.sleep(0)
            await aio.sleep(0)
            seen += pb.got == b"ping"
            ta.close()
            tb.close()
        return seen

    return main


def test_a_lone_worker_polls_for_io_once_a_round(loop):
    # asyncio polls for I/O once per loop iteration, before the callbacks
    # that were ready then, so a write reaches its peer's protocol within
    # two sleep(0) (websockets' own tests count on it). A lone worker keeps
    # that rhythm; it used to poll only when idle or every 61 units.
    expected = stdlib_asyncio.run(_round_trips_in_two_yields(stdlib_asyncio)())
    assert expected == 30
    with _workers(1):
        assert run(loop, _round_trips_in_two_yields(asyncio)()) == expected


def _exit_from_an_awaited_task(aio, loop):
    """A task raises SystemExit while the main task awaits it (aiohttp's
    run_app with a startup hook that exits): what run_until_complete()
    raises, whether the main task was done then, and how it ends once
    cancelled."""
    async def shutdown():
        raise SystemExit(3)

    async def main():
        await aio.get_running_loop().create_task(shutdown())

    main_task = loop.create_task(main())
    try:
        loop.run_until_complete(main_task)
        first = "returned"
    except SystemExit as e:
        first = f"SystemExit({e.code})"
    done_then = main_task.done()
    main_task.cancel()
    try:
        loop.run_until_complete(main_task)
        then = "returned"
    except aio.CancelledError:
        then = "cancelled"
    except SystemExit:
        then = "SystemExit again"
    loop.close()
    return first, done_then, then


def test_an_exit_stops_the_loop_before_anything_else_runs():
    # stdlib's loop stops the moment a step raises SystemExit: the main
    # task woken by it has not run, and a cancel then ends it. Ours let the
    # worker go on running the loop's units until the runner thread had
    # stopped it, so the main task raised the exit a second time, from
    # the next run_until_complete() (aiohttp's test_run_after_asyncio_run
    # at one worker).
    expected = _exit_from_an_awaited_task(stdlib_asyncio, stdlib_asyncio.new_event_loop())
    assert expected == ("SystemExit(3)", False, "cancelled")
    with _workers(1):
        for _ in range(10):
            assert _exit_from_an_awaited_task(asyncio, EventLoop()) == expected
