"""Scenarios: TaskGroup, as_completed, run_coroutine_threadsafe."""

import threading

from harness import aobserve, fail_after, scenario, value_after


def _group_summary(eg):
    return [type(eg).__name__, sorted(type(e).__name__ for e in eg.exceptions)]


@scenario
async def taskgroup_collects_results(aio):
    async with aio.TaskGroup() as tg:
        ts = [tg.create_task(value_after(aio, i, 0.001 * (5 - i))) for i in range(5)]
    return [t.result() for t in ts]


@scenario
async def taskgroup_error_cancels_siblings(aio):
    async def sibling():
        await aio.sleep(10)
    siblings = []
    try:
        async with aio.TaskGroup() as tg:
            for _ in range(3):
                siblings.append(tg.create_task(sibling()))
            tg.create_task(fail_after(aio, ValueError("first"), 0.005))
    except BaseExceptionGroup as eg:
        return [_group_summary(eg), sum(t.cancelled() for t in siblings),
                aio.current_task().cancelling()]


@scenario
async def taskgroup_two_errors(aio):
    # Whether the second task fails before the first failure cancels it is
    # ordering asyncio does not promise: observe only what is certain.
    try:
        async with aio.TaskGroup() as tg:
            tg.create_task(fail_after(aio, ValueError("a")))
            tg.create_task(fail_after(aio, KeyError("b")))
    except BaseExceptionGroup as eg:
        names = {type(e).__name__ for e in eg.exceptions}
        return [type(eg).__name__, bool(names), names <= {"ValueError", "KeyError"}]


@scenario
async def taskgroup_tasks_created_in_the_step_a_sibling_fails(aio):
    # The first child fails at its first step, which at several workers
    # runs beside the parent's step that goes on creating tasks. Those
    # join the group and are cancelled, as on one thread where the failure
    # is handled after the step; one created after the abort's check was
    # missed by it and __aexit__ waited for it forever.
    async def fail_now():
        raise ValueError("first")

    async def sibling():
        await aio.sleep(10)

    outcomes = set()
    for _ in range(200):
        siblings = []
        try:
            async with aio.timeout(5):
                try:
                    async with aio.TaskGroup() as tg:
                        tg.create_task(fail_now())
                        for _ in range(3):
                            siblings.append(tg.create_task(sibling()))
                except BaseExceptionGroup as eg:
                    outcomes.add((*map(str, _group_summary(eg)),
                                  sum(t.cancelled() for t in siblings)))
        except TimeoutError:
            outcomes.add("hung")
    return sorted(outcomes)


@scenario
async def taskgroup_body_error(aio):
    try:
        async with aio.TaskGroup() as tg:
            tg.create_task(value_after(aio, 1, 10))
            await aio.sleep(0)
            raise ZeroDivisionError()
    except BaseExceptionGroup as eg:
        return _group_summary(eg)


@scenario
async def taskgroup_nested(aio):
    async def inner_group():
        async with aio.TaskGroup() as tg:
            a = tg.create_task(value_after(aio, "a"))
            b = tg.create_task(value_after(aio, "b", 0.001))
        return a.result() + b.result()
    async with aio.TaskGroup() as tg:
        x = tg.create_task(inner_group())
        y = tg.create_task(inner_group())
    return [x.result(), y.result()]


@scenario
async def taskgroup_create_task_after_exit(aio):
    async with aio.TaskGroup() as tg:
        pass
    coro = value_after(aio, 1)
    try:
        tg.create_task(coro)
    except RuntimeError as e:
        return ["RuntimeError", "finished" in str(e)]


@scenario
async def taskgroup_create_task_before_enter(aio):
    tg = aio.TaskGroup()
    try:
        tg.create_task(value_after(aio, 1))
    except RuntimeError as e:
        return ["RuntimeError", "not been entered" in str(e)]


@scenario
async def taskgroup_late_create_task_while_exiting(aio):
    results = []
    async with aio.TaskGroup() as tg:
        async def spawner():
            await aio.sleep(0.005)
            t = tg.create_task(value_after(aio, "late"))
            results.append(await t)
        tg.create_task(spawner())
    return results


