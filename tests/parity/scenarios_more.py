"""Scenarios: loop API details, handlers, async generators, executors,
stack introspection and argument errors."""

import contextvars
import functools
import logging
import sys
import threading

from harness import aobserve, observe, scenario


@scenario
async def loop_time_is_monotonic(aio):
    loop = aio.get_running_loop()
    a = loop.time()
    await aio.sleep(0.002)
    return loop.time() > a


@scenario
async def loop_is_running_inside(aio):
    loop = aio.get_running_loop()
    return [loop.is_running(), loop.is_closed()]


@scenario
async def call_soon_returns_handle_with_context(aio):
    loop = aio.get_running_loop()
    ctx = contextvars.copy_context()
    done = loop.create_future()
    h = loop.call_soon(done.set_result, 1, context=ctx)
    await done
    return [h.get_context() is ctx, h.cancelled()]


@scenario
async def call_later_handle_when(aio):
    loop = aio.get_running_loop()
    t0 = loop.time()
    h = loop.call_later(10, print)
    ok = 9.5 < h.when() - t0 < 10.5
    h.cancel()
    return [ok, h.cancelled()]


@scenario
async def call_at_when_is_exact(aio):
    loop = aio.get_running_loop()
    when = loop.time() + 100
    h = loop.call_at(when, print)
    r = h.when() == when
    h.cancel()
    return r


@scenario
async def callback_args_passed(aio):
    loop = aio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(lambda a, b, c: done.set_result(a + b + c), 1, 2, 3)
    return await done


@scenario
async def callback_with_partial(aio):
    loop = aio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(functools.partial(done.set_result, "partial"))
    return await done


@scenario
async def exception_handler_get_set(aio):
    loop = aio.get_running_loop()

    def handler(lp, ctx):
        pass
    before = loop.get_exception_handler()
    loop.set_exception_handler(handler)
    got = loop.get_exception_handler() is handler
    bad = observe(loop.set_exception_handler, 42)[:2]
    loop.set_exception_handler(None)
    return [before, got, bad, loop.get_exception_handler()]


@scenario
async def call_exception_handler_custom_context(aio):
    loop = aio.get_running_loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(sorted(ctx)))
    loop.call_exception_handler({"message": "custom", "extra": 1})
    loop.set_exception_handler(None)
    return seen


@scenario
async def failing_exception_handler_is_contained(aio):
    loop = aio.get_running_loop()

    def bad_handler(lp, ctx):
        raise RuntimeError("handler broke")
    loop.set_exception_handler(bad_handler)
    loop.call_exception_handler({"message": "x"})  # Must not raise.
    loop.set_exception_handler(None)
    return "contained"


@scenario
async def debug_flag_round_trip(aio):
    loop = aio.get_running_loop()
    before = loop.get_debug()
    loop.set_debug(True)
    mid = loop.get_debug()
    loop.set_debug(False)
    return [before, mid, loop.get_debug()]


@scenario
async def task_factory_round_trip(aio):
    loop = aio.get_running_loop()
    made = []

    def factory(lp, coro, **kwargs):
        made.append(1)
        return aio.Task(coro, loop=lp, **kwargs)
    loop.set_task_factory(factory)

    async def f():
        return "via factory"
    r = await loop.create_task(f())
    got = loop.get_task_factory() is factory
    loop.set_task_factory(None)
    bad = observe(loop.set_task_factory, 42)[:2]
    return [r, made, got, bad]


@scenario
async def run_in_executor_exception(aio):
    loop = aio.get_running_loop()

    def boom():
        raise ValueError("in thread")
    return (await aobserve(loop.run_in_executor(None, boom)))[:2]


@scenario
async def run_in_executor_rejects_coroutine_function_in_debug(aio):
    loop = aio.get_running_loop()
    loop.set_debug(True)

    async def coro_fn():
        pass
    try:
        return observe(loop.run_in_executor, None, coro_fn)[:2]
    finally:
        loop.set_debug(False)


