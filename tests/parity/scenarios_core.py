"""Scenarios: running, sleeping, tasks, futures, cancellation."""

import contextvars

from harness import aobserve, observe, scenario


@scenario
async def run_returns_value(aio):
    # The value comes back through the loop: a task's result, awaited
    # after the task was suspended on the loop's timer once.
    async def compute():
        await aio.sleep(0.001)
        return 42
    t = aio.create_task(compute())
    return [await t, t.done(), t.result()]


@scenario
async def exception_propagates_out_of_task(aio):
    async def bad():
        raise ValueError("boom")
    return await aobserve(aio.create_task(bad()))


@scenario
async def sleep_zero_yields_to_other_tasks(aio):
    seen = []

    async def other():
        seen.append("other")

    t = aio.create_task(other())
    await aio.sleep(0)
    await aio.sleep(0)
    await t
    return seen


@scenario
async def sleep_returns_result(aio):
    return await aio.sleep(0.01, result="r")


@scenario
async def sleep_negative_is_immediate(aio):
    return await aio.sleep(-1, result="now")


@scenario
async def task_result_and_state(aio):
    async def f():
        await aio.sleep(0)
        return "v"
    t = aio.create_task(f())
    before = t.done()
    r = await t
    return [before, r, t.done(), t.cancelled(), t.exception()]


@scenario
async def task_name(aio):
    async def f():
        return None
    t = aio.create_task(f(), name="worker-1")
    await t
    t.set_name(12)
    return t.get_name()


@scenario
async def task_get_coro_and_context(aio):
    async def f():
        return None
    coro = f()
    t = aio.create_task(coro)
    same = t.get_coro() is coro
    ctx_type = type(t.get_context()).__name__
    await t
    return [same, ctx_type]


@scenario
async def current_task_inside_and_outside(aio):
    async def f():
        return aio.current_task() is t
    t = aio.create_task(f())
    main = aio.current_task()
    return [await t, main is not None, main is not t]


@scenario
async def get_running_loop_inside_tasks(aio):
    loop = aio.get_running_loop()

    async def f():
        return aio.get_running_loop() is loop
    return all(await aio.gather(*(f() for _ in range(20))))


@scenario
async def create_task_rejects_non_coroutine(aio):
    loop = aio.get_running_loop()
    return observe(loop.create_task, 42)[:2]


@scenario
async def task_set_result_is_refused(aio):
    async def f():
        await aio.sleep(0)
    t = aio.create_task(f())
    r = [observe(t.set_result, 1), observe(t.set_exception, ValueError())]
    await t
    return r


@scenario
async def cancel_sleeping_task(aio):
    async def f():
        await aio.sleep(10)
    t = aio.create_task(f())
    await aio.sleep(0.01)
    first = t.cancel("stop")
    r = await aobserve(t)
    return [first, r, t.cancelled(), t.cancel()]


@scenario
async def cancel_before_start(aio):
    ran = []

    async def f():
        ran.append(1)
    t = aio.create_task(f())
    t.cancel()
    return [await aobserve(t), ran, t.cancelled()]


@scenario
async def cancel_done_task_returns_false(aio):
    async def f():
        return 1
    t = aio.create_task(f())
    await t
    return [t.cancel(), t.cancelling(), t.result()]


@scenario
async def cancelling_counts_and_uncancel(aio):
    started = aio.get_running_loop().create_future()

    async def f():
        try:
            started.set_result(None)
            await aio.sleep(10)
        except aio.CancelledError:
            me = aio.current_task()
            n = me.cancelling()
            left = me.uncancel()
            return [n, left]
    t = aio.create_task(f())
    await started
    t.cancel()
    t.cancel()
    return [await t, t.cancelling()]


@scenario
async def cancel_caught_then_finishes_normally(aio):
    started = aio.get_running_loop().create_future()

    async def f():
        try:
            started.set_result(None)
            await aio.sleep(10)
        except aio.CancelledError:
            await aio.sleep(0)
            return "cleaned up"
    t = aio.create_task(f())
    await started
    t.cancel()
    return [await aobserve(t), t.cancelled()]


