"""mt_asyncio._core.Future against stdlib asyncio.Future.

Each scenario runs on both classes, on a stdlib event loop, and compares what
a user observes. The thread-safety tests at the end are ours alone: stdlib's
Future does not promise them.
"""

import asyncio
import contextvars
import gc
import sys
import threading

import pytest

from mt_asyncio import _core

FUTURES = {"stdlib": asyncio.Future, "mt": _core.Future}
WAIT = 10  # Seconds; every wait in these tests is bounded.


@pytest.fixture(params=sorted(FUTURES))
def Future(request):
    return FUTURES[request.param]


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.close()


def outcome(fn):
    """What a call does, as something comparable: ('ok', value) or
    ('raise', exception type name, message)."""
    try:
        return ("ok", fn())
    except BaseException as e:  # noqa: BLE001 - we compare every outcome.
        return ("raise", type(e).__name__, str(e))


def parity(scenario):
    """Runs scenario(FutureClass, loop) for stdlib's Future and ours, each on
    a fresh stdlib loop, and asserts both observe the same thing."""
    seen = {}
    for name, cls in FUTURES.items():
        loop = asyncio.new_event_loop()
        try:
            seen[name] = scenario(cls, loop)
        finally:
            loop.close()
    assert seen["mt"] == seen["stdlib"]
    return seen["mt"]


def test_pending_future_refuses_result_and_exception():
    def scenario(Future, loop):
        fut = Future(loop=loop)
        return [fut.done(), fut.cancelled(), outcome(fut.result),
                outcome(fut.exception), fut._state, fut.get_loop() is loop,
                fut._loop is loop]
    obs = parity(scenario)
    assert obs[2][:2] == ("raise", "InvalidStateError")


def test_result_is_set_once():
    def scenario(Future, loop):
        fut = Future(loop=loop)
        fut.set_result(42)
        return [fut.done(), fut._state, fut.result(), fut.exception(),
                outcome(lambda: fut.set_result(1)),
                outcome(lambda: fut.set_exception(ValueError())),
                outcome(lambda: fut.set_exception(42)), fut.cancel()]
    obs = parity(scenario)
    assert obs[4][:2] == ("raise", "InvalidStateError")


def test_exception_class_is_instantiated_and_raised():
    def scenario(Future, loop):
        fut = Future(loop=loop)
        fut.set_exception(KeyError)
        return [type(fut.exception()).__name__, outcome(fut.result)[:2]]
    assert parity(scenario) == ["KeyError", ("raise", "KeyError")]


@pytest.mark.parametrize("bad", [StopIteration(), StopIteration, 42, "x", None])
def test_bad_exceptions(bad):
    def scenario(Future, loop):
        fut = Future(loop=loop)
        result = outcome(lambda: fut.set_exception(bad))
        stored = None
        if fut.done():
            exc = fut.exception()
            stored = (type(exc).__name__, str(exc), type(exc.__cause__).__name__)
        return [result, fut.done(), stored]
    parity(scenario)


def test_cancel_with_message(Future, loop):
    fut = Future(loop=loop)
    assert fut.cancel("stop it") is True
    assert fut.cancel() is False
    assert fut.cancelled() and fut.done() and fut._state == "CANCELLED"
    assert outcome(fut.result) == ("raise", "CancelledError", "stop it")
    assert outcome(fut.exception) == ("raise", "CancelledError", "stop it")
    assert outcome(lambda: fut.set_result(1))[1] == "InvalidStateError"


def test_done_callbacks_run_through_the_loop_in_order_with_context(Future, loop):
    var = contextvars.ContextVar("var", default="unset")
    seen = []
    fut = Future(loop=loop)
    ctx = contextvars.copy_context()
    ctx.run(var.set, "registered-context")
    fut.add_done_callback(lambda f: seen.append(("a", var.get())))
    fut.add_done_callback(lambda f: seen.append(("b", var.get())), context=ctx)
    fut.add_done_callback(lambda f: seen.append(("c", f.result())))
    fut.set_result(7)
    assert seen == []  # Scheduled, not called inline.
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == [("a", "unset"), ("b", "registered-context"), ("c", 7)]
    # Added after completion: scheduled at once.
    fut.add_done_callback(lambda f: seen.append("late"))
    loop.run_until_complete(asyncio.sleep(0))
    assert seen[-1] == "late"


def test_remove_done_callback_counts_every_instance(Future, loop):
    fut = Future(loop=loop)
    calls = []

    def cb(f):
        calls.append(1)

    fut.add_done_callback(cb)
    fut.add_done_callback(cb)
    fut.add_done_callback(print)
    assert fut.remove_done_callback(cb) == 2
    assert fut.remove_done_callback(cb) == 0
    assert len(fut._callbacks) == 1
    fut.cancel()
    loop.run_until_complete(asyncio.sleep(0))
    assert calls == []


def test_add_done_callback_argument_errors(Future, loop):
    fut = Future(loop=loop)
    assert outcome(lambda: fut.add_done_callback())[:2] == ("raise", "TypeError")
    assert outcome(lambda: fut.add_done_callback(print, ctx=None))[:2] == ("raise", "TypeError")


