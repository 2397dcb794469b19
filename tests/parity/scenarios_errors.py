"""Scenarios: bad arguments and misuse. Each must raise what stdlib raises
(type and message), and leave the loop usable."""

import time

from harness import aobserve, observe, scenario, since, value_after


@scenario
async def gather_unknown_keyword(aio):
    return observe(aio.gather, bogus=True)[:2]


@scenario
async def gather_non_awaitable_argument(aio):
    return observe(aio.gather, 1, 2)[:2]


@scenario
async def gather_bad_argument_still_runs_children_made_before_it(aio):
    # Tasks made for the arguments before the bad one are left running.
    ran = []

    async def child(i):
        ran.append(i)

    r = observe(aio.gather, child(1), child(2), 3)[:2]
    for _ in range(500):
        if len(ran) == 2:
            break
        await aio.sleep(0.001)
    return [r, sorted(ran)]


@scenario
@since(3, 14)
async def gather_rejects_future_of_other_loop(aio):
    import asyncio as stdlib
    other = stdlib.new_event_loop()
    try:
        fut = other.create_future()
        return observe(aio.gather, fut)[:2]
    finally:
        other.close()


@scenario
async def wait_bad_return_when(aio):
    t = aio.create_task(value_after(aio, 1))
    r = await aobserve(aio.wait([t], return_when="sometimes"))
    await t
    return r


@scenario
async def wait_empty_iterable(aio):
    return await aobserve(aio.wait([]))


@scenario
async def wait_rejects_single_future(aio):
    fut = aio.get_running_loop().create_future()
    return (await aobserve(aio.wait(fut)))[:2]


@scenario
async def wait_rejects_coroutines(aio):
    coro = value_after(aio, 1)
    r = await aobserve(aio.wait([coro]))
    coro.close()
    return r[:2]


@scenario
async def wait_for_non_awaitable(aio):
    return (await aobserve(aio.wait_for(42, 1)))[:2]


@scenario
async def shield_non_awaitable(aio):
    return observe(aio.shield, 5)[:2]


@scenario
async def condition_with_foreign_lock_type(aio):
    import threading
    return observe(aio.Condition, threading.Lock())[:1]


@scenario
async def barrier_zero_parties(aio):
    return observe(aio.Barrier, 0)[:2]


@scenario
async def queue_get_nowait_empty_and_put_nowait_full(aio):
    q = aio.Queue(maxsize=1)
    q.put_nowait(1)
    return [observe(q.put_nowait, 2)[:2], q.get_nowait(), observe(q.get_nowait)[:2]]


@scenario
async def queue_put_after_shutdown(aio):
    q = aio.Queue()
    q.shutdown()
    return [observe(q.put_nowait, 1)[:2], (await aobserve(q.get()))[:2]]


@scenario
async def timeout_reentered_fails(aio):
    cm = aio.timeout(10)
    async with cm:
        pass
    try:
        async with cm:
            pass
    except RuntimeError as e:
        return ["RuntimeError", str(e)]
    return "entered twice"


@scenario
async def timeout_reschedule_after_exit_fails(aio):
    cm = aio.timeout(10)
    async with cm:
        pass
    return observe(cm.reschedule, 5)[:2]


@scenario
async def taskgroup_entered_twice(aio):
    tg = aio.TaskGroup()
    async with tg:
        try:
            async with tg:
                pass
        except RuntimeError as e:
            return ["RuntimeError", str(e)]
    return "entered twice"


@scenario
async def call_soon_non_callable(aio):
    loop = aio.get_running_loop()
    loop.set_debug(True)
    r = observe(loop.call_soon, 42)[:2]
    loop.set_debug(False)
    return r


@scenario
async def call_later_bad_delay_type(aio):
    loop = aio.get_running_loop()
    return observe(loop.call_later, "soon", print)[:1]


@scenario
async def call_soon_coroutine_function_in_debug(aio):
    loop = aio.get_running_loop()
    loop.set_debug(True)

    async def cofn():
        pass

    r = observe(loop.call_soon, cofn)[:2]
    loop.set_debug(False)
    return r


@scenario
async def run_until_complete_while_running(aio):
    loop = aio.get_running_loop()
    coro = value_after(aio, 1)
    r = observe(loop.run_until_complete, coro)[:2]
    coro.close()
    return r


@scenario
async def run_forever_while_running(aio):
    return observe(aio.get_running_loop().run_forever)[:2]


@scenario
async def asyncio_run_inside_running_loop(aio):
    coro = value_after(aio, 1)
    r = observe(aio.run, coro)[:2]
    coro.close()
    return r


@scenario
async def run_coroutine_threadsafe_rejects_non_coroutine(aio):
    return observe(aio.run_coroutine_threadsafe, 42, aio.get_running_loop())[:2]


@scenario
async def loop_still_usable_after_errors(aio):
    for bad in (lambda: aio.gather(1), lambda: aio.Semaphore(-2),
                lambda: aio.create_task(None)):
        observe(bad)
    return await aio.gather(value_after(aio, "ok"), value_after(aio, "still"))


@scenario
async def cancel_after_the_awaited_future_failed_retrieves_its_error(aio):
    # The future a task awaits fails and the task is cancelled before it
    # resumes: the future's exception counts as retrieved (no "Future
    # exception was never retrieved"), as aiohttp relies on when
    # connection_lost fails a drain waiter and then cancels the handler.
    # At several workers the task may resume before the cancel lands (it
    # then ends with the error itself): either way nothing is reported.
    import gc
    loop = aio.get_running_loop()
    reports = []
    loop.set_exception_handler(lambda _loop, ctx: reports.append(ctx["message"]))
    try:
        fut = loop.create_future()

        async def waiter():
            await fut

        task = aio.create_task(waiter())
        # Waited for by time, not by turns: a worker the OS does not run for
        # a while holds the task's first step however many turns pass here.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if task._fut_waiter is fut:
                break
            await aio.sleep(0)
        waiting = task._fut_waiter is fut
        fut.set_exception(ConnectionError("lost"))
        task.cancel()
        try:
            await task
            outcome = "returned"
        except aio.CancelledError:
            outcome = "ended"
        except ConnectionError:
            outcome = "ended"
        del fut, task
        gc.collect()
        await aio.sleep(0.05)
    finally:
        loop.set_exception_handler(None)
    return [waiting, outcome, reports]