@scenario
async def taskgroup_parent_cancelled_from_outside(aio):
    started = aio.get_running_loop().create_future()

    async def body():
        async with aio.TaskGroup() as tg:
            tg.create_task(value_after(aio, 1, 10))
            started.set_result(None)
            await aio.sleep(10)
    t = aio.create_task(body())
    await started
    t.cancel()
    r = await aobserve(t)
    return [r[:2], t.cancelled()]


@scenario
async def taskgroup_many_tasks(aio):
    async with aio.TaskGroup() as tg:
        ts = [tg.create_task(value_after(aio, i)) for i in range(200)]
    return sum(t.result() for t in ts)


@scenario
async def taskgroup_children_finish_together_on_every_worker(aio):
    # Children that return at once finish on every worker at the same
    # moment, each leaving the group from its own worker: none may be
    # lost (a lost one keeps __aexit__ waiting) and none counted twice.
    async def child(i):
        return i

    async def sleepy_child(i):
        await aio.sleep(0)
        return i

    rounds = []
    for r in range(100):
        async with aio.timeout(5):
            async with aio.TaskGroup() as tg:
                ts = [tg.create_task(child(i) if i % 2 else sleepy_child(i))
                      for i in range(24)]
        rounds.append((sum(t.result() for t in ts), len(tg._tasks)))
    return sorted(set(rounds)), len(rounds)


@scenario
async def taskgroup_with_eager_children(aio):
    # With the eager task factory a child that returns or raises before
    # its first await is done inside create_task(): the group still
    # counts it, and a failure still cancels the siblings after the body.
    aio.get_running_loop().set_task_factory(aio.eager_task_factory)
    try:
        async def quick(i):
            return i

        async def slow(i):
            await aio.sleep(0.01)
            return i

        async with aio.TaskGroup() as tg:
            done_at_once = [tg.create_task(quick(i)) for i in range(5)]
            later = [tg.create_task(slow(i)) for i in range(5)]
            eager_flags = [t.done() for t in done_at_once + later]
        ok = [t.result() for t in done_at_once + later]

        async def fail_now():
            raise KeyError("eager")

        try:
            async with aio.TaskGroup() as tg:
                sibling = tg.create_task(slow(1))
                tg.create_task(fail_now())
                body_went_on = True
        except BaseExceptionGroup as eg:
            failed = (_group_summary(eg), body_went_on, sibling.cancelled())
        return eager_flags, ok, failed
    finally:
        aio.get_running_loop().set_task_factory(None)


@scenario
async def as_completed_async_for(aio):
    ts = [aio.create_task(value_after(aio, i, 0.002 * i)) for i in range(4)]
    seen = []
    async for t in aio.as_completed(ts):
        seen.append(await t)
    return sorted(seen)


@scenario
async def as_completed_plain_iteration(aio):
    out = []
    for aw in aio.as_completed([value_after(aio, "x", 0.001), value_after(aio, "y")]):
        out.append(await aw)
    return sorted(out)


@scenario
async def as_completed_timeout(aio):
    slow = aio.create_task(value_after(aio, "slow", 1))
    out = []
    try:
        for aw in aio.as_completed([slow], timeout=0.01):
            out.append(await aw)
    except TimeoutError:
        out.append("TimeoutError")
    slow.cancel()
    return out


@scenario
async def as_completed_rejects_single_future(aio):
    fut = aio.get_running_loop().create_future()
    try:
        aio.as_completed(fut)
    except TypeError:
        return "TypeError"
    finally:
        fut.cancel()


@scenario
async def run_coroutine_threadsafe_from_foreign_threads(aio):
    loop = aio.get_running_loop()
    results = []
    lock = threading.Lock()

    def foreign(i):
        cf = aio.run_coroutine_threadsafe(value_after(aio, i, 0.001), loop)
        r = cf.result(timeout=10)
        with lock:
            results.append(r)
    threads = [threading.Thread(target=foreign, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    await aio.to_thread(lambda: [t.join(10) for t in threads])
    return sorted(results)


@scenario
async def run_coroutine_threadsafe_exception(aio):
    loop = aio.get_running_loop()

    def foreign():
        cf = aio.run_coroutine_threadsafe(fail_after(aio, KeyError("far")), loop)
        try:
            cf.result(timeout=10)
        except KeyError:
            return "KeyError"
    return await aio.to_thread(foreign)