def test_awaiting_in_a_task(Future, loop):
    async def waiter(fut):
        return await fut

    fut = Future(loop=loop)
    task = loop.create_task(waiter(fut))
    loop.call_soon(fut.set_result, "done")
    assert loop.run_until_complete(task) == "done"

    fut = Future(loop=loop)
    task = loop.create_task(waiter(fut))
    loop.call_soon(fut.set_exception, ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        loop.run_until_complete(task)

    fut = Future(loop=loop)
    task = loop.create_task(waiter(fut))
    loop.call_soon(fut.cancel, "bye")
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)
    assert task.cancelled()


def test_cancelling_the_task_cancels_the_awaited_future(Future, loop):
    fut = Future(loop=loop)

    async def waiter():
        await fut

    task = loop.create_task(waiter())
    loop.run_until_complete(asyncio.sleep(0))
    task.cancel("from outside")
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)
    assert fut.cancelled()


def test_await_protocol_misuse(Future, loop):
    fut = Future(loop=loop)
    it = fut.__await__()
    assert next(it) is fut
    assert fut._asyncio_future_blocking is True
    assert outcome(lambda: next(it)) == ("raise", "RuntimeError", "await wasn't used with future")
    done = Future(loop=loop)
    done.set_result(3)
    with pytest.raises(StopIteration) as stop:
        next(iter(done))
    assert stop.value.value == 3


def test_a_finished_await_ends_the_same_way_by_each_protocol(Future, loop):
    # next() and send(None) raise StopIteration(value), None included; the
    # tp_iternext slot's shortcut for None (no exception made) must not
    # show through either of them, nor through an await.
    for value in (None, 0, (1, 2)):
        fut = Future(loop=loop)
        fut.set_result(value)
        for step in (next, lambda it: it.send(None)):
            with pytest.raises(StopIteration) as stop:
                step(fut.__await__())
            assert stop.value.value == value

        async def awaited(f=fut):
            return await f
        assert loop.run_until_complete(awaited()) == value


def test_blocking_flag_rules():
    def scenario(Future, loop):
        fut = Future(loop=loop)
        obs = [fut._asyncio_future_blocking]
        fut._asyncio_future_blocking = 1
        obs.append(fut._asyncio_future_blocking)
        obs.append(outcome(lambda: delattr(fut, "_asyncio_future_blocking")))
        obs.append(outcome(lambda: setattr(fut, "_log_traceback", True)))
        obs += [asyncio.isfuture(fut), asyncio.isfuture(Future)]
        return obs
    parity(scenario)


def test_repr_follows_state(Future, loop):
    fut = Future(loop=loop)
    assert "pending" in repr(fut)
    fut.set_result(5)
    assert "finished result=5" in repr(fut)


def test_generic_alias(Future):
    assert Future[int].__origin__ is Future


def test_unretrieved_exception_is_reported(Future, loop):
    reports = []
    loop.set_exception_handler(lambda lp, context: reports.append(context))
    fut = Future(loop=loop)
    fut.set_exception(RuntimeError("lost"))
    del fut
    gc.collect()
    assert len(reports) == 1
    assert reports[0]["message"].endswith("exception was never retrieved")
    assert isinstance(reports[0]["exception"], RuntimeError)


def test_retrieved_exception_is_not_reported(Future, loop):
    reports = []
    loop.set_exception_handler(lambda lp, context: reports.append(context))
    fut = Future(loop=loop)
    fut.set_exception(RuntimeError("seen"))
    fut.exception()
    del fut
    gc.collect()
    assert reports == []


def test_subclass_and_attributes(Future, loop):
    class Sub(Future):
        pass

    fut = Sub(loop=loop)
    fut.extra = 1
    fut.set_result(None)
    assert fut.result() is None and fut.extra == 1


# --- ours only: many threads at once ---------------------------------------------


class RecordingLoop:
    """call_soon runs callbacks inline on the calling thread, counting them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0

    def call_soon(self, fn, *args, context=None):
        with self.lock:
            self.calls += 1
        context.run(fn, *args)

    def call_exception_handler(self, context):
        pass


def test_concurrent_completion_has_exactly_one_winner():
    loop = RecordingLoop()
    futures = [_core.Future(loop=loop) for _ in range(2000)]
    fired = [0] * len(futures)
    fired_lock = threading.Lock()

    def on_done(i):
        def cb(f):
            with fired_lock:
                fired[i] += 1
        return cb

    for i, f in enumerate(futures):
        f.add_done_callback(on_done(i))
    wins = []
    barrier = threading.Barrier(4)

    def racer(kind):
        barrier.wait(WAIT)
        won = 0
        for f in futures:
            try:
                if kind == 0:
                    f.set_result(1)
                    won += 1
                elif kind == 1:
                    f.set_exception(ValueError())
                    won += 1
                elif kind == 2:
                    won += f.cancel()
                else:
                    f.add_done_callback(lambda f: None)
            except asyncio.InvalidStateError:
                pass
        wins.append(won)

    threads = [threading.Thread(target=racer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert sum(wins) == len(futures)
    assert fired == [1] * len(futures)
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            pass  # Retrieved: no "never retrieved" noise.


def test_callbacks_added_while_completing_are_never_lost():
    loop = RecordingLoop()
    for _ in range(200):
        fut = _core.Future(loop=loop)
        hits = []
        start = threading.Event()

        def adder():
            start.wait(WAIT)
            for _ in range(50):
                fut.add_done_callback(lambda f: hits.append(1))

        t = threading.Thread(target=adder)
        t.start()
        start.set()
        fut.set_result(None)
        t.join(WAIT)
        assert len(hits) == 50
