"""compat.install() points stdlib asyncio at mt_asyncio; uninstall() undoes it."""

import asyncio
import asyncio.locks
import asyncio.queues
import asyncio.subprocess
import asyncio.tasks
import threading

import pytest

import mt_asyncio
import mt_asyncio.asyncio as mt_aio
from mt_asyncio import compat


@pytest.fixture(autouse=True)
def clean():
    yield
    compat.uninstall()
    mt_asyncio.shutdown_runtime()


def test_install_rebinds_package_and_submodules_and_uninstall_restores():
    originals = (asyncio.Lock, asyncio.locks.Lock, asyncio.gather,
                 asyncio.tasks.gather, asyncio.Queue, asyncio.run)
    compat.install()
    compat.install()  # Idempotent.
    assert compat.installed()
    assert asyncio.Lock is mt_aio.Lock and asyncio.locks.Lock is mt_aio.Lock
    assert asyncio.gather is mt_aio.gather and asyncio.tasks.gather is mt_aio.gather
    assert asyncio.queues.Queue is mt_aio.Queue and asyncio.run is mt_aio.run
    assert (asyncio.create_subprocess_exec is mt_aio.create_subprocess_exec
            and asyncio.subprocess.create_subprocess_shell
            is mt_aio.create_subprocess_shell)
    # Exceptions are the same classes either way.
    assert asyncio.CancelledError is mt_aio.CancelledError
    compat.uninstall()
    compat.uninstall()
    assert not compat.installed()
    assert (asyncio.Lock, asyncio.locks.Lock, asyncio.gather,
            asyncio.tasks.gather, asyncio.Queue, asyncio.run) == originals


def test_library_code_using_plain_asyncio_runs_on_the_parallel_loop():
    compat.install()

    async def library_code():
        # Written against `import asyncio`, as a third-party library is.
        lock = asyncio.Lock()
        counter = 0

        async def bump():
            nonlocal counter
            for _ in range(50):
                async with lock:
                    value = counter
                    await asyncio.sleep(0)
                    counter = value + 1

        await asyncio.gather(*(bump() for _ in range(8)))
        return counter, type(asyncio.get_running_loop()).__name__

    assert asyncio.run(library_code()) == (400, "EventLoop")


@pytest.mark.parametrize("threads", [1, 4])
def test_waiter_callback_added_first_runs_before_the_task_resumes(threads):
    # asyncio runs a future's done callbacks in the order they were added,
    # the awaiting task's wakeup among them. asyncpg's protocol adds a
    # callback to its waiter before the task awaits it, and counts on that
    # callback (which starts cancelling the query) having run when the
    # cancelled task goes on to its next query.
    compat.install()

    async def one_round():
        loop = asyncio.get_running_loop()
        seen = []
        done_fut, cancelled_fut = loop.create_future(), loop.create_future()
        for fut in (done_fut, cancelled_fut):
            fut.add_done_callback(lambda f: seen.append(("callback", f.cancelled())))

        async def waiter(fut):
            try:
                await fut
            except asyncio.CancelledError:
                pass
            return list(seen)

        resumed = asyncio.create_task(waiter(done_fut))
        await asyncio.sleep(0)
        done_fut.set_result(None)
        first = await resumed
        cancelled = asyncio.create_task(waiter(cancelled_fut))
        await asyncio.sleep(0)
        cancelled.cancel()
        second = await cancelled
        return first, second

    async def main():
        return [await one_round() for _ in range(200)]

    for first, second in asyncio.run(main(), threads=threads):
        assert first == [("callback", False)]
        assert second == [("callback", False), ("callback", True)]


def _cancel_from_off_the_main_strand(aio, **run_kwargs):
    """A task made from another thread (run_coroutine_threadsafe: off the
    main task's strand) cancels a task of the main strand, then schedules
    a callback and yields: what order do the three run in?"""
    log = []

    async def main():
        loop = aio.get_running_loop()
        fut = loop.create_future()

        async def host():
            try:
                await fut
            except aio.CancelledError:
                log.append("host resumed")

        host_task = aio.create_task(host())
        await aio.sleep(0)

        async def canceller():
            host_task.cancel()
            loop.call_soon(log.append, "callback")
            await aio.sleep(0)
            log.append("canceller resumed")

        box = []
        maker = threading.Thread(target=lambda: box.append(
            aio.run_coroutine_threadsafe(canceller(), loop)))
        maker.start()
        maker.join(10)
        await aio.wrap_future(box[0])
        await host_task

    aio.run(main(), **run_kwargs)
    return log


