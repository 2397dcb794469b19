"""A service for mtctl doctor's test: `doctor_app.py SOCKET sick|healthy`.

sick: one of each problem Diagnose names (a lost wakeup, a step that
holds its worker, a task spinning on sleep(0), two tasks in a lock
cycle). healthy: the waits a real service has (timers, queues, events,
locks held a while, a task awaiting a task, gather, the blocking pool,
sockets, timeouts), none of them a problem. Prints "ready" once every
task is in place; serves until stdin closes.
"""

import concurrent.futures
import socket
import sys
import threading
import time

import mt_asyncio
import mt_asyncio.asyncio as asyncio
import mt_asyncio.control

SETTLE = 0.5  # Long enough for every task to reach its wait.


# --- sick ---------------------------------------------------------------------


async def lost_forever():
    # Nobody else ever sees this future: nothing can complete it.
    await asyncio.get_running_loop().create_future()


async def lost_event():
    # The same through a primitive: nobody else can reach the event.
    await asyncio.Event().wait()


def hold_the_worker():
    time.sleep(0.4)  # A blocking call in a step.


async def blocker():
    while True:
        hold_the_worker()
        await asyncio.sleep(1)


async def spinner():
    while True:
        await asyncio.sleep(0)


async def take_both(first, second, both_taken):
    async with first:
        await both_taken.wait()  # Each holds its first lock now.
        async with second:
            pass


async def sick():
    lock_a, lock_b, both = asyncio.Lock(), asyncio.Lock(), asyncio.Barrier(2)
    return [
        asyncio.create_task(lost_forever(), name="lost"),
        asyncio.create_task(lost_event(), name="lost-event"),
        asyncio.create_task(blocker(), name="blocker"),
        asyncio.create_task(spinner(), name="spinner"),
        asyncio.create_task(take_both(lock_a, lock_b, both), name="first-a-then-b"),
        asyncio.create_task(take_both(lock_b, lock_a, both), name="first-b-then-a"),
    ]


# --- healthy ------------------------------------------------------------------


async def consume(queue):
    while True:
        await queue.get()


async def produce(queue):
    while True:
        await asyncio.sleep(3600)
        await queue.put(1)


async def wait_event(event):
    await event.wait()


async def set_later(event):
    await asyncio.sleep(3600)
    event.set()


async def hold(lock, held):
    async with lock:
        held.set()
        await asyncio.sleep(3600)


async def take(lock, held):
    await held.wait()
    async with lock:
        pass


async def notified(condition):
    async with condition:
        await condition.wait()


async def await_it(awaitable):
    await awaitable


async def echo(reader, writer):
    await reader.read(100)  # The client never writes.
    writer.close()


async def read_reply(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.read(100)  # The server never writes either.
    writer.close()


async def bounded():
    # Nothing sets this event, but the timeout ends the wait.
    try:
        await asyncio.wait_for(asyncio.Event().wait(), 3600)
    except TimeoutError:
        pass


async def busy_but_fair():
    # Yields often, but mostly waits: not spinning.
    while True:
        for _ in range(3):
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)


async def healthy():
    queue, event, lock, held = asyncio.Queue(), asyncio.Event(), asyncio.Lock(), asyncio.Event()
    condition, semaphore = asyncio.Condition(), asyncio.Semaphore(1)
    stop_pool = threading.Event()
    loop = asyncio.get_running_loop()
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await semaphore.acquire()
    here, there = socket.socketpair()
    here.setblocking(False)
    executor = concurrent.futures.ThreadPoolExecutor(1)
    child = await asyncio.create_subprocess_exec("sleep", "3600")
    sleeper = asyncio.create_task(asyncio.sleep(3600), name="sleeper")
    return [
        server, stop_pool, sleeper,
        asyncio.create_task(consume(queue), name="consumer"),
        asyncio.create_task(produce(queue), name="producer"),
        asyncio.create_task(wait_event(event), name="event-waiter"),
        asyncio.create_task(set_later(event), name="event-setter"),
        asyncio.create_task(hold(lock, held), name="lock-holder"),
        asyncio.create_task(take(lock, held), name="lock-waiter"),
        asyncio.create_task(notified(condition), name="condition-waiter"),
        asyncio.create_task(await_it(semaphore.acquire()), name="semaphore-waiter"),
        asyncio.create_task(await_it(sleeper), name="awaits-sleeper"),
        asyncio.create_task(await_it(asyncio.gather(asyncio.sleep(3600), asyncio.sleep(3600))),
                            name="gatherer"),
        asyncio.create_task(await_it(loop.run_in_executor(None, stop_pool.wait, 60)),
                            name="pooled"),
        asyncio.create_task(read_reply(port), name="client"),
        asyncio.create_task(server.serve_forever(), name="server"),
        asyncio.create_task(bounded(), name="bounded"),
        asyncio.create_task(await_it(loop.sock_recv(here, 10)), name="sock-reader"),
        asyncio.create_task(await_it(loop.run_in_executor(executor, stop_pool.wait, 60)),
                            name="own-executor"),
        asyncio.create_task(child.wait(), name="child-waiter"),
        here, there, executor, child,
        asyncio.create_task(busy_but_fair(), name="yields-and-waits"),
        condition, semaphore,
    ]


async def main(kind):
    keep = await (sick() if kind == "sick" else healthy())
    await asyncio.sleep(SETTLE)
    print("ready", flush=True)
    # Serve until the test closes stdin (read on the blocking pool).
    await asyncio.to_thread(sys.stdin.read)
    for item in keep:
        if isinstance(item, threading.Event):
            item.set()
        elif isinstance(item, asyncio.subprocess.Process):
            item.kill()
            await item.wait()


if __name__ == "__main__":
    mt_asyncio.start_runtime(4)
    control = mt_asyncio.control.serve(sys.argv[1])
    try:
        asyncio.run(main(sys.argv[2]))
    except KeyboardInterrupt:
        pass
    finally:
        control.close()