@scenario
async def cancel_message_reaches_awaiter(aio):
    fut = aio.get_running_loop().create_future()

    async def f():
        return await fut
    t = aio.create_task(f())
    await aio.sleep(0)
    fut.cancel("inner msg")
    return [await aobserve(t), t.cancelled()]


@scenario
async def cancelled_task_cancels_awaited_future(aio):
    fut = aio.get_running_loop().create_future()
    started = aio.get_running_loop().create_future()

    async def f():
        started.set_result(None)
        await fut
    t = aio.create_task(f())
    # Started, though maybe not yet suspended on fut: a cancel that lands
    # mid-step is delivered to the future it suspends on.
    await started
    t.cancel()
    await aobserve(t)
    return fut.cancelled()


@scenario
async def task_awaiting_itself_fails(aio):
    async def f():
        await aio.sleep(0)
        return await aobserve(t)
    t = aio.create_task(f())
    obs = await t
    return obs[:2]


@scenario
async def bad_yield_is_runtime_error(aio):
    class Bad:
        def __await__(self):
            yield "nope"

    async def f():
        return await aobserve(Bad())
    return (await aio.create_task(f()))[:2]


@scenario
async def future_result_before_done(aio):
    fut = aio.get_running_loop().create_future()
    return [observe(fut.result), observe(fut.exception), fut.done()]


@scenario
async def future_callbacks_in_registration_order(aio):
    fut = aio.get_running_loop().create_future()
    order = []
    done = aio.get_running_loop().create_future()
    for i in range(10):
        fut.add_done_callback(lambda f, i=i: order.append(i))
    fut.add_done_callback(lambda f: done.set_result(None))
    fut.set_result("x")
    await done
    return order


@scenario
async def future_callback_context(aio):
    var = contextvars.ContextVar("var", default="default")
    fut = aio.get_running_loop().create_future()
    got = aio.get_running_loop().create_future()
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in ctx")
    fut.add_done_callback(lambda f: got.set_result(var.get()), context=ctx)
    fut.set_result(None)
    return await got


@scenario
async def future_remove_done_callback(aio):
    fut = aio.get_running_loop().create_future()
    calls = []

    def cb(f):
        calls.append(1)
    fut.add_done_callback(cb)
    fut.add_done_callback(cb)
    n = fut.remove_done_callback(cb)
    fut.set_result(None)
    await aio.sleep(0.01)
    return [n, calls]


@scenario
async def future_set_twice(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(1)
    return [observe(fut.set_result, 2)[:2], observe(fut.set_exception, ValueError())[:2],
            fut.result()]


@scenario
async def future_set_exception_type_errors(aio):
    loop = aio.get_running_loop()
    out = []
    for bad in (42, "x", StopIteration()):
        fut = loop.create_future()
        out.append(observe(fut.set_exception, bad)[:2])
        if fut.done():
            exc = fut.exception()
            out.append([type(exc).__name__, type(exc.__cause__).__name__])
    return out


@scenario
async def unretrieved_exception_reported(aio):
    import gc
    loop = aio.get_running_loop()
    reports = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(ctx["message"]))
    fut = loop.create_future()
    fut.set_exception(RuntimeError("lost"))
    del fut
    gc.collect()
    loop.set_exception_handler(None)
    return [m.endswith("exception was never retrieved") for m in reports]


@scenario
async def contextvars_isolated_across_tasks(aio):
    var = contextvars.ContextVar("var")
    var.set("parent")

    async def child(i):
        var.set(i)
        for _ in range(3):
            await aio.sleep(0)
        return var.get()
    results = await aio.gather(*(child(i) for i in range(60)))
    return [results == list(range(60)), var.get()]


@scenario
async def contextvar_copied_at_task_creation(aio):
    var = contextvars.ContextVar("var", default="unset")
    var.set("before")

    async def child():
        return var.get()
    t = aio.create_task(child())
    var.set("after")
    return await t


@scenario
async def call_later_fires_each_after_its_delay(aio):
    # Timers due in the same reactor turn may run in parallel on several
    # workers (docs/compatibility.md): check every one ran, none early.
    loop = aio.get_running_loop()
    start = loop.time()
    fired = {}
    done = loop.create_future()

    def record(name, delay):
        fired[name] = loop.time() - start >= delay
        if len(fired) == 3 and not done.done():
            done.set_result(None)
    for name, delay in (("c", 0.06), ("a", 0.01), ("b", 0.03)):
        loop.call_later(delay, record, name, delay)
    await done
    return sorted(fired.items())


