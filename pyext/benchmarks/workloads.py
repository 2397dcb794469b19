"""The workloads of docs/benchmarks.md, written once for every backend.

A workload is a function ``(scale) -> list of factories``; each factory
takes the backend's asyncio module (``aio``) and returns one top-level
coroutine, so the same code runs on stdlib asyncio and on
``mt_asyncio.asyncio``. The backend decides where those coroutines run (one
loop, one loop per thread, or the parallel loop). A workload whose tasks
share one primitive (one Lock, one Queue) is a single top-level unit: a
loop-per-thread backend cannot split it, which is the point of comparing.
"""

import time

# The CPU kernel: a pure-Python integer loop (an LCG step per iteration).
#
# The three constants are made per call on purpose. CPython 3.14t does not
# immortalize the constants of code compiled by builtin compile(), which is
# how imported modules are compiled, so a literal here would be one shared
# int object whose refcount every thread bumps on every iteration; default
# arguments are shared the same way. Measured on 2 cores: two threads ran
# two calls 1.33x faster than one thread with shared constants, 1.68x with
# per-call ones. The kernel must measure CPU work, not that contention
# (docs/benchmarks.md).
def burn(iterations):
    mul, add, mask = int("1664525"), int("1013904223"), int("4294967295")
    v = 0
    for i in range(iterations):
        v = (v * mul + add + i) & mask
    return v


def burn_allocating(iterations):
    """The allocating variant: builds and drops a small tuple and list per
    iteration (allocation scales worse than arithmetic on free-threaded
    builds)."""
    mul, add, mask = int("1664525"), int("1013904223"), int("4294967295")
    v = 0
    for i in range(iterations):
        pair = (v, i)
        v = (sum([pair[0] * mul, add, pair[1]])) & mask
    return v


def _count(base, scale):
    return max(1, int(base * scale))


def _steps_with_cpu(kernel, iterations):
    """32 tasks x 4 steps; each step yields with sleep(0), then runs
    `kernel(iterations)`."""
    async def one_task(aio):
        acc = 0
        for _ in range(4):
            await aio.sleep(0)
            acc ^= kernel(iterations)
        return acc

    return [one_task] * 32


def mixed(scale):
    """32 tasks x 4 steps; each step yields with sleep(0), then burns CPU."""
    return _steps_with_cpu(burn, _count(1_500_000, scale))


def mixed_alloc(scale):
    """mixed with the allocating kernel (a third of the iterations)."""
    return _steps_with_cpu(burn_allocating, _count(500_000, scale))


def churn(scale):
    """32 loops, each creating, awaiting and finishing 2000 tasks in turn."""
    rounds = _count(2000, scale)

    async def child(i):
        return i

    async def one_loop(aio):
        total = 0
        for i in range(rounds):
            total += await aio.create_task(child(i))
        return total

    return [one_loop] * 32


def _fanout_child(iterations):
    async def child(aio):
        return burn(iterations)
    return child


def _gather_parents(iterations, parents):
    child = _fanout_child(iterations)

    async def parent(aio):
        return sum(await aio.gather(*(child(aio) for _ in range(10))))

    return [parent] * parents


def _taskgroup_parents(iterations, parents):
    child = _fanout_child(iterations)

    async def parent(aio):
        async with aio.TaskGroup() as tg:
            tasks = [tg.create_task(child(aio)) for _ in range(10)]
        return sum(t.result() for t in tasks)

    return [parent] * parents


def fanout_gather(scale):
    """2000 parents, each gathering 10 children of 2000 CPU iterations."""
    return _gather_parents(2000, _count(2000, scale))


def fanout_taskgroup(scale):
    """fanout_gather with a TaskGroup per parent."""
    return _taskgroup_parents(2000, _count(2000, scale))


def fanout_gather_bare(scale):
    """fanout_gather with children that return at once (20,000 parents):
    what the loop itself costs per child, without the CPU work."""
    return _gather_parents(0, _count(20_000, scale))


def fanout_taskgroup_bare(scale):
    """fanout_taskgroup with children that return at once (20,000
    parents)."""
    return _taskgroup_parents(0, _count(20_000, scale))


def queue_pipeline(scale):
    """One producer puts 20k items on a Queue; 8 consumers take them and
    burn 3000 iterations per item. One shared queue: one top-level unit."""
    items = _count(20_000, scale)

    async def pipeline(aio):
        queue = aio.Queue(maxsize=256)
        done = []

        async def consumer():
            n = 0
            while True:
                item = await queue.get()
                if item is None:
                    queue.task_done()
                    break
                burn(3000)
                n += 1
                queue.task_done()
            done.append(n)

        consumers = [aio.create_task(consumer()) for _ in range(8)]
        for i in range(items):
            await queue.put(i)
        for _ in consumers:
            await queue.put(None)
        await aio.gather(*consumers)
        if sum(done) != items:
            raise AssertionError(f"queue lost items: {sum(done)} != {items}")
        return sum(done)

    return [pipeline]


