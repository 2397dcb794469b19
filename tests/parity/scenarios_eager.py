"""Scenarios: eager tasks, task factories, and gather() finishing eagerly."""

import contextvars

from harness import aobserve, observe, scenario, since


async def _immediate(log, v):
    log.append(("ran", v))
    return v


async def _suspends(aio, log, v):
    log.append(("start", v))
    await aio.sleep(0)
    log.append(("resume", v))
    return v


@scenario
async def eager_factory_runs_first_step_inside_create_task(aio):
    loop = aio.get_running_loop()
    loop.set_task_factory(aio.eager_task_factory)
    log = []
    t = aio.create_task(_immediate(log, 1))
    seen = list(log)
    loop.set_task_factory(None)
    return [seen, t.done(), t.result()]


@scenario
async def eager_task_done_without_a_loop_turn(aio):
    loop = aio.get_running_loop()
    loop.set_task_factory(aio.eager_task_factory)
    t = aio.create_task(_immediate([], "x"))
    loop.set_task_factory(None)
    return [t.done(), t.result(), t.get_coro()]


@scenario
async def eager_task_that_suspends_continues_later(aio):
    loop = aio.get_running_loop()
    loop.set_task_factory(aio.eager_task_factory)
    log = []
    t = aio.create_task(_suspends(aio, log, 7))
    loop.set_task_factory(None)
    before = [list(log), t.done()]
    return [before, await t, log]


@scenario
@since(3, 14)
async def eager_start_keyword_on_create_task(aio):
    log = []
    t = aio.get_running_loop().create_task(_immediate(log, 2), eager_start=True)
    return [list(log), t.done(), await t]


@scenario
@since(3, 14)
async def eager_start_false_stays_lazy(aio):
    log = []
    t = aio.get_running_loop().create_task(_immediate(log, 3), eager_start=False)
    before = [list(log), t.done()]
    return [before, await t]


@scenario
@since(3, 14)
async def eager_task_exception_is_stored(aio):
    async def boom():
        raise ValueError("early")
    t = aio.get_running_loop().create_task(boom(), eager_start=True)
    return [t.done(), type(t.exception()).__name__, str(t.exception())]


@scenario
@since(3, 14)
async def eager_task_current_task_is_itself(aio):
    seen = {}

    async def probe():
        seen["inside"] = aio.current_task()
        return 1

    outer = aio.current_task()
    t = aio.get_running_loop().create_task(probe(), eager_start=True)
    return [seen["inside"] is t, aio.current_task() is outer]


@scenario
@since(3, 14)
async def eager_task_current_task_restored_after_suspend(aio):
    outer = aio.current_task()
    seen = []

    async def probe():
        seen.append(aio.current_task())
        await aio.sleep(0)
        seen.append(aio.current_task())

    t = aio.get_running_loop().create_task(probe(), eager_start=True)
    after_create = aio.current_task() is outer
    await t
    return [after_create, seen[0] is t, seen[1] is t]


@scenario
@since(3, 14)
async def eager_task_runs_in_its_context(aio):
    var = contextvars.ContextVar("v", default="unset")
    var.set("parent")

    async def probe():
        before = var.get()
        var.set("child")
        return before

    t = aio.get_running_loop().create_task(probe(), eager_start=True)
    return [t.result(), var.get()]


@scenario
@since(3, 14)
async def eager_task_with_explicit_context(aio):
    var = contextvars.ContextVar("v", default="unset")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")

    async def probe():
        return var.get()

    t = aio.get_running_loop().create_task(probe(), eager_start=True, context=ctx)
    return [t.result(), var.get()]


@scenario
@since(3, 14)
async def eager_task_cancelled_during_first_step(aio):
    async def self_cancel():
        aio.current_task().cancel()
        await aio.sleep(0)
        return "not reached"

    t = aio.get_running_loop().create_task(self_cancel(), eager_start=True)
    r = await aobserve(t)
    return [r[:2], t.cancelled()]


@scenario
@since(3, 14)
async def eager_task_name_and_not_in_all_tasks_when_done(aio):
    t = aio.get_running_loop().create_task(_immediate([], 0), eager_start=True,
                                           name="eager-one")
    return [t.get_name(), t in aio.all_tasks()]