@scenario
async def to_thread_keeps_context(aio):
    var = contextvars.ContextVar("var")
    var.set("outer")
    return await aio.to_thread(var.get)


@scenario
async def to_thread_kwargs(aio):
    return await aio.to_thread(lambda a, b=0: a - b, 10, b=3)


@scenario
async def run_returns_after_a_timed_out_to_thread_job_is_over(aio):
    # asyncio.run() shuts the default executor down, waiting for jobs whose
    # awaiter gave up on them: the job's side effect is there when it returns.
    done = []

    def job():
        threading.Event().wait(0.3)
        done.append("job over")

    async def main():
        try:
            await aio.wait_for(aio.to_thread(job), 0.02)
        except TimeoutError:
            done.append("timed out")

    def in_thread():
        aio.run(main())
        return list(done)
    return await aio.to_thread(in_thread)


@scenario
async def shutdown_default_executor_warns_past_its_timeout(aio):
    import warnings
    release = threading.Event()

    async def main():
        loop = aio.get_running_loop()
        fut = loop.run_in_executor(None, release.wait, 5)
        await aio.sleep(0.01)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await loop.shutdown_default_executor(timeout=0.05)
        release.set()
        await fut
        return [(w.category.__name__, str(w.message)) for w in caught]

    def in_thread():
        loop = aio.new_event_loop()
        try:
            return loop.run_until_complete(main())
        finally:
            loop.close()
    return await aio.to_thread(in_thread)


@scenario
async def async_generator_aclose_runs_finally(aio):
    closed = []

    async def agen():
        try:
            yield 1
            await aio.sleep(0.001)  # Suspended on the loop between items.
            yield 2
        finally:
            await aio.sleep(0)  # aclose() runs an awaiting finally.
            closed.append(True)

    async def consume():
        # In a task of the loop under test, not in the scenario's frame.
        g = agen()
        first = await g.__anext__()
        await g.aclose()
        return first
    first = await aio.create_task(consume())
    return [first, closed]


@scenario
async def async_generator_asend_athrow(aio):
    async def agen():
        got = yield "start"
        await aio.sleep(0)
        try:
            yield f"got {got}"
        except KeyError:
            await aio.sleep(0.001)
            yield "caught"

    async def drive():
        # Each step suspends on the loop under test, inside one of its tasks.
        g = agen()
        a = await g.__anext__()
        b = await g.asend("x")
        c = await g.athrow(KeyError())
        await g.aclose()
        return [a, b, c]
    return await aio.create_task(drive())


@scenario
async def async_comprehension_over_tasks(aio):
    async def agen(n):
        for i in range(n):
            await aio.sleep(0)
            yield i
    return [i * 2 async for i in agen(5) if i % 2 == 0]


@scenario
async def task_get_stack_of_suspended_task(aio):
    started = aio.get_running_loop().create_future()

    async def sleeper():
        started.set_result(None)
        await aio.sleep(10)
    t = aio.create_task(sleeper())
    await started
    await aio.sleep(0.01)
    frames = t.get_stack()
    t.cancel()
    await aobserve(t)
    return [len(frames) >= 1, [f.f_code.co_name for f in frames][:1]]


@scenario
async def task_get_stack_of_done_task(aio):
    async def f():
        return None
    t = aio.create_task(f())
    await t
    return t.get_stack()


@scenario
async def task_repr_mentions_name(aio):
    async def f():
        await aio.sleep(0)
    t = aio.create_task(f(), name="visible-name")
    r = "visible-name" in repr(t)
    await t
    return [r, "finished" in repr(t)]


