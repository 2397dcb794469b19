"""Scenarios: timers at the edges — delays of inf and of decades, "no
timeout" values, and timers never firing early."""

import math

from harness import aobserve, observe, scenario, value_after


async def later_timer_fires(aio, delay=0.02):
    """Whether a short timer armed now still fires (a far one armed
    before it stalled every later timer of the loop)."""
    loop = aio.get_running_loop()
    fut = loop.create_future()
    loop.call_later(delay, fut.set_result, "fired")
    return await aio.wait_for(fut, timeout=5)


@scenario
async def wait_for_infinite_timeout_waits(aio):
    return await aio.wait_for(value_after(aio, "done", 0.02), timeout=math.inf)


@scenario
async def wait_for_large_timeouts_wait(aio):
    # 1e9 s is a common "no timeout" value; 5e8 s and 9.3e9 s sat on either
    # side of the old wheel's and the old conversion's limits.
    out = []
    for timeout in (5e8, 1e9, 9.3e9, 1e12, 1e300):
        out.append(await aobserve(aio.wait_for(value_after(aio, timeout, 0.005),
                                               timeout=timeout)))
    out.append(await later_timer_fires(aio))
    return out


@scenario
async def timeout_inf_lets_the_body_finish(aio):
    async with aio.timeout(math.inf) as cm:
        await aio.sleep(0.02)
    return [cm.expired(), cm.when()]


@scenario
async def call_later_far_delays_do_not_fire(aio):
    loop = aio.get_running_loop()
    fired = []
    handles = [loop.call_later(d, fired.append, d)
               for d in (math.inf, 1e300, 1e10, 9.3e9, 5e9, 1e9, 4.5e8, 4.4e8)]
    await aio.sleep(0.05)
    result = [list(fired), await later_timer_fires(aio)]
    for h in handles:
        h.cancel()
    result.append([h.cancelled() for h in handles])
    return result


@scenario
async def call_at_infinity_does_not_fire(aio):
    loop = aio.get_running_loop()
    fired = []
    h = loop.call_at(math.inf, fired.append, "inf")
    await aio.sleep(0.03)
    h.cancel()
    return [fired, h.when(), await later_timer_fires(aio)]


@scenario
async def sleep_for_decades_is_cancellable(aio):
    out = []
    for delay in (1e10, 1e9, math.inf):
        task = aio.create_task(aio.sleep(delay))
        await aio.sleep(0.02)
        out.append(task.done())
        task.cancel()
        out.append((await aobserve(task))[:2])
    out.append(await later_timer_fires(aio))
    return out


@scenario
async def sleep_nan_is_refused(aio):
    return (await aobserve(aio.sleep(math.nan)))[:2]


@scenario
async def timers_never_fire_early(aio):
    # Each timer is checked against the loop's own clock, the one the
    # deadline was computed with: firing a tick early would show here.
    loop = aio.get_running_loop()
    early = []
    pending = []
    for i in range(60):
        delay = 0.001 * (i % 12) + 0.0005
        fut = loop.create_future()
        due = loop.time() + delay

        def fired(fut=fut, due=due):
            if loop.time() < due:
                early.append(round(due - loop.time(), 6))
            fut.set_result(None)
        loop.call_at(due, fired)
        pending.append(fut)
    for i in range(20):
        start = loop.time()
        await aio.sleep(0.002 + 0.001 * (i % 5))
        if loop.time() - start < 0.002 + 0.001 * (i % 5):
            early.append("sleep")
    await aio.wait_for(aio.gather(*pending), timeout=10)
    return early


@scenario
async def call_later_rejects_what_stdlib_rejects(aio):
    loop = aio.get_running_loop()
    return [observe(loop.call_later, None, print)[:2],
            observe(loop.call_at, None, print)[:2]]


@scenario
async def timer_handle_private_when(aio):
    # Libraries read stdlib's private `_when` (aiohttp's timeout helpers).
    loop = aio.get_running_loop()
    when = loop.time() + 100
    h = loop.call_at(when, lambda: None)
    before = [h._when == when, h._scheduled]
    h.cancel()
    return [before, h._when == when]


@scenario
async def call_at_keeps_an_int_when(aio):
    loop = aio.get_running_loop()
    when = math.ceil(loop.time()) + 100
    h = loop.call_at(when, lambda: None)
    later = loop.call_later(100, lambda: None)
    got = [type(h.when()).__name__, type(h._when).__name__, h.when() == when,
           type(later.when()).__name__]
    h.cancel()
    later.cancel()
    return got