@scenario
@since(3, 14)
async def eager_pending_task_is_in_all_tasks(aio):
    ev = aio.Event()

    async def waiter():
        await ev.wait()

    t = aio.get_running_loop().create_task(waiter(), eager_start=True)
    listed = t in aio.all_tasks()
    ev.set()
    await t
    return [listed, t.done()]


@scenario
async def eager_gather_of_finished_children_is_done_at_once(aio):
    loop = aio.get_running_loop()
    loop.set_task_factory(aio.eager_task_factory)
    g = aio.gather(_immediate([], 1), _immediate([], 2))
    loop.set_task_factory(None)
    return [g.done(), await g]


@scenario
async def gather_of_done_futures_is_done_at_once(aio):
    loop = aio.get_running_loop()
    a, b = loop.create_future(), loop.create_future()
    a.set_result("a")
    b.set_result("b")
    g = aio.gather(a, b, a)
    return [g.done(), g.result()]


@scenario
async def gather_of_done_future_with_exception(aio):
    loop = aio.get_running_loop()
    a = loop.create_future()
    a.set_exception(KeyError("k"))
    g = aio.gather(a)
    return [g.done(), type(g.exception()).__name__]


@scenario
async def create_eager_task_factory_with_custom_constructor(aio):
    made = []

    def constructor(coro, *, loop, eager_start, **kwargs):
        made.append(eager_start)
        return aio.Task(coro, loop=loop, eager_start=eager_start, **kwargs)

    loop = aio.get_running_loop()
    loop.set_task_factory(aio.create_eager_task_factory(constructor))
    t = aio.create_task(_immediate([], 5), name="custom")
    loop.set_task_factory(None)
    return [made, t.done(), t.get_name(), await t]


@scenario
@since(3, 14)
async def task_factory_receives_keywords(aio):
    got = []

    def factory(loop, coro, **kwargs):
        got.append(sorted(kwargs))
        return aio.Task(coro, loop=loop, **kwargs)

    loop = aio.get_running_loop()
    loop.set_task_factory(factory)
    ctx = contextvars.copy_context()
    t = aio.create_task(_immediate([], 1), name="n", context=ctx)
    loop.set_task_factory(None)
    return [got, t.get_name(), await t]


@scenario
async def task_factory_get_and_reset(aio):
    loop = aio.get_running_loop()

    def factory(loop, coro, **kwargs):
        return aio.Task(coro, loop=loop, **kwargs)

    before = loop.get_task_factory()
    loop.set_task_factory(factory)
    during = loop.get_task_factory() is factory
    loop.set_task_factory(None)
    return [before, during, loop.get_task_factory()]


@scenario
async def task_factory_must_be_callable(aio):
    loop = aio.get_running_loop()
    return observe(loop.set_task_factory, 42)[:2]


@scenario
@since(3, 14)
async def eager_tasks_run_in_creation_order_when_finishing_at_once(aio):
    log = []
    loop = aio.get_running_loop()
    for i in range(5):
        loop.create_task(_immediate(log, i), eager_start=True)
    return log


@scenario
async def eager_many_tasks_all_complete(aio):
    loop = aio.get_running_loop()
    loop.set_task_factory(aio.eager_task_factory)

    async def step(i):
        if i % 2:
            await aio.sleep(0)
        return i

    tasks = [aio.create_task(step(i)) for i in range(200)]
    loop.set_task_factory(None)
    res = await aio.gather(*tasks)
    return res == list(range(200))


@scenario
async def eager_factory_has_stdlib_factory_code(aio):
    # Libraries (anyio) recognize the eager factory by the code object of
    # stdlib's, captured when they are imported, and read the task
    # constructor out of its closure.
    import asyncio as stdlib
    factory = aio.eager_task_factory
    return [factory.__code__ is stdlib.eager_task_factory.__code__,
            factory.__closure__[0].cell_contents is aio.Task,
            aio.create_eager_task_factory(aio.Task).__code__ is factory.__code__]