@scenario
async def gather_with_futures_and_coroutines_mixed(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    loop.call_later(0.002, fut.set_result, "fut")

    async def coro():
        return "coro"
    return await aio.gather(fut, coro(), aio.sleep(0, result="sleep"))


@scenario
async def wait_for_task_already_done(aio):
    async def f():
        return "done"
    t = aio.create_task(f())
    await t
    return await aio.wait_for(t, timeout=1)


@scenario
async def shield_cancel_outer_inner_result_kept(aio):
    loop = aio.get_running_loop()
    inner = loop.create_future()
    outer = aio.shield(inner)
    outer.cancel()
    inner.set_result("kept")
    await aio.sleep(0.005)
    return [outer.cancelled(), inner.result()]


@scenario
async def ensure_future_rejects_other_loop(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    other = aio.new_event_loop()
    try:
        return observe(aio.ensure_future, fut, loop=other)[:2]
    finally:
        other.close()
        fut.cancel()


@scenario
async def current_task_outside_any_task_is_none(aio):
    return await aio.to_thread(lambda: observe(aio.current_task)[:2])


@scenario
async def run_refuses_nested_call(aio):
    async def inner():
        pass
    c = inner()
    r = observe(aio.run, c)[:2]
    c.close()
    return r


@scenario
async def sleep_result_none_by_default(aio):
    return await aio.sleep(0)


@scenario
async def many_timers_all_fire_not_early(aio):
    loop = aio.get_running_loop()
    start = loop.time()
    fired = []
    done = loop.create_future()
    for i in (5, 1, 4, 2, 3):
        loop.call_later(0.01 * i, lambda i=i: fired.append((i, loop.time() - start >= 0.01 * i)))
    loop.call_later(0.08, done.set_result, None)
    await done
    await aio.sleep(0.02)
    return sorted(fired)


class _Records:
    """Collects asyncio's log records for the duration of a `with`."""

    def __init__(self):
        import logging
        self.records = []
        self._handler = logging.Handler()
        self._handler.emit = self.records.append
        self._logger = logging.getLogger("asyncio")

    def __enter__(self):
        self._logger.addHandler(self._handler)
        return self.records

    def __exit__(self, *exc):
        self._logger.removeHandler(self._handler)


@scenario
async def debug_slow_callback_is_logged(aio):
    import time
    loop = aio.get_running_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.02
    done = loop.create_future()

    def slow():
        time.sleep(0.05)
        done.set_result(None)

    with _Records() as records:
        loop.call_soon(slow)
        await done
        await aio.sleep(0.01)
    loop.set_debug(False)
    msgs = [r.getMessage() for r in records if r.levelname == "WARNING"]
    return [any(m.startswith("Executing ") and "slow" in m and " took " in m
                for m in msgs)]


@scenario
async def debug_slow_task_step_is_logged(aio):
    import time
    loop = aio.get_running_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.02

    async def hog():
        time.sleep(0.05)

    with _Records() as records:
        await aio.create_task(hog(), name="hogging-task")
        await aio.sleep(0.01)
    loop.set_debug(False)
    msgs = [r.getMessage() for r in records if r.levelname == "WARNING"]
    return [any(m.startswith("Executing ") and "hogging-task" in m for m in msgs)]


@scenario
async def slow_callbacks_not_logged_outside_debug(aio):
    import time
    loop = aio.get_running_loop()
    loop.slow_callback_duration = 0.01
    done = loop.create_future()

    def slow():
        time.sleep(0.03)
        done.set_result(None)

    with _Records() as records:
        loop.call_soon(slow)
        await done
        await aio.sleep(0.01)
    return [r.getMessage() for r in records if "took" in r.getMessage()]


@scenario
async def slow_callback_duration_default(aio):
    return aio.get_running_loop().slow_callback_duration


@scenario
async def handle_repr_formats_callback(aio):
    import re
    loop = aio.get_running_loop()
    h = loop.call_soon(print, "x")
    t = loop.call_later(100, divmod, 7, 2)
    reprs = [repr(h), re.sub(r"when=[0-9.e+]+", "when=T", repr(t))]
    h.cancel()
    t.cancel()
    reprs.append(re.sub(r"when=[0-9.e+]+", "when=T", repr(t)))
    return reprs


# Async generators left open on purpose; kept alive here so that run()'s
# shutdown_asyncgens, not the garbage collector, is what finalizes them.
_open_generators = []


@scenario
async def asyncgen_left_open_is_finalized_when_run_ends(aio):
    log = []

    async def numbers():
        try:
            yield 1
            yield 2
        finally:
            log.append("finalized")

    gen = numbers()
    _open_generators.append(gen)
    log.append(await gen.__anext__())
    # run() closes it after this coroutine returns; the harness compares
    # the log once run() has returned.
    return log


@scenario
async def asyncgen_finalizer_may_await(aio):
    log = []

    async def with_async_cleanup():
        try:
            yield "first"
        finally:
            await aio.sleep(0)
            log.append("async cleanup done")

    gen = with_async_cleanup()
    _open_generators.append(gen)
    log.append(await gen.__anext__())
    return log


@scenario
async def asyncgen_finalizer_error_goes_to_handler(aio):
    loop = aio.get_running_loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(
        (ctx["message"].split(" of ")[0], type(ctx.get("exception")).__name__)))

    async def broken_cleanup():
        try:
            yield 1
        finally:
            raise ValueError("cleanup failed")

    gen = broken_cleanup()
    _open_generators.append(gen)
    await gen.__anext__()
    return seen


@scenario
async def loop_code_sees_the_loop_thread(aio):
    # What libraries check to tell "on the loop's thread?" (anyio's portal,
    # callbacks asserting the main thread): the thread that runs the loop,
    # in steps, callbacks and threadsafe callbacks alike; a plain thread is
    # itself.
    loop = aio.get_running_loop()
    home = threading.main_thread()

    def here():
        return [threading.current_thread() is home,
                threading.get_ident() == home.ident,
                threading.current_thread().name]

    seen = []

    async def step():
        await aio.sleep(0)
        seen.append(here())

    await aio.gather(*(step() for _ in range(8)))
    in_callback = loop.create_future()
    loop.call_soon(lambda: in_callback.set_result(here()))
    from_thread = loop.create_future()
    other = []

    def thread_body():
        other.append(here())
        loop.call_soon_threadsafe(lambda: from_thread.set_result(here()))

    t = threading.Thread(target=thread_body)
    t.start()
    t.join(10)
    return [seen[0], all(x == seen[0] for x in seen), await in_callback,
            await from_thread, other[0][:2]]


@scenario
async def log_records_name_the_loop_thread(aio):
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.threadName, record.thread == threading.main_thread().ident))

    log = logging.getLogger("mt_parity_thread_names")
    log.propagate = False
    handler = Keep()
    log.addHandler(handler)
    try:
        async def step(i):
            await aio.sleep(0)
            log.warning("step %d", i)

        await aio.gather(*(step(i) for i in range(4)))
    finally:
        log.removeHandler(handler)
    return sorted(set(records))


