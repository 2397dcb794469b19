"""The two-backend parity harness.

A scenario is ``async def scenario(aio) -> observation``: written once
against an asyncio-like namespace ``aio``, it returns what a user would
observe (values, exception types and messages, states), never anything that
depends on ordering asyncio does not promise. The harness runs it on stdlib
asyncio and on mt_asyncio with 1 and with N worker threads, and the test
asserts the observations are equal.
"""

import asyncio
import gc

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


_HANDLER_MESSAGES = (
    "Task exception was never retrieved",
    "Future exception was never retrieved",
    "Exception in callback",
    "Unhandled error in exception handler",
    "unhandled exception during asyncio.run() shutdown",
)


def _message_kind(message):
    """The kind of a message the loop's exception handler got, without the
    reprs in it (addresses, callback sources differ between backends)."""
    for known in _HANDLER_MESSAGES:
        if message.startswith(known):
            return known
    return message.split("<", 1)[0].split(":", 1)[0].strip()


async def _recorded(fn, aio):
    """Runs the scenario with an exception handler that records what
    reaches it: the observation is (scenario's result, handler calls). A
    "Task exception was never retrieved" on one backend only is a
    mismatch, as uvloop's tests fail a test whose loop called the handler
    unexpectedly."""
    calls = []
    loop = aio.get_running_loop()
    handle = loop.call_exception_handler

    def recording(context):
        # Wraps the loop's own entry point, so whatever handler a scenario
        # installs still gets the call, and get_exception_handler() is
        # unchanged.
        exc = context.get("exception")
        calls.append((_message_kind(context.get("message", "")),
                      type(exc).__name__ if exc is not None else None))
        return handle(context)

    loop.call_exception_handler = recording
    result = await fn(aio)
    # Errors nobody retrieved are reported when their future is collected:
    # collect here, on both backends, so they count before the run ends.
    gc.collect()
    await aio.sleep(0)  # A report a finalizer scheduled runs now.
    return result, sorted(calls, key=repr)


def run_stdlib(fn):
    return asyncio.run(_recorded(fn, asyncio))


def run_mt(fn, threads):
    return MT.run(_recorded(fn, MT), threads=threads)
