"""Network I/O on the parallel loop: the execution model (one connection's
callbacks serialized, connections in parallel, write() from any thread), a
bounded stress test, and descriptor accounting."""

import os
import random
import resource
import sys
import sysconfig
import threading
import time

import pytest

import mt_asyncio.asyncio as asyncio

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
WAIT = 30  # Every wait in this module is bounded.


def open_fds():
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(autouse=True, scope="module")
def no_fd_leak():
    """The whole module leaves no descriptor open (counted once the
    runtime, whose reactor and wakers live as long as the process, runs)."""
    asyncio.run(asyncio.sleep(0), threads=4)
    before = open_fds()
    yield
    deadline = time.monotonic() + 5
    while open_fds() != before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert open_fds() == before


@pytest.fixture(scope="module", autouse=True)
def enough_fds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192) if hard != resource.RLIM_INFINITY else 8192
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


def test_stress_1000_connections_500_random_messages():
    """1,000 concurrent connections x 500 messages of random sizes at 4
    workers; every byte is checked."""
    connections, messages = 1000, 500

    async def main():
        server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        sem = asyncio.Semaphore(1000)

        async def client(i):
            rng = random.Random(i)
            async with sem:
                r, w = await asyncio.open_connection("127.0.0.1", port)
            sent = 0
            for k in range(messages):
                n = rng.choice((1, 7, 100, 1000, 4096, 20000))
                payload = bytes([(i + k) % 256]) * n
                w.write(payload)
                got = await r.readexactly(n)
                assert got == payload, (i, k)
                sent += n
            w.close()
            await w.wait_closed()
            return sent

        totals = await asyncio.wait_for(
            asyncio.gather(*[client(i) for i in range(connections)]), 600)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)
        return totals

    totals = asyncio.run(main(), threads=4)
    assert len(totals) == connections
    expected = []
    for i in range(connections):
        rng = random.Random(i)
        expected.append(sum(rng.choice((1, 7, 100, 1000, 4096, 20000))
                            for _ in range(messages)))
    assert totals == expected


def test_one_connection_callbacks_and_handler_never_overlap():
    """A connection's protocol callbacks and the handler task they started
    share a strand: while the handler is busy between two awaits (a flag
    set, no lock), data_received never runs, though the client keeps
    sending."""
    overlaps = []
    calls = []

    class Watching(asyncio.StreamReaderProtocol):
        busy = False

        def data_received(self, data):
            calls.append(1)
            if self.busy:
                overlaps.append(1)
            super().data_received(data)

    async def handler(reader, writer):
        proto = writer.transport.get_protocol()
        while data := await reader.read(100):
            proto.busy = True
            end = time.monotonic() + 0.0005
            while time.monotonic() < end:  # Work between two awaits.
                pass
            proto.busy = False
            writer.write(data)
        writer.close()

    async def main():
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Watching(asyncio.StreamReader(), handler), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def client():
            r, w = await asyncio.open_connection("127.0.0.1", port)

            async def pump():
                for _ in range(300):
                    w.write(b"x" * 10)
                    await asyncio.sleep(0)

            await pump()
            w.write_eof()
            while await r.read(65536):
                pass
            w.close()
            await w.wait_closed()

        await asyncio.wait_for(asyncio.gather(*[client() for _ in range(8)]), WAIT)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)

    asyncio.run(main(), threads=4)
    assert len(calls) > 8
    assert overlaps == []


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded build "
                    "(connections only run in parallel without the GIL)")
def test_connections_spread_over_workers():
    """Accepted connections from one listening socket run on several worker
    threads: busy handlers overlap in time."""
    threads_seen = set()
    lock = threading.Lock()
    busy = [0, 0]  # Now, most at once.

    async def handler(reader, writer):
        await reader.readexactly(1)
        with lock:
            threads_seen.add(threading.get_native_id())
            busy[0] += 1
            busy[1] = max(busy[1], busy[0])
        deadline = time.monotonic() + 0.05
        while time.monotonic() < deadline:  # CPU work inside the handler.
            pass
        with lock:
            busy[0] -= 1
        writer.write(b"!")
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def client():
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"?")
            await r.readexactly(1)
            w.close()
            await w.wait_closed()

        await asyncio.wait_for(asyncio.gather(*[client() for _ in range(16)]), WAIT)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)

    asyncio.run(main(), threads=4)
    assert len(threads_seen) >= 2
    assert busy[1] >= 2


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded build "
                    "(tasks only step at once without the GIL)")
def test_tasks_a_server_owner_starts_own_the_connections_they_make():
    """Tasks started by the task that owns a server inherit its strand; a
    connection such a task makes is its own: two clients step at the same
    time (both reach a barrier, which a shared strand would never let them
    do), and the owner's steps still never overlap theirs."""
    barrier = threading.Barrier(2, timeout=WAIT / 3)
    lock = threading.Lock()
    stepping = set()  # "owner" or a client's index, while in a step.
    overlaps = []

    def busy(who):
        with lock:
            if ("owner" in stepping) if who != "owner" else stepping:
                overlaps.append((who, sorted(map(str, stepping))))
            stepping.add(who)
        end = time.monotonic() + 0.0001
        while time.monotonic() < end:
            pass
        with lock:
            stepping.discard(who)

    async def main():
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        both_met = asyncio.Event()
        both_connected = asyncio.Event()
        connected = []

        async def client(i):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            # The step that made the connection ran on the owner's strand
            # (which waits for the client blocked at the barrier): both
            # connect first, and the next steps run on the clients' own.
            connected.append(i)
            if len(connected) == 2:
                both_connected.set()
            await both_connected.wait()
            await asyncio.sleep(0)  # The last to connect was still on it.
            barrier.wait()  # Blocks this step until the other client's.
            both_met.set()
            for _ in range(200):
                busy(i)
                w.write(b"x")
                await r.readexactly(1)
            w.close()
            await w.wait_closed()

        clients = [asyncio.create_task(client(i)) for i in range(2)]
        # The owner takes no step while the clients meet: a waiting owner
        # would hold off the client woken after it.
        await asyncio.wait_for(both_met.wait(), WAIT)
        while not all(c.done() for c in clients):
            busy("owner")
            await asyncio.sleep(0.0005)
        await asyncio.gather(*clients)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)

    asyncio.run(main(), threads=4)
    assert overlaps == []


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded build "
                    "(strands only run at once without the GIL)")
