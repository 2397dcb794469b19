"""Scenarios: gather, wait, wait_for, timeout, shield."""

from harness import aobserve, fail_after, observe, scenario, value_after


@scenario
async def gather_results_in_argument_order(aio):
    return await aio.gather(*(value_after(aio, i, 0.001 * (10 - i)) for i in range(10)))


@scenario
async def gather_empty(aio):
    return await aio.gather()


@scenario
async def gather_same_awaitable_twice(aio):
    t = aio.create_task(value_after(aio, "x"))
    return await aio.gather(t, t, t)


@scenario
async def gather_duplicates_among_many(aio):
    # Duplicates anywhere in a long argument list (coroutines, tasks and a
    # plain future), each wrapped or awaited once.
    coros = [value_after(aio, i) for i in range(300)]
    fut = aio.get_running_loop().create_future()
    fut.set_result("f")
    task = aio.create_task(value_after(aio, "t"))
    args = coros[:150] + [fut, task, coros[7]] + coros[150:] + [task, fut, coros[299]]
    res = await aio.gather(*args)
    return [res[:3], res[150:153], res[-3:], len(res)]


@scenario
async def gather_duplicate_in_shuffled_arguments(aio):
    # Arguments whose addresses are in no order (many short ascending
    # runs): one repeated coroutine is still found and awaited once.
    import random
    coros = [value_after(aio, i) for i in range(400)]
    order = list(range(400))
    random.Random(5).shuffle(order)
    args = [coros[i] for i in order]
    args.insert(333, coros[order[17]])
    res = await aio.gather(*args)
    return [len(res), res[17] == res[333], sorted(set(res)) == list(range(400))]


class _EqualAwaitable:
    """Awaitables that compare equal to each other: gather() keys its
    arguments by equality, so stdlib awaits only the first."""

    def __init__(self, aio, value, log):
        self.aio, self.value, self.log = aio, value, log

    def __eq__(self, other):
        return isinstance(other, _EqualAwaitable)

    def __hash__(self):
        return 1

    def __await__(self):
        self.log.append(self.value)
        return self.aio.sleep(0, self.value).__await__()


@scenario
async def gather_merges_arguments_that_compare_equal(aio):
    log = []
    res = await aio.gather(_EqualAwaitable(aio, "a", log), _EqualAwaitable(aio, "b", log))
    return [res, log]


@scenario
async def gather_first_exception_propagates(aio):
    return await aobserve(aio.gather(value_after(aio, 1), fail_after(aio, ValueError("bad"))))


@scenario
async def gather_return_exceptions(aio):
    res = await aio.gather(value_after(aio, 1), fail_after(aio, KeyError("k")),
                           return_exceptions=True)
    return [res[0], type(res[1]).__name__]


@scenario
async def gather_child_cancelled(aio):
    async def victim():
        await aio.sleep(10)
    t = aio.create_task(victim())
    g = aio.gather(t, value_after(aio, 2, 0.02))
    await aio.sleep(0.005)
    t.cancel()
    return (await aobserve(g))[:2]


@scenario
async def gather_child_cancelled_return_exceptions(aio):
    async def victim():
        await aio.sleep(10)
    t = aio.create_task(victim())
    g = aio.gather(t, value_after(aio, 2, 0.02), return_exceptions=True)
    await aio.sleep(0.005)
    t.cancel()
    res = await g
    return [type(res[0]).__name__, res[1]]


@scenario
async def gather_outer_cancel_cancels_children(aio):
    children = [aio.create_task(value_after(aio, i, 10)) for i in range(3)]
    g = aio.gather(*children)
    await aio.sleep(0.005)
    first = g.cancel()
    r = await aobserve(g)
    # The children got the cancel; when each finishes unwinding is not
    # ordered against the gather's own completion.
    await aio.wait(children)
    return [first, r[:2], [c.cancelled() for c in children]]


@scenario
async def gather_many_children_concurrently(aio):
    async def work(i):
        for _ in range(3):
            await aio.sleep(0)
        return i * i
    res = await aio.gather(*(work(i) for i in range(300)))
    return sum(res)


@scenario
async def wait_all_completed(aio):
    ts = [aio.create_task(value_after(aio, i, 0.001 * i)) for i in range(5)]
    done, pending = await aio.wait(ts)
    return [len(done), len(pending), sorted(t.result() for t in done)]


@scenario
async def wait_first_completed(aio):
    fast = aio.create_task(value_after(aio, "fast", 0.001))
    slow = aio.create_task(value_after(aio, "slow", 0.5))
    done, pending = await aio.wait([fast, slow], return_when=aio.FIRST_COMPLETED)
    slow.cancel()
    return [[t.result() for t in done], len(pending)]


@scenario
async def wait_first_exception(aio):
    bad = aio.create_task(fail_after(aio, ValueError("x"), 0.001))
    slow = aio.create_task(value_after(aio, "slow", 0.5))
    done, pending = await aio.wait([bad, slow], return_when=aio.FIRST_EXCEPTION)
    slow.cancel()
    return [len(done), len(pending), type(bad.exception()).__name__]


