"""Scenarios: Task API details, cancellation counting, sleep, ensure_future,
current_task/all_tasks, and what a task may and may not yield."""

import contextvars
import types

from harness import aobserve, observe, scenario, value_after


@scenario
async def task_default_name_pattern(aio):
    t = aio.create_task(value_after(aio, 1))
    name = t.get_name()
    await t
    return [name.startswith("Task-"), name[5:].isdigit()]


@scenario
async def task_set_name_converts_to_str(aio):
    t = aio.create_task(value_after(aio, 1), name=123)
    first = t.get_name()
    t.set_name(("a", 1))
    second = t.get_name()
    await t
    return [first, second]


@scenario
async def task_requires_coroutine(aio):
    return [observe(aio.create_task, 42)[:2], observe(aio.create_task, lambda: 1)[:2]]


@scenario
async def task_cancel_before_first_step(aio):
    ran = []

    async def body():
        ran.append(1)

    t = aio.create_task(body())
    t.cancel()
    r = await aobserve(t)
    return [r[:2], ran, t.cancelled()]


@scenario
async def task_cancel_done_task_returns_false(aio):
    t = aio.create_task(value_after(aio, 1))
    await t
    return [t.cancel(), t.cancelling(), t.result()]


@scenario
async def task_cancelling_counts_each_request(aio):
    ev = aio.Event()

    async def stubborn():
        for _ in range(3):
            try:
                await ev.wait()
            except aio.CancelledError:
                pass
        return "survived"

    t = aio.create_task(stubborn())
    await aio.sleep(0.002)
    counts = []
    for _ in range(3):
        t.cancel()
        counts.append(t.cancelling())
        await aio.sleep(0.002)
    return [counts, await t]


@scenario
async def task_uncancel_brings_count_down(aio):
    async def body():
        try:
            await aio.sleep(10)
        except aio.CancelledError:
            task = aio.current_task()
            n = task.cancelling()
            m = task.uncancel()
            return [n, m, task.cancelling()]

    t = aio.create_task(body())
    await aio.sleep(0.002)
    t.cancel()
    return await t


@scenario
async def task_uncancel_at_zero_stays_zero(aio):
    t = aio.create_task(value_after(aio, 1))
    r = [t.uncancel(), t.cancelling()]
    await t
    return r


@scenario
async def task_cancel_message_in_cancelled_error(aio):
    t = aio.create_task(value_after(aio, 1, 10))
    await aio.sleep(0.002)
    t.cancel(msg="bye")
    try:
        await t
    except aio.CancelledError as e:
        return ["cancelled", e.args]


@scenario
async def task_swallowing_cancel_finishes_normally(aio):
    async def swallow():
        try:
            await aio.sleep(10)
        except aio.CancelledError:
            return "swallowed"

    t = aio.create_task(swallow())
    await aio.sleep(0.002)
    t.cancel()
    r = await t
    return [r, t.cancelled(), t.cancelling()]


@scenario
async def task_cancel_self_then_await(aio):
    async def body():
        aio.current_task().cancel()
        await aio.sleep(0)
        return "not reached"

    t = aio.create_task(body())
    return (await aobserve(t))[:2]


@scenario
async def task_cancel_during_return_wins(aio):
    async def body():
        aio.current_task().cancel()
        return "value"

    t = aio.create_task(body())
    r = await aobserve(t)
    return [r[:2], t.cancelled()]


@scenario
async def task_exception_not_cancel(aio):
    async def body():
        raise ArithmeticError("math")

    t = aio.create_task(body())
    r = await aobserve(t)
    return [r, t.cancelled(), type(t.exception()).__name__]


@scenario
async def task_bad_yield_fails(aio):
    @types.coroutine
    def bad():
        yield 42

    async def body():
        await bad()

    r = await aobserve(aio.create_task(body()))
    return [r[0], r[1]]


@scenario
async def task_bare_yield_is_sleep_zero(aio):
    @types.coroutine
    def bare():
        yield

    async def body():
        await bare()
        return "after bare yield"

    return await aio.create_task(body())


@scenario
async def sleep_returns_result_argument(aio):
    return [await aio.sleep(0, "zero"), await aio.sleep(0.001, result={"k": 1})]


@scenario
async def sleep_zero_lets_other_task_run(aio):
    log = []

    async def other():
        log.append("other")

    t = aio.create_task(other())
    for _ in range(20):
        if log:
            break
        await aio.sleep(0)
    await t
    return log


@scenario
async def sleep_cancelled(aio):
    t = aio.create_task(aio.sleep(10))
    await aio.sleep(0.002)
    t.cancel()
    return (await aobserve(t))[:2]


