"""The two-backend parity harness.

A scenario is ``async def scenario(aio) -> observation``: written once
against an asyncio-like namespace ``aio``, it returns what a user would
observe (values, exception types and messages, states), never anything that
depends on ordering asyncio does not promise. The harness runs it on stdlib
asyncio and on mt_asyncio with 1 and with N worker threads, and the test
asserts the observations are equal.
"""

import asyncio

import mt_asyncio.asyncio

SCENARIOS = {}


def scenario(fn):
    """Registers a scenario under its function name."""
    if fn.__name__ in SCENARIOS:
        raise ValueError(f"duplicate scenario {fn.__name__}")
    SCENARIOS[fn.__name__] = fn
    return fn


def since(*version, reason=None):
    """Marks a scenario that uses an API stdlib added in `version` (e.g.
    ``create_task(eager_start=...)`` in 3.14), or that older stdlib gets
    wrong (`reason` says how); older interpreters skip it with the
    reason."""
    def mark(fn):
        fn.min_python = version
        fn.skip_reason = reason
        return fn
    return mark


# The product namespace itself: what `import mt_asyncio.asyncio as asyncio`
# gives a user.
MT = mt_asyncio.asyncio


def observe(fn, *args, **kwargs):
    """What a call does: ('ok', result) or ('raise', type name, message)."""
    try:
        return ("ok", fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - every outcome is compared.
        return ("raise", type(e).__name__, str(e))


async def aobserve(awaitable):
    try:
        return ("ok", await awaitable)
    except BaseException as e:  # noqa: BLE001
        return ("raise", type(e).__name__, str(e))


async def value_after(aio, v, delay=0):
    """A coroutine scenarios wrap in tasks: sleeps `delay`, returns `v`."""
    await aio.sleep(delay)
    return v


async def fail_after(aio, exc, delay=0):
    """Sleeps `delay`, then raises `exc`."""
    await aio.sleep(delay)
    raise exc


def run_stdlib(fn):
    return asyncio.run(fn(asyncio))


def run_mt(fn, threads):
    return MT.run(fn(MT), threads=threads)