@scenario
async def debug_mode_records_where_objects_were_made(aio):
    # stdlib keeps `_source_traceback` (the creating code's stack) on
    # futures, tasks and handles in debug mode, and a failing callback's
    # report carries it as "source_traceback". Their frames below ours
    # differ by backend (stdlib's include its own create_future and
    # call_later), so the observation is whether this function is there.
    loop = aio.get_running_loop()
    here = "debug_mode_records_where_objects_were_made"

    def made_here(stack):
        return stack is not None and here in [frame.name for frame in stack]

    def fail():
        raise ValueError("from a callback")

    loop.set_debug(True)
    reported = loop.create_future()
    loop.set_exception_handler(
        lambda lp, ctx: reported.done() or reported.set_result(ctx))
    try:
        fut = loop.create_future()
        task = aio.ensure_future(aio.sleep(0))
        handle = loop.call_soon(lambda: None)
        timer = loop.call_later(60, lambda: None)
        recorded = [made_here(x._source_traceback) for x in (fut, task, handle, timer)]
        timer.cancel()
        await task
        loop.call_soon(fail)
        ctx = await aio.wait_for(reported, 10)
        report = [type(ctx["exception"]).__name__, made_here(ctx.get("source_traceback"))]
    finally:
        loop.set_exception_handler(None)
        loop.set_debug(False)
    plain = loop.create_future()._source_traceback
    return recorded, report, plain