def test_connections_made_in_one_step_share_their_owner():
    """A task that makes two connections' strands in one step owns both:
    none of its steps, the first included, overlaps either connection's
    callbacks. (The second used to go under a fresh owner strand, leaving
    the first one's owner behind, and the task's steps ran beside its
    callbacks.)"""
    from mt_asyncio import _core

    busy = []  # The strands whose callback runs now.
    seen = []  # What the task's steps saw running.

    def spin(tag):
        busy.append(tag)
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            pass
        busy.remove(tag)

    async def main():
        loop = asyncio.get_running_loop()
        first = _core._connection_strand(loop)
        second = _core._connection_strand(loop)  # Same step.
        _core._on_strand(first, loop.call_soon, spin, "first")
        _core._on_strand(second, loop.call_soon, spin, "second")
        # This step still runs outside the strand it just joined: the wakes
        # it gave the two strands wait for it to return all the same. (They
        # went at once while _on_strand made the strand current.)
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            seen.extend(busy)
        await asyncio.sleep(0)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            seen.extend(busy)
            await asyncio.sleep(0)

    for _ in range(10):  # The old race showed in about half of the runs.
        asyncio.run(main(), threads=4)
    assert seen == []


def test_write_from_other_threads():
    """transport.write() from plain threads and other tasks, all at once:
    every byte arrives, each writer's bytes in its own order."""
    writers, chunks = 6, 300

    async def main():
        loop = asyncio.get_running_loop()
        received = bytearray()
        done = loop.create_future()
        total = writers * chunks * 10

        class Sink(asyncio.Protocol):
            def data_received(self, data):
                received.extend(data)
                if len(received) >= total and not done.done():
                    done.set_result(None)

        server = await loop.create_server(Sink, "127.0.0.1", 0)
        transport, _ = await loop.create_connection(
            asyncio.Protocol, "127.0.0.1", server.sockets[0].getsockname()[1])

        def write_all(tag):
            for k in range(chunks):
                transport.write(bytes([tag]) + b"%09d" % k)

        threads = [threading.Thread(target=write_all, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        await asyncio.gather(*[asyncio.to_thread(write_all, t)
                               for t in range(3, writers)])
        for t in threads:
            t.join(WAIT)
        await asyncio.wait_for(done, WAIT)
        transport.close()
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)
        return bytes(received)

    data = asyncio.run(main(), threads=4)
    assert len(data) == writers * chunks * 10
    per_writer = {}
    for i in range(0, len(data), 10):
        per_writer.setdefault(data[i], []).append(int(data[i + 1:i + 10]))
    assert sorted(per_writer) == list(range(writers))
    for seq in per_writer.values():
        assert seq == list(range(chunks))


def test_server_close_while_clients_stream():
    """Closing a server and aborting its clients while they are mid-stream
    ends every connection (no hang, no lost connection_lost)."""
    lost = []

    async def main():
        loop = asyncio.get_running_loop()

        class Proto(asyncio.Protocol):
            def connection_made(self, t):
                self.t = t

            def data_received(self, data):
                self.t.write(data)

            def connection_lost(self, exc):
                lost.append(1)

        server = await loop.create_server(Proto, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def client():
            r, w = await asyncio.open_connection("127.0.0.1", port)
            try:
                while True:
                    w.write(b"z" * 1000)
                    await w.drain()
                    if not await r.read(1000):
                        break
            except ConnectionError:
                pass
            w.close()

        tasks = [asyncio.create_task(client()) for _ in range(50)]
        while len(server._clients) < 50:
            await asyncio.sleep(0.01)
        server.close()
        server.abort_clients()
        await asyncio.wait_for(server.wait_closed(), WAIT)
        await asyncio.wait_for(asyncio.gather(*tasks), WAIT)

    asyncio.run(main(), threads=4)
    assert len(lost) == 50


def test_every_peer_close_reaches_connection_lost():
    """300 clients hang up on a server at 4 workers (close or abort, some
    while the server writes 64 KiB back): every server-side protocol is
    told, and the server's wait_closed() returns."""
    counts = {"made": 0, "lost": 0}
    lock = threading.Lock()
    n = 300

    async def main():
        loop = asyncio.get_running_loop()
        all_lost = asyncio.Event()

        class Proto(asyncio.Protocol):
            def connection_made(self, t):
                self.t = t
                with lock:
                    counts["made"] += 1

            def data_received(self, data):
                self.t.write(b"x" * 65536)

            def connection_lost(self, exc):
                with lock:
                    counts["lost"] += 1
                    last = counts["lost"] == n
                if last:
                    loop.call_soon_threadsafe(all_lost.set)

        server = await loop.create_server(Proto, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def client(i):
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"hello")
            if i % 2:
                await asyncio.sleep(0.001)
            if i % 5 == 0:
                w.transport.abort()
            else:
                w.close()
            try:
                await w.wait_closed()
            except ConnectionError:
                pass

        await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(n))), WAIT)
        await asyncio.wait_for(all_lost.wait(), WAIT)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)

    asyncio.run(main(), threads=4)
    assert counts == {"made": n, "lost": n}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