def lock_contention(scale):
    """4000 tasks take one Lock in turn and burn 4000 iterations inside."""
    tasks = _count(4000, scale)

    async def program(aio):
        lock = aio.Lock()
        inside = [0]

        async def worker():
            async with lock:
                inside[0] += 1
                if inside[0] != 1:
                    raise AssertionError("two holders of one Lock")
                burn(4000)
                inside[0] -= 1

        await aio.gather(*(worker() for _ in range(tasks)))

    return [program]


def semaphore_bounded(scale):
    """2000 tasks through a Semaphore(8), 30k iterations each inside."""
    tasks = _count(2000, scale)

    async def program(aio):
        sem = aio.Semaphore(8)

        async def worker():
            async with sem:
                return burn(30_000)

        await aio.gather(*(worker() for _ in range(tasks)))

    return [program]


def wait_for_overhead(scale):
    """4000 units, each a wait_for (generous timeout) around 20k iterations."""

    async def work(aio):
        await aio.sleep(0)
        return burn(20_000)

    async def one(aio):
        return await aio.wait_for(work(aio), timeout=60)

    return [one] * _count(4000, scale)


def timer_sleep(scale):
    """500 tasks x 20 sleep(0.001)."""

    async def sleeper(aio):
        for _ in range(20):
            await aio.sleep(0.001)

    return [sleeper] * _count(500, scale)


def cancel_heavy(scale):
    """4000 tasks created, cancelled while waiting, unwound (40 units of
    100 tasks, so a loop-per-thread backend can split them)."""
    per_unit = 100

    async def unit(aio):
        started = [0]

        async def victim():
            started[0] += 1
            try:
                await aio.sleep(3600)
            finally:
                started[0] -= 1

        tasks = [aio.create_task(victim()) for _ in range(per_unit)]
        await aio.sleep(0)
        for t in tasks:
            t.cancel()
        results = await aio.gather(*tasks, return_exceptions=True)
        if not all(isinstance(r, aio.CancelledError) for r in results):
            raise AssertionError("a cancelled task did not unwind")
        return len(results)

    return [unit] * _count(40, scale)


def executor_offload(scale):
    """2000 to_thread calls of 20k iterations each."""

    async def one(aio):
        return await aio.to_thread(burn, 20_000)

    return [one] * _count(2000, scale)


def block_inline(scale):
    """64 units calling time.sleep(0.01) on the loop itself (a blocking
    call the loop cannot see)."""

    async def one(aio):
        time.sleep(0.01)

    return [one] * _count(64, scale)


def block_offload(scale):
    """64 units sending time.sleep(0.01) to a thread with to_thread."""

    async def one(aio):
        await aio.to_thread(time.sleep, 0.01)

    return [one] * _count(64, scale)


def one_million(scale):
    """1,000,000 trivial coroutines created and run to completion."""

    async def trivial(aio):
        return None

    return [trivial] * _count(1_000_000, scale)


def primitive_ops(scale):
    """No CPU work: 50 tasks x 2000 rounds of `async with Lock`, `async with
    Semaphore(4)` around a sleep(0), `Event.wait()` on a set event and a
    Queue put/get pair — the primitives' own cost (lock_contention and
    semaphore_bounded bury it under CPU work)."""
    rounds = _count(2000, scale)

    async def program(aio):
        lock, sem, ev, queue = aio.Lock(), aio.Semaphore(4), aio.Event(), aio.Queue()
        ev.set()

        async def worker():
            for i in range(rounds):
                async with lock:
                    pass
                async with sem:
                    await aio.sleep(0)
                await ev.wait()
                await queue.put(i)
                await queue.get()

        await aio.gather(*(worker() for _ in range(50)))

    return [program]


# --- Server and clients on one loop -----------------------------------------
#
# A service that also calls other services: the task that starts the
# server starts the clients too, so on mt_asyncio the clients' tasks share
# the strand that owns the server's connections (docs/compatibility.md).
# One top-level unit each: a loop-per-thread backend cannot split them.

HTTP_RESPONSE_BODY = b"x" * 32


async def _server_and_clients(aio, handler, client, clients):
    """Starts a stream server running `handler`, runs `clients` copies of
    `client(port)` to the end, and closes the server."""
    server = await aio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    await aio.gather(*(client(port) for _ in range(clients)))
    server.close()
    await server.wait_closed()


