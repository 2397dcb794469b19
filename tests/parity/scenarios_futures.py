"""Scenarios: the Future API in detail (states, errors, callbacks)."""

import concurrent.futures
import contextvars
import threading

from harness import aobserve, observe, scenario


@scenario
async def future_result_before_done_raises(aio):
    fut = aio.get_running_loop().create_future()
    return [observe(fut.result), observe(fut.exception)]


@scenario
async def future_set_result_twice_raises(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(1)
    return [observe(fut.set_result, 2)[:2], fut.result()]


@scenario
async def future_set_exception_after_result_raises(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(1)
    return observe(fut.set_exception, ValueError("x"))[:2]


@scenario
async def future_set_result_after_cancel_raises(aio):
    fut = aio.get_running_loop().create_future()
    fut.cancel()
    return [observe(fut.set_result, 1)[:2], fut.cancelled()]


@scenario
async def future_set_exception_class_is_instantiated(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_exception(KeyError)
    exc = fut.exception()
    return [type(exc).__name__, exc.args]


@scenario
async def future_set_exception_rejects_non_exception(aio):
    fut = aio.get_running_loop().create_future()
    return [observe(fut.set_exception, 42)[:2], fut.done()]


@scenario
async def future_set_exception_stop_iteration_becomes_runtime_error(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_exception(StopIteration("s"))
    exc = fut.exception()
    return [type(exc).__name__, type(exc.__cause__).__name__]


@scenario
async def future_cancel_twice(aio):
    fut = aio.get_running_loop().create_future()
    return [fut.cancel(), fut.cancel(), fut.cancelled(), fut.done()]


@scenario
async def future_cancel_done_future_returns_false(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(3)
    return [fut.cancel(), fut.cancelled(), fut.result()]


@scenario
async def future_cancel_message_reaches_awaiter(aio):
    fut = aio.get_running_loop().create_future()
    fut.cancel("why")
    return await aobserve(fut)


@scenario
async def future_exception_on_cancelled_raises_cancelled(aio):
    fut = aio.get_running_loop().create_future()
    fut.cancel("m")
    return [observe(fut.exception), observe(fut.result)]


@scenario
async def future_exception_when_result_set_is_none(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result("r")
    return [fut.exception(), fut.result()]


@scenario
async def future_done_callbacks_in_registration_order(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    order = []
    done = loop.create_future()
    for i in range(5):
        fut.add_done_callback(lambda f, i=i: order.append(i))
    fut.add_done_callback(lambda f: done.set_result(None))
    fut.set_result(None)
    await done
    return order


@scenario
async def future_callback_added_after_done_still_runs(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    fut.set_result(5)
    got = loop.create_future()
    fut.add_done_callback(lambda f: got.set_result(f.result()))
    return await got


@scenario
async def future_callback_runs_in_given_context(aio):
    var = contextvars.ContextVar("v", default="none")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "ctx")
    loop = aio.get_running_loop()
    fut = loop.create_future()
    got = loop.create_future()
    fut.add_done_callback(lambda f: got.set_result(var.get()), context=ctx)
    fut.set_result(None)
    return await got


@scenario
async def future_callback_copies_current_context(aio):
    var = contextvars.ContextVar("v", default="none")
    var.set("registered")
    loop = aio.get_running_loop()
    fut = loop.create_future()
    got = loop.create_future()
    fut.add_done_callback(lambda f: got.set_result(var.get()))
    var.set("changed later")
    fut.set_result(None)
    return await got


@scenario
async def future_remove_done_callback_counts(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()

    def cb(f):
        pass

    def other(f):
        pass

    fut.add_done_callback(cb)
    fut.add_done_callback(other)
    fut.add_done_callback(cb)
    removed = fut.remove_done_callback(cb)
    again = fut.remove_done_callback(cb)
    fut.set_result(None)
    await aio.sleep(0)
    return [removed, again]


@scenario
async def future_removed_callback_does_not_run(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    ran = []
    done = loop.create_future()

    def cb(f):
        ran.append("removed one")

    fut.add_done_callback(cb)
    fut.remove_done_callback(cb)
    fut.add_done_callback(lambda f: done.set_result(None))
    fut.set_result(None)
    await done
    await aio.sleep(0.005)
    return ran


@scenario
async def future_add_done_callback_bad_keyword(aio):
    fut = aio.get_running_loop().create_future()
    return observe(fut.add_done_callback, print, bogus=1)[:2]


@scenario
async def future_get_loop_is_running_loop(aio):
    loop = aio.get_running_loop()
    return loop.create_future().get_loop() is loop


@scenario
async def future_isfuture_checks(aio):
    loop = aio.get_running_loop()

    async def c():
        return 1

    coro = c()
    t = aio.create_task(c())
    res = [aio.isfuture(loop.create_future()), aio.isfuture(t), aio.isfuture(coro),
           aio.isfuture(42), aio.isfuture(concurrent.futures.Future())]
    coro.close()
    await t
    return res


@scenario
async def future_await_twice_returns_same(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result([1, 2])
    a = await fut
    b = await fut
    return [a, a is b]


@scenario
async def future_many_awaiters(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()

    async def waiter():
        return await fut

    tasks = [aio.create_task(waiter()) for _ in range(50)]
    await aio.sleep(0.005)
    fut.set_result("shared")
    return set(await aio.gather(*tasks))


@scenario
async def future_exception_raised_to_every_awaiter(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()

    async def waiter():
        return await aobserve(fut)

    tasks = [aio.create_task(waiter()) for _ in range(10)]
    await aio.sleep(0.005)
    fut.set_exception(OSError("io"))
    return {tuple(r) for r in await aio.gather(*tasks)}


@scenario
async def wrap_future_concurrent_result(aio):
    cf = concurrent.futures.Future()
    fut = aio.wrap_future(cf)
    threading.Timer(0.005, cf.set_result, args=("from thread",)).start()
    return [aio.isfuture(fut), await fut]


@scenario
async def wrap_future_concurrent_exception(aio):
    cf = concurrent.futures.Future()
    fut = aio.wrap_future(cf)
    threading.Timer(0.005, cf.set_exception, args=(LookupError("lk"),)).start()
    return await aobserve(fut)


@scenario
async def wrap_future_passes_asyncio_future_through(aio):
    fut = aio.get_running_loop().create_future()
    return aio.wrap_future(fut) is fut


@scenario
async def wrap_future_rejects_other_objects(aio):
    return observe(aio.wrap_future, 42)[:2]


@scenario
async def future_set_result_from_thread_via_call_soon_threadsafe(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    threading.Thread(target=loop.call_soon_threadsafe,
                     args=(fut.set_result, "threadsafe")).start()
    return await aio.wait_for(fut, 5)


@scenario
async def future_cancel_wakes_awaiting_task_with_message(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()

    async def waiter():
        try:
            await fut
        except aio.CancelledError as e:
            return ["cancelled", e.args]

    t = aio.create_task(waiter())
    await aio.sleep(0.002)
    fut.cancel("stop now")
    return await t


@scenario
async def future_callback_exception_goes_to_handler(aio):
    loop = aio.get_running_loop()
    seen = loop.create_future()

    def handler(loop, context):
        if not seen.done():
            seen.set_result(type(context.get("exception")).__name__)

    loop.set_exception_handler(handler)
    fut = loop.create_future()

    def bad(f):
        raise ZeroDivisionError("cb")

    fut.add_done_callback(bad)
    fut.set_result(None)
    res = await aio.wait_for(seen, 5)
    loop.set_exception_handler(None)
    return res
