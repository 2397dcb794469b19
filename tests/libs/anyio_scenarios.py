"""anyio's own semantics on its asyncio backend, on whichever backend
backend_child.py set up: cancel scopes (nested, shielded, cancelled from
another task, deadlines), move_on_after/fail_after, task groups, its
synchronization primitives and streams, threads, sockets and processes.
Each scenario returns what a user of anyio observes; on mt_asyncio it must
equal stdlib's.

anyio cancels a scope's tasks by calling task.cancel() again and again
(from loop callbacks) until each one's current await is interrupted; mt-asyncio 0.3.0a1's implementation livelocked there. The busy and many-task scenarios
below are that case."""

import sys
import time

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread

SCENARIOS = {}
WAIT = 20  # Every wait that could hang is under a deadline this long.


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def busy(seconds):
    """CPU work without an await: the task cannot be interrupted."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


@scenario
async def nested_scopes_cancel_outer():
    seen = []
    with anyio.fail_after(WAIT):
        with anyio.CancelScope() as outer:
            with anyio.CancelScope() as inner:
                outer.cancel()
                try:
                    await anyio.sleep(WAIT)
                except anyio.get_cancelled_exc_class():
                    seen.append("inner sleep cancelled")
                    raise
            seen.append("not reached")
    return [seen, outer.cancel_called, outer.cancelled_caught,
            inner.cancel_called, inner.cancelled_caught]


@scenario
async def nested_scopes_cancel_inner_only():
    with anyio.fail_after(WAIT):
        with anyio.CancelScope() as outer:
            with anyio.CancelScope() as inner:
                inner.cancel()
                await anyio.sleep(WAIT)
            await anyio.sleep(0)
            after_inner = "outer still running"
    return [after_inner, outer.cancel_called, inner.cancelled_caught]


@scenario
async def shielded_scope_finishes_its_work():
    seen = []
    with anyio.fail_after(WAIT):
        with anyio.CancelScope() as outer:
            outer.cancel()
            with anyio.CancelScope(shield=True) as shielded:
                await anyio.sleep(0.05)
                seen.append("shielded sleep completed")
                with anyio.move_on_after(0.01) as inner:  # Its own deadline still works.
                    await anyio.sleep(WAIT)
                seen.append(["inner deadline", inner.cancelled_caught])
            seen.append("after the shield, before the next await")
            await anyio.sleep(0)
    return [seen, shielded.cancelled_caught, outer.cancelled_caught]


@scenario
async def move_on_after_and_deadlines():
    start = anyio.current_time()
    with anyio.move_on_after(0.05) as scope:
        await anyio.sleep(WAIT)
    elapsed = anyio.current_time() - start
    with anyio.move_on_after(WAIT) as roomy:
        with anyio.move_on_after(0.02) as tight:
            await anyio.sleep(WAIT)
    with anyio.move_on_after(WAIT) as unused:
        await anyio.sleep(0.001)
    return [scope.cancelled_caught, 0.04 < elapsed < WAIT,
            tight.cancelled_caught, roomy.cancelled_caught,
            unused.cancelled_caught, unused.deadline > anyio.current_time()]


@scenario
async def fail_after_raises_timeout():
    outcome = []
    try:
        with anyio.fail_after(0.02):
            await anyio.sleep(WAIT)
    except TimeoutError as e:
        outcome.append(type(e).__name__)
    with anyio.move_on_after(0.02) as outer:  # The outer deadline is first.
        try:
            with anyio.fail_after(WAIT):
                await anyio.sleep(WAIT)
        except TimeoutError:
            outcome.append("inner fail_after should not fire")
    outcome.append(outer.cancelled_caught)
    return outcome


@scenario
async def task_group_collects_and_waits():
    results = {}

    async def child(i):
        await anyio.sleep(0.001 * (i % 5))
        results[i] = i * i

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for i in range(100):
                tg.start_soon(child, i)
    return sorted(results.items()) == [(i, i * i) for i in range(100)]


@scenario
async def task_group_error_cancels_siblings():
    cancelled = []

    async def sleeper(i):
        try:
            await anyio.sleep(WAIT)
        except anyio.get_cancelled_exc_class():
            cancelled.append(i)
            raise

    async def failer():
        await anyio.sleep(0.01)
        raise ValueError("boom")

    try:
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(sleeper, i)
                tg.start_soon(failer)
    except* ValueError as group:
        caught = [type(e).__name__ for e in group.exceptions]
    return [caught, sorted(cancelled)]


@scenario
async def task_group_start_waits_for_started():
    async def server(*, task_status=anyio.TASK_STATUS_IGNORED):
        await anyio.sleep(0.01)
        task_status.started("ready")
        await anyio.sleep(WAIT)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            value = await tg.start(server)
            tg.cancel_scope.cancel()
    return [value, tg.cancel_scope.cancelled_caught]


@scenario
async def cancel_scope_cancelled_from_another_task():
    state = {}

    async def worker(scope_ready):
        with anyio.CancelScope() as scope:
            state["scope"] = scope
            scope_ready.set()
            await anyio.sleep(WAIT)
        state["caught"] = scope.cancelled_caught

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()
            tg.start_soon(worker, ready)
            await ready.wait()
            state["scope"].cancel()
    return state["caught"]


@scenario
async def cancel_reaches_a_task_busy_without_awaits():
    # The cancel is requested while the task runs CPU work (it has no
    # await to interrupt); anyio keeps retrying, and it must land at the
    # task's next await, not spin forever.
    reached = []

    async def cruncher(started):
        started.set()
        busy(0.1)
        reached.append("busy part done")
        await anyio.sleep(WAIT)
        reached.append("not reached")

    start = time.monotonic()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            started = anyio.Event()
            tg.start_soon(cruncher, started)
            await started.wait()
            tg.cancel_scope.cancel()
    return [reached, time.monotonic() - start < WAIT / 2]


@scenario
async def many_scopes_cancelled_at_once():
    outcomes = []

    async def one(i):
        with anyio.move_on_after(0.01 + (i % 3) * 0.005) as scope:
            if i % 4 == 0:
                busy(0.002)
            await anyio.sleep(WAIT)
        outcomes.append(scope.cancelled_caught)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for i in range(300):
                tg.start_soon(one, i)
    return [len(outcomes), all(outcomes)]


@scenario
async def group_cancel_with_nested_groups_and_shields():
    log = []

    async def leaf(name):
        try:
            await anyio.sleep(WAIT)
        except anyio.get_cancelled_exc_class():
            log.append(f"{name} cancelled")
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # Cleanup that must finish.
                log.append(f"{name} cleaned up")
            raise

    async def branch(name):
        async with anyio.create_task_group() as inner:
            for i in range(3):
                inner.start_soon(leaf, f"{name}.{i}")

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(branch, "a")
            tg.start_soon(branch, "b")
            await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    return sorted(log)


@scenario
async def primitives_and_capacity_limiter():
    lock, limiter = anyio.Lock(), anyio.CapacityLimiter(3)
    semaphore = anyio.Semaphore(2)
    counter = {"value": 0, "inside": 0, "max_inside": 0, "sem_max": 0, "sem": 0}

    async def worker():
        async with limiter:
            counter["inside"] += 1
            counter["max_inside"] = max(counter["max_inside"], counter["inside"])
            await anyio.sleep(0.001)
            counter["inside"] -= 1
        async with semaphore:
            counter["sem"] += 1
            counter["sem_max"] = max(counter["sem_max"], counter["sem"])
            await anyio.sleep(0)
            counter["sem"] -= 1
        for _ in range(20):
            async with lock:
                value = counter["value"]
                await anyio.sleep(0)
                counter["value"] = value + 1

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(worker)
    event = anyio.Event()
    event.set()
    await event.wait()
    return [counter["value"], counter["max_inside"] <= 3,
            counter["sem_max"] <= 2, limiter.borrowed_tokens, event.is_set()]


@scenario
async def memory_object_streams():
    send, receive = anyio.create_memory_object_stream[int](max_buffer_size=10)
    got = []

    async def producer(stream, base):
        async with stream:
            for i in range(500):
                await stream.send(base + i)

    async def consumer():
        async with receive:
            async for item in receive:
                got.append(item)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            async with send:
                for base in (0, 1000, 2000):
                    tg.start_soon(producer, send.clone(), base)
    after_close = []
    try:
        send.send_nowait(1)
    except anyio.ClosedResourceError as e:
        after_close.append(type(e).__name__)
    return [len(got), sum(got), after_close]


@scenario
async def threads_both_ways():
    def in_thread(x):
        # Back into the loop from the worker thread anyio started.
        doubled = anyio.from_thread.run(double, x)
        return doubled + 1

    async def double(x):
        await anyio.sleep(0)
        return 2 * x

    with anyio.fail_after(WAIT):
        results = []
        async with anyio.create_task_group() as tg:
            async def call(i):
                results.append(await anyio.to_thread.run_sync(in_thread, i))
            for i in range(20):
                tg.start_soon(call, i)
        # A cancellable thread call: the scope's cancel abandons it.
        with anyio.move_on_after(0.05) as scope:
            await anyio.to_thread.run_sync(time.sleep, 0.3, abandon_on_cancel=True)
    return [sorted(results), scope.cancelled_caught]


@scenario
async def tcp_listener_and_client():
    async def handle(client):
        async with client:
            data = await client.receive()
            await client.send(data.upper())

    with anyio.fail_after(WAIT):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        replies = []
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)

            async def client(i):
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(f"hello {i}".encode())
                    replies.append(await stream.receive())

            async with anyio.create_task_group() as clients:
                for i in range(20):
                    clients.start_soon(client, i)
            tg.cancel_scope.cancel()
    return sorted(replies)


@scenario
async def processes_through_anyio():
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(
            [sys.executable, "-c", "import sys; print(sys.stdin.read()[::-1])"],
            input=b"olleh")
        failed = await anyio.run_process([sys.executable, "-c", "raise SystemExit(3)"],
                                         check=False)
        async with await anyio.open_process(["cat"]) as proc:
            await proc.stdin.send(b"round trip\n")
            echoed = await proc.stdout.receive()
            await proc.stdin.aclose()
            code = await proc.wait()
    return [done.stdout, done.returncode, failed.returncode, echoed, code]


@scenario
async def stream_item_survives_cancelled_receive():
    # The item sent just before the receiver's scope is cancelled is
    # received, not lost: anyio reads the receiver's _fut_waiter to see the
    # receive already completed and leaves it be.
    got = []

    async def receiver(*, task_status):
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            got.append(await receive.receive())
        got.append(("cancel called", scope.cancel_called))

    send, receive = anyio.create_memory_object_stream(0)
    with anyio.fail_after(WAIT), send, receive:
        async with anyio.create_task_group() as tg:
            scope = await tg.start(receiver)
            await anyio.wait_all_tasks_blocked()
            send.send_nowait("item")
            scope.cancel()
    return got


@scenario
async def stream_skips_natively_cancelled_receiver():
    # A receiver whose task was cancelled (asyncio's cancel) is passed
    # over: the item stays in the stream for the next receive.
    import asyncio
    send, receive = anyio.create_memory_object_stream(1)
    with anyio.fail_after(WAIT), send, receive:
        receiving = asyncio.get_running_loop().create_task(receive.receive())
        await anyio.wait_all_tasks_blocked()
        receiving.cancel()
        send.send_nowait("item")
        try:
            await receiving
            outcome = "received"
        except asyncio.CancelledError:
            outcome = "cancelled"
        return [outcome, receive.receive_nowait()]


@scenario
async def event_set_then_scope_cancelled_wakes_waiter():
    # The waiter was woken by set() before the cancel came: it resumes.
    order = []
    event = anyio.Event()

    async def setter():
        order.append(("setter", event.is_set()))
        event.set()
        tg.cancel_scope.cancel()

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(setter)
            await event.wait()
            order.append("waiter woke")
    return order
