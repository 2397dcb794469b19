"""Scenarios: loop.add_signal_handler() / remove_signal_handler().

Each sends itself a signal with os.kill and waits (bounded) for its handler;
every handler a scenario adds it removes, and the signal's disposition is
part of what it observes."""

import contextvars
import os
import signal

from harness import observe, scenario

TIMEOUT = 10
_tag = contextvars.ContextVar("tag", default="unset")


def _disposition(sig):
    handler = signal.getsignal(sig)
    if handler is signal.default_int_handler:
        return "default_int_handler"
    if callable(handler):
        return "python handler"
    return getattr(handler, "name", repr(handler))


@scenario
async def signal_handler_runs_with_its_args_in_the_adders_context(aio):
    loop = aio.get_running_loop()
    calls = []
    got = aio.Event()

    def handler(*args):
        calls.append((args, _tag.get()))
        got.set()

    _tag.set("at add")
    loop.add_signal_handler(signal.SIGUSR1, handler, "a", 1)
    _tag.set("after add")
    installed = _disposition(signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGUSR1)
    await aio.wait_for(got.wait(), TIMEOUT)
    removed = [loop.remove_signal_handler(signal.SIGUSR1),
               loop.remove_signal_handler(signal.SIGUSR1)]
    return [calls, installed, removed, _disposition(signal.SIGUSR1)]


@scenario
async def signal_handler_runs_once_per_signal_and_keeps_its_context(aio):
    loop = aio.get_running_loop()
    seen = []
    got = aio.Queue()
    counter = contextvars.ContextVar("counter", default=0)

    def handler():
        # One context for every call: what a call sets, the next sees.
        counter.set(counter.get() + 1)
        got.put_nowait(counter.get())

    loop.add_signal_handler(signal.SIGUSR2, handler)
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGUSR2)
        seen.append(await aio.wait_for(got.get(), TIMEOUT))
    loop.remove_signal_handler(signal.SIGUSR2)
    return [seen, counter.get(), _disposition(signal.SIGUSR2)]


@scenario
async def signal_handler_replaced_by_a_second_add(aio):
    loop = aio.get_running_loop()
    calls = []
    got = aio.Event()

    def first():
        calls.append("first")

    def second():
        calls.append("second")
        got.set()

    loop.add_signal_handler(signal.SIGUSR1, first)
    loop.add_signal_handler(signal.SIGUSR1, second)
    os.kill(os.getpid(), signal.SIGUSR1)
    await aio.wait_for(got.wait(), TIMEOUT)
    return [calls, loop.remove_signal_handler(signal.SIGUSR1),
            _disposition(signal.SIGUSR1)]


@scenario
async def signal_handler_for_sigint_restores_default_int_handler(aio):
    loop = aio.get_running_loop()
    before = _disposition(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    during = _disposition(signal.SIGINT)
    removed = loop.remove_signal_handler(signal.SIGINT)
    after = _disposition(signal.SIGINT)
    # The runner installs its own SIGINT handler for the run (stdlib's
    # asyncio.run does too); put back what it had.
    return [before, during, removed, after]


@scenario
async def signal_handler_bad_arguments(aio):
    loop = aio.get_running_loop()

    async def coro():
        pass

    def handler():
        pass

    a_coroutine = coro()
    observed = [
        observe(loop.add_signal_handler, "SIGUSR1", handler),
        observe(loop.add_signal_handler, 0, handler),
        observe(loop.add_signal_handler, 9999, handler),
        observe(loop.add_signal_handler, signal.SIGKILL, handler),
        observe(loop.add_signal_handler, signal.SIGSTOP, handler),
        observe(loop.add_signal_handler, signal.SIGUSR1, coro),
        observe(loop.add_signal_handler, signal.SIGUSR1, a_coroutine),
        observe(loop.remove_signal_handler, 1.5),
        observe(loop.remove_signal_handler, -1),
        observe(loop.remove_signal_handler, signal.SIGUSR1),
        _disposition(signal.SIGKILL),
        _disposition(signal.SIGUSR1),
    ]
    a_coroutine.close()
    return observed


@scenario
async def signal_handler_exception_goes_to_the_exception_handler(aio):
    loop = aio.get_running_loop()
    reported = aio.Event()
    contexts = []

    def handler():
        raise ZeroDivisionError("in a signal handler")

    def exception_handler(loop, context):
        contexts.append((context["message"].split(" ", 3)[:3],
                         type(context["exception"]).__name__))
        reported.set()

    loop.set_exception_handler(exception_handler)
    loop.add_signal_handler(signal.SIGUSR1, handler)
    os.kill(os.getpid(), signal.SIGUSR1)
    await aio.wait_for(reported.wait(), TIMEOUT)
    loop.remove_signal_handler(signal.SIGUSR1)
    loop.set_exception_handler(None)
    return contexts


@scenario
async def signal_handler_added_from_a_task_off_the_loop_thread(aio):
    # From a task (on ours: a worker) as well as from the loop's own code;
    # from a plain thread it is refused with stdlib's error.
    loop = aio.get_running_loop()
    got = aio.Event()

    async def install():
        loop.add_signal_handler(signal.SIGUSR2, got.set)

    await aio.create_task(install())
    os.kill(os.getpid(), signal.SIGUSR2)
    await aio.wait_for(got.wait(), TIMEOUT)
    from_thread = await aio.to_thread(
        observe, loop.add_signal_handler, signal.SIGUSR1, got.set)
    async def remove():
        return loop.remove_signal_handler(signal.SIGUSR2)

    removed = await aio.create_task(remove())
    return [from_thread, removed, _disposition(signal.SIGUSR1),
            _disposition(signal.SIGUSR2)]