@scenario
async def wait_first_exception_without_exceptions(aio):
    ts = [aio.create_task(value_after(aio, i, 0.001)) for i in range(3)]
    done, pending = await aio.wait(ts, return_when=aio.FIRST_EXCEPTION)
    return [len(done), len(pending)]


@scenario
async def wait_timeout_leaves_pending(aio):
    slow = aio.create_task(value_after(aio, "slow", 0.5))
    done, pending = await aio.wait([slow], timeout=0.01)
    slow.cancel()
    return [len(done), len(pending)]


@scenario
async def wait_argument_errors(aio):
    async def coro():
        pass
    c = coro()
    out = [(await aobserve(aio.wait([])))[:2],
           (await aobserve(aio.wait([c])))[:2],
           (await aobserve(aio.wait([aio.create_task(value_after(aio, 1))],
                                    return_when="bogus")))[:2]]
    c.close()
    return out


@scenario
async def wait_for_success(aio):
    return await aio.wait_for(value_after(aio, "ok", 0.001), timeout=1)


@scenario
async def wait_for_times_out_and_cancels(aio):
    cancelled = []

    async def slow():
        try:
            await aio.sleep(10)
        except aio.CancelledError:
            cancelled.append(True)
            raise
    r = await aobserve(aio.wait_for(slow(), timeout=0.01))
    return [r[:2], cancelled]


@scenario
async def wait_for_zero_timeout(aio):
    return (await aobserve(aio.wait_for(value_after(aio, 1, 0.5), timeout=0)))[:2]


@scenario
async def wait_for_negative_timeout(aio):
    return (await aobserve(aio.wait_for(value_after(aio, 1, 0.5), timeout=-1)))[:2]


@scenario
async def wait_for_zero_timeout_on_done_future(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result("done")
    return await aio.wait_for(fut, timeout=0)


@scenario
async def wait_for_none_timeout(aio):
    return await aio.wait_for(value_after(aio, "forever ok", 0.01), timeout=None)


@scenario
async def wait_for_inner_cancelled(aio):
    async def inner():
        raise aio.CancelledError()
    return (await aobserve(aio.wait_for(inner(), timeout=1)))[:2]


@scenario
async def timeout_expires(aio):
    try:
        async with aio.timeout(0.01) as cm:
            await aio.sleep(10)
    except TimeoutError:
        return ["TimeoutError", cm.expired(), aio.current_task().cancelling()]


@scenario
async def timeout_not_reached(aio):
    async with aio.timeout(1) as cm:
        await aio.sleep(0.001)
    return [cm.expired(), aio.current_task().cancelling()]


@scenario
async def timeout_none_never_expires(aio):
    async with aio.timeout(None) as cm:
        await aio.sleep(0.01)
    return [cm.when(), cm.expired()]


@scenario
async def timeout_reschedule(aio):
    loop = aio.get_running_loop()
    try:
        async with aio.timeout(10) as cm:
            cm.reschedule(loop.time() + 0.01)
            await aio.sleep(10)
    except TimeoutError:
        return "rescheduled earlier"


@scenario
async def timeout_nested_inner_fires(aio):
    out = []
    async with aio.timeout(5):
        try:
            async with aio.timeout(0.01):
                await aio.sleep(10)
        except TimeoutError:
            out.append("inner")
    out.append(aio.current_task().cancelling())
    return out


@scenario
async def timeout_outside_task_refused(aio):
    t = aio.timeout(1)
    return [observe(t.reschedule, 1)[:2]]


@scenario
async def timeout_at_past_deadline(aio):
    loop = aio.get_running_loop()
    try:
        async with aio.timeout_at(loop.time() - 1):
            await aio.sleep(10)
    except TimeoutError:
        return "expired at once"


@scenario
async def shield_protects_inner(aio):
    loop = aio.get_running_loop()
    gate = loop.create_future()
    started = loop.create_future()

    async def inner_work():
        await gate
        return "inner done"
    inner = aio.create_task(inner_work())

    async def outer():
        started.set_result(None)
        return await aio.shield(inner)
    o = aio.create_task(outer())
    await started
    o.cancel()
    r = await aobserve(o)
    gate.set_result(None)
    return [r[:2], await inner, inner.cancelled()]


@scenario
async def shield_of_done_future(aio):
    fut = aio.get_running_loop().create_future()
    fut.set_result(3)
    return [aio.shield(fut) is fut, await aio.shield(fut)]


@scenario
async def shield_inner_exception(aio):
    return (await aobserve(aio.shield(fail_after(aio, KeyError("x")))))[:2]


@scenario
async def ensure_future_variants(aio):
    loop = aio.get_running_loop()
    fut = loop.create_future()
    same = aio.ensure_future(fut) is fut
    t = aio.ensure_future(value_after(aio, 5))
    r = await t
    bad = observe(aio.ensure_future, 42)[:2]
    fut.cancel()
    return [same, r, bad]
