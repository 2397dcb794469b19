"""The two-backend parity harness.

A scenario is ``async def scenario(aio) -> observation``: written once
against an asyncio-like namespace ``aio``, it returns what a user would
observe (values, exception types and messages, states), never anything that
depends on ordering asyncio does not promise. The harness runs it on stdlib
asyncio and on mt_asyncio with 1 and with N worker threads, and the test
asserts the observations are equal.
"""

import asyncio
import types

import mt_asyncio
from mt_asyncio import (base_events, locks, queues, runners, taskgroups, tasks,
                        timeouts)

SCENARIOS = {}


def scenario(fn):
    """Registers a scenario under its function name."""
    if fn.__name__ in SCENARIOS:
        raise ValueError(f"duplicate scenario {fn.__name__}")
    SCENARIOS[fn.__name__] = fn
    return fn


def _mt_namespace():
    """asyncio's names as mt_asyncio implements them so far. Names it does
    not implement yet are absent on purpose: a scenario that needs one fails
    on mt_asyncio with AttributeError instead of silently using stdlib's
    (thread-unsafe) version."""
    ns = types.SimpleNamespace()
    # Exceptions and constants are stdlib's own classes and values.
    for name in ("CancelledError", "TimeoutError", "InvalidStateError",
                 "FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED",
                 "iscoroutine", "iscoroutinefunction", "isfuture",
                 "get_running_loop", "get_event_loop", "wrap_future"):
        setattr(ns, name, getattr(asyncio, name))
    for name in tasks.__all__:
        setattr(ns, name, getattr(tasks, name))
    for name in timeouts.__all__:
        setattr(ns, name, getattr(timeouts, name))
    ns.TaskGroup = taskgroups.TaskGroup
    for name in locks.__all__:
        setattr(ns, name, getattr(locks, name))
    for name in queues.__all__:
        setattr(ns, name, getattr(queues, name))
    ns.BrokenBarrierError = asyncio.BrokenBarrierError
    ns.run = runners.run
    ns.Runner = runners.Runner
    ns.Future = mt_asyncio._core.Future
    ns.new_event_loop = base_events.new_event_loop
    ns.to_thread = asyncio.to_thread  # Built on run_in_executor.
    return ns


MT = _mt_namespace()


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


def run_stdlib(fn):
    return asyncio.run(fn(asyncio))


def run_mt(fn, threads):
    return runners.run(fn(MT), threads=threads)