@scenario
async def call_at_in_the_past_runs(aio):
    loop = aio.get_running_loop()
    done = loop.create_future()
    loop.call_at(loop.time() - 10, done.set_result, "late")
    return await done


@scenario
async def timer_handle_cancel(aio):
    loop = aio.get_running_loop()
    ran = []
    h = loop.call_later(0.01, ran.append, 1)
    h.cancel()
    await aio.sleep(0.03)
    return [ran, h.cancelled()]


@scenario
async def call_soon_argument_errors(aio):
    loop = aio.get_running_loop()
    reports = []
    loop.set_exception_handler(lambda lp, ctx: reports.append(type(ctx["exception"]).__name__))
    # Outside debug mode the callback is only checked when it runs.
    h = loop.call_soon(42)
    await aio.sleep(0.02)
    loop.set_exception_handler(None)
    return [type(h).__name__, reports, observe(loop.call_later, None, print)[:2]]


@scenario
async def call_soon_checks_callbacks_in_debug_mode(aio):
    loop = aio.get_running_loop()
    loop.set_debug(True)

    async def coro_fn():
        pass
    try:
        return [observe(loop.call_soon, 42)[:2], observe(loop.call_soon, coro_fn)[:2]]
    finally:
        loop.set_debug(False)


@scenario
async def exception_in_callback_goes_to_handler(aio):
    loop = aio.get_running_loop()
    got = loop.create_future()
    loop.set_exception_handler(lambda lp, ctx: got.set_result(type(ctx["exception"]).__name__))

    def boom():
        raise KeyError("x")
    loop.call_soon(boom)
    r = await got
    loop.set_exception_handler(None)
    return r


@scenario
async def run_in_executor_and_to_thread(aio):
    loop = aio.get_running_loop()
    a = await loop.run_in_executor(None, sum, [1, 2, 3])
    b = await aio.to_thread(lambda x: x * 2, 21)
    return [a, b]


@scenario
async def awaiting_concurrent_future(aio):
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        cf = pool.submit(lambda: "cf")
        return await aio.wrap_future(cf)


@scenario
async def all_tasks_sees_pending(aio):
    async def f():
        await aio.sleep(0.05)
    ts = [aio.create_task(f()) for _ in range(5)]
    pending = aio.all_tasks()
    inside = all(t in pending for t in ts)
    await aio.gather(*ts)
    return [inside, any(t in aio.all_tasks() for t in ts)]


@scenario
async def async_generator_runs(aio):
    async def agen():
        for i in range(3):
            await aio.sleep(0)
            yield i
    return [x async for x in agen()]


@scenario
async def stop_then_raise_is_reported_before_run_forever_returns(aio):
    # stop() takes effect once the callback is done, its error reported:
    # the handler has heard of it by the time run_forever returns.
    other = aio.new_event_loop()
    reports = []

    def callback():
        other.stop()
        raise ValueError("after stop")

    def run_other():
        other.set_exception_handler(
            lambda loop, ctx: reports.append(type(ctx["exception"]).__name__))
        other.call_soon(callback)
        other.run_forever()
        seen = list(reports)
        other.close()
        return seen

    return await aio.wait_for(aio.to_thread(run_other), 10)


@scenario
async def default_exception_handler_logs_to_asyncio_logger(aio):
    # Logging configured for "asyncio" applies to our loop's reports too.
    import logging
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.levelname, record.getMessage().splitlines()[0][:21]))

    log = logging.getLogger("asyncio")
    keep = Keep()
    log.addHandler(keep)
    old_propagate, log.propagate = log.propagate, False
    try:
        loop = aio.get_running_loop()
        done = loop.create_future()

        def boom():
            loop.call_soon(done.set_result, None)
            raise ZeroDivisionError
        loop.call_soon(boom)
        await aio.wait_for(done, 10)
        for _ in range(100):
            if records:
                break
            await aio.sleep(0.005)
    finally:
        log.removeHandler(keep)
        log.propagate = old_propagate
    return records