@pytest.mark.parametrize("threads", [1, 4])
def test_work_from_another_thread_joins_the_main_strand_in_order(threads):
    # anyio's cancel scope relies on this order: the cancelled host task
    # leaves its scope before the scope's next delivery (a call_soon)
    # cancels what is left in it (test_cancelscope_propagation_when_
    # abandoned). The task run_coroutine_threadsafe makes joins the main
    # task's strand (at 4 workers it ran beside it, and anyio's cancel
    # scopes' sets changed size under iteration); the host's wake, held
    # until the canceller's step ends, keeps its place before the callback
    # and the canceller's next step (it used to go behind both).
    expected = _cancel_from_off_the_main_strand(asyncio)
    assert expected == ["host resumed", "callback", "canceller resumed"]
    compat.install()
    for _ in range(20):
        assert _cancel_from_off_the_main_strand(asyncio, threads=threads) == expected


def test_stdlib_loop_still_works_while_installed():
    compat.install()
    loop = asyncio.SelectorEventLoop()
    try:
        async def f():
            await asyncio.sleep(0)
            return "stdlib loop"
        assert loop.run_until_complete(f()) == "stdlib loop"
    finally:
        loop.close()


@pytest.mark.skipif(not hasattr(asyncio, "capture_call_graph"),
                    reason="call graphs are 3.14's API")
def test_call_graph_functions_rebound_and_used_by_library_code():
    import asyncio.futures
    import asyncio.graph

    original = asyncio.graph.capture_call_graph
    compat.install()
    assert asyncio.capture_call_graph is mt_aio.capture_call_graph
    assert asyncio.graph.format_call_graph is mt_aio.format_call_graph
    assert asyncio.futures.future_add_to_awaited_by is mt_aio.future_add_to_awaited_by

    async def library_code():  # Written against plain asyncio.
        async def child():
            return asyncio.capture_call_graph()

        async with asyncio.TaskGroup() as tg:
            t = tg.create_task(child())
        return asyncio.current_task(), t.result()

    parent, graph = asyncio.run(library_code())
    assert [g.future for g in graph.awaited_by] == [parent]
    compat.uninstall()
    assert asyncio.graph.capture_call_graph is original


def test_compat_is_reachable_from_the_asyncio_namespace():
    # mt-asyncio 0.3.0a1's spelling: asyncio.compat.install().
    import mt_asyncio.asyncio as mt_aio
    import mt_asyncio.compat
    assert mt_aio.compat is mt_asyncio.compat
    from mt_asyncio.asyncio import compat
    assert compat is mt_asyncio.compat


def _overlap_meter():
    """(state, step, steps): step() counts in state["overlaps"] each time
    it runs while another step() is running; steps(n) is a coroutine of
    n steps with an await between them."""
    import time
    lock = threading.Lock()
    state = {"active": 0, "overlaps": 0}

    def step():
        with lock:
            state["active"] += 1
            state["overlaps"] += state["active"] > 1
        time.sleep(0.0002)  # Long enough for a parallel step to show.
        with lock:
            state["active"] -= 1

    async def steps(n):
        for _ in range(n):
            step()
            await asyncio.sleep(0)

    return state, step, steps


def test_successive_run_until_complete_calls_share_one_strand():
    # anyio's and aiohttp's pytest plugins drive one loop with a
    # run_until_complete() per test, with a runner task made in the first
    # call that the later ones hand work to through memory streams. Each
    # call's task had a strand of its own, so the runner task and the next
    # call's task stepped in parallel at 4 workers and raced on the
    # streams' plain dicts and deques: an item buffered while the receiver
    # was about to wait, and a test that never ended (1 run in 4 of anyio's
    # test_fileio). Every main task of a loop now runs on its one strand.
    compat.install()
    mt_asyncio.start_runtime(4)
    state, step, steps = _overlap_meter()

    async def start():
        return asyncio.get_running_loop().create_task(steps(400))

    loop = asyncio.new_event_loop()
    try:
        background = loop.run_until_complete(start())
        loop.run_until_complete(asyncio.wait_for(steps(400), 30))
        loop.run_until_complete(asyncio.wait_for(background, 30))
    finally:
        loop.close()
    assert state["overlaps"] == 0


def test_tasks_created_before_the_first_run_share_the_main_strand():
    # anyio's test_asyncio_no_recycle_stopping_worker builds its own loop
    # and fills it with loop.create_task() before running it. The loop's
    # serial strand was made by the first run_until_complete(), so those
    # tasks stepped in parallel with each other and with the main task's
    # done callbacks at 4 workers; anyio's worker-thread pool raced on its
    # idle set and a job was never run (a hang). A loop built under
    # compat.install() is on its serial strand from the start.
    compat.install()
    mt_asyncio.start_runtime(4)
    state, step, steps = _overlap_meter()

    for make in (asyncio.new_event_loop, asyncio.EventLoop):
        loop = make()
        try:
            early = [loop.create_task(steps(200)) for _ in range(4)]
            done = []
            loop.call_soon(lambda: (step(), done.append(1)))
            loop.run_until_complete(asyncio.wait_for(asyncio.gather(*early), 30))
            assert done == [1]
        finally:
            loop.close()
    assert state["overlaps"] == 0