@scenario
async def ensure_future_on_awaitable_object(aio):
    class Awaitable:
        def __await__(self):
            return value_after(aio, "awaited").__await__()

    fut = aio.ensure_future(Awaitable())
    return [aio.isfuture(fut), await fut]


@scenario
async def ensure_future_returns_future_unchanged(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(1)
    t = aio.create_task(value_after(aio, 2))
    r = [aio.ensure_future(fut) is fut, aio.ensure_future(t) is t]
    await t
    return r


@scenario
async def ensure_future_rejects_plain_values(aio):
    return observe(aio.ensure_future, 42)[:2]


@scenario
async def current_task_outside_task_is_none(aio):
    loop = aio.get_running_loop()
    got = loop.create_future()
    loop.call_soon(lambda: got.set_result(aio.current_task()))
    return await got


@scenario
async def current_task_inside_is_the_task(aio):
    async def probe():
        return aio.current_task()

    t = aio.create_task(probe())
    return (await t) is t


@scenario
async def all_tasks_lists_pending_only(aio):
    ev = aio.Event()

    async def wait_ev():
        await ev.wait()

    pending = [aio.create_task(wait_ev()) for _ in range(5)]
    done = aio.create_task(value_after(aio, 1))
    await done
    await aio.sleep(0)
    listed = aio.all_tasks()
    r = [all(t in listed for t in pending), done in listed,
         aio.current_task() in listed]
    ev.set()
    await aio.gather(*pending)
    return r


@scenario
async def all_tasks_after_everything_finished(aio):
    tasks = [aio.create_task(value_after(aio, i)) for i in range(10)]
    await aio.gather(*tasks)
    return aio.all_tasks() == {aio.current_task()}


@scenario
async def task_done_callback_sees_result(aio):
    loop = aio.get_running_loop()
    got = loop.create_future()
    t = aio.create_task(value_after(aio, "res"))
    t.add_done_callback(lambda task: got.set_result([task.done(), task.result()]))
    return await got


@scenario
async def task_result_before_done_raises(aio):
    t = aio.create_task(value_after(aio, 1, 0.01))
    r = observe(t.result)[:2]
    await t
    return r


@scenario
async def task_print_stack_to_file(aio):
    import io

    async def deep():
        await aio.sleep(10)

    t = aio.create_task(deep(), name="printed")
    await aio.sleep(0.002)
    out = io.StringIO()
    t.print_stack(file=out)
    text = out.getvalue()
    t.cancel()
    await aobserve(t)
    return ["Stack for" in text, "printed" in text, "deep" in text]


@scenario
async def task_repr_mentions_name_and_state(aio):
    t = aio.create_task(value_after(aio, 1), name="repr-me")
    await t
    r = repr(t)
    return ["repr-me" in r, "finished" in r, "result=1" in r]


@scenario
async def many_tasks_contextvars_isolated(aio):
    var = contextvars.ContextVar("slot", default=None)

    async def worker(i):
        var.set(i)
        for _ in range(3):
            await aio.sleep(0)
            if var.get() != i:
                return "leak"
        return i

    res = await aio.gather(*(worker(i) for i in range(100)))
    return [res == list(range(100)), var.get()]


@scenario
async def task_context_changes_not_visible_to_parent(aio):
    var = contextvars.ContextVar("v", default="parent")

    async def child():
        var.set("child")
        return var.get()

    r = await aio.create_task(child())
    return [r, var.get()]


@scenario
async def task_cancel_reaches_awaited_task(aio):
    # Cancelling a task that awaits another task cancels that task through
    # its cancel(): its coroutine sees CancelledError and its cleanup runs
    # (not just its future marked cancelled).
    seen = []
    started = aio.Event()

    async def inner():
        started.set()
        try:
            await aio.sleep(10)
        except aio.CancelledError:
            seen.append("inner cancelled")
            raise
        finally:
            seen.append("inner finally")

    async def outer():
        t = aio.create_task(inner())
        try:
            await t
        finally:
            seen.append(["outer finally", t.cancelled()])

    o = aio.create_task(outer())
    await started.wait()
    await aio.sleep(0)
    o.cancel()
    r = await aobserve(o)
    return [r[:2], seen, o.cancelled()]


@scenario
async def task_cancel_awaiting_task_that_fails_in_cleanup(aio):
    # The awaited task turns the cancel into an error while unwinding:
    # the awaiting task gets that error, not a CancelledError.
    started = aio.Event()

    async def inner():
        started.set()
        try:
            await aio.sleep(10)
        except aio.CancelledError:
            await aio.sleep(0)
            raise ValueError("cleanup failed")

    async def outer():
        return await aio.create_task(inner())

    o = aio.create_task(outer())
    await started.wait()
    o.cancel()
    r = await aobserve(o)
    return [r[:2], o.cancelled(), o.cancelling()]