def _http_inproc(iterations, requests):
    """A keep-alive HTTP/1.1 server whose handler burns `iterations` per
    request, and its 64 clients on the same loop, `requests` each."""

    async def program(aio):
        head = (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                b"Content-Type: text/plain\r\n\r\n" % len(HTTP_RESPONSE_BODY))

        async def handler(reader, writer):
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    burn(iterations)
                    writer.write(head + HTTP_RESPONSE_BODY)
            except (aio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        async def client(port):
            r, w = await aio.open_connection("127.0.0.1", port)
            for _ in range(requests):
                w.write(b"GET /work HTTP/1.1\r\nHost: bench\r\n\r\n")
                await r.readuntil(b"\r\n\r\n")
                if await r.readexactly(32) != HTTP_RESPONSE_BODY:
                    raise AssertionError("a response was garbled")
            w.close()
            await w.wait_closed()

        await _server_and_clients(aio, handler, client, 64)
        return 64 * requests

    return [program]


def http_cpu_inproc(scale):
    """A keep-alive HTTP/1.1 server whose handler burns 5000 iterations per
    request, and its 64 clients on the same loop, 200 requests each (the
    network row http_cpu, in one process)."""
    return _http_inproc(5000, _count(200, scale))


def http_inproc_bare(scale):
    """http_cpu_inproc with a handler that answers at once, 1000 requests
    per client: what the loop, the streams and the kernel's TCP cost per
    request, which the handler's CPU work buries."""
    return _http_inproc(0, _count(1000, scale))


def echo_streams_inproc(scale):
    """An echo server (streams) and its 32 clients on the same loop, each
    client 2000 round trips of 1 KiB (the network row echo_streams_1k, in
    one process)."""
    rounds = _count(2000, scale)

    async def program(aio):
        async def client(port):
            r, w = await aio.open_connection("127.0.0.1", port)
            payload = b"x" * 1024
            for _ in range(rounds):
                w.write(payload)
                await r.readexactly(1024)
            w.close()
            await w.wait_closed()

        await _server_and_clients(aio, echo_stream, client, 32)
        return 32 * rounds

    return [program]


# --- TLS in one process: server and clients on one loop --------------------

# How mt_asyncio's TLS workloads do TLS: "native" (mt_asyncio.tls, the
# BoringSSL engine) or "ssl" (the ssl module's, through asyncio's sslproto
# over our transports); the "mt_asyncio+ssl" backend sets "ssl".
TLS_PATH = "native"
TLS_WORKLOADS = {"tls_echo_inproc", "tls_handshakes_inproc"}


def _tls_contexts(aio):
    import tlscerts
    native = (aio.__name__.startswith("mt_asyncio") and TLS_PATH == "native"
              and tlscerts.native_available())
    return tlscerts.contexts(native)


async def echo_stream(reader, writer):
    """The echo servers' handler (the network rows' too): what comes back
    until EOF."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


def tls_echo_inproc(scale):
    """16 pairs of a TLS server and its client on one loop, each client
    1000 round trips of 1 KiB (the network row's workload, in-process)."""
    rounds = _count(1000, scale)

    async def pair(aio):
        server_ctx, client_ctx = _tls_contexts(aio)
        server = await aio.start_server(echo_stream, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        r, w = await aio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                         server_hostname="localhost")
        payload = b"x" * 1024
        for _ in range(rounds):
            w.write(payload)
            await r.readexactly(1024)
        w.close()
        server.close()

    return [pair] * 16


def tls_handshakes_inproc(scale):
    """16 pairs of a TLS server and its client on one loop, each client
    making 100 connections in turn: a full handshake, 16 bytes each way,
    close."""
    connections = _count(100, scale)

    async def pair(aio):
        server_ctx, client_ctx = _tls_contexts(aio)
        server = await aio.start_server(echo_stream, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        for _ in range(connections):
            r, w = await aio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                             server_hostname="localhost")
            w.write(b"x" * 16)
            await r.readexactly(16)
            w.close()
            await w.wait_closed()
        server.close()

    return [pair] * 16


WORKLOADS = {
    "mixed": mixed,
    "mixed_alloc": mixed_alloc,
    "churn": churn,
    "fanout_gather": fanout_gather,
    "fanout_taskgroup": fanout_taskgroup,
    "fanout_gather_bare": fanout_gather_bare,
    "fanout_taskgroup_bare": fanout_taskgroup_bare,
    "queue_pipeline": queue_pipeline,
    "lock_contention": lock_contention,
    "semaphore_bounded": semaphore_bounded,
    "wait_for_overhead": wait_for_overhead,
    "timer_sleep": timer_sleep,
    "cancel_heavy": cancel_heavy,
    "executor_offload": executor_offload,
    "block_inline": block_inline,
    "block_offload": block_offload,
    "one_million": one_million,
    "primitive_ops": primitive_ops,
    "http_cpu_inproc": http_cpu_inproc,
    "http_inproc_bare": http_inproc_bare,
    "echo_streams_inproc": echo_streams_inproc,
    "tls_echo_inproc": tls_echo_inproc,
    "tls_handshakes_inproc": tls_handshakes_inproc,
}
