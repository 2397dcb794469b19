"""Faults a service meets, survived as stdlib's loop survives them.

Each fault is a small program run in a process of its own on stdlib's loop
(the reference) and on ours at 1 and 4 workers (under compat.install(), as
a service runs). It provokes the fault, then checks that the process still
serves (a fresh echo round trip) and lost nothing it was given, and prints
what it observed as one JSON object; ours must observe what stdlib does.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """\
import asyncio, json, os, resource, signal, socket, sys, threading, time
if os.environ["FAULT_BACKEND"] != "stdlib":
    import mt_asyncio
    mt_asyncio.compat.install()
    import mt_asyncio.asyncio as _mt
    def run(coro):
        return _mt.run(coro, threads=int(os.environ["FAULT_THREADS"]))
else:
    run = asyncio.run

def report(**fields):
    print(json.dumps(fields, sort_keys=True), flush=True)

echoed = [0]  # Bytes the echo servers sent back.

async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            echoed[0] += len(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()

async def flood_and_echo_servers(flood):
    # A server whose handler is `flood`, a plain connection to it, and an
    # echo server to check the rest is still served.
    server = await asyncio.start_server(flood, "127.0.0.1", 0)
    echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
    s = socket.create_connection(("127.0.0.1", server.sockets[0].getsockname()[1]))
    return server, echo_server, echo_server.sockets[0].getsockname()[1], s

async def still_serves(port, payload=b"ping"):
    # A fresh connection's round trip, bounded.
    async with asyncio.timeout(10):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(payload)
        got = await r.readexactly(len(payload))
        w.close()
        return got == payload
"""

FAULTS = {
    # Accept fails with EMFILE while the descriptor table is full; once
    # descriptors are free again the server accepts again.
    "emfile_at_256_descriptors": """
        async def main():
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
            loop = asyncio.get_running_loop()
            reports = []
            loop.set_exception_handler(lambda loop, ctx: reports.append(
                getattr(ctx.get("exception"), "errno", None)))
            server = await asyncio.start_server(echo, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            hog = []
            try:
                while True:
                    hog.append(socket.socket())
            except OSError:
                pass
            for _ in range(25):  # Room for the clients and a few accepts.
                hog.pop().close()
            clients = []
            for _ in range(20):
                try:
                    s = socket.socket()
                except OSError:
                    break
                s.setblocking(False)
                try:
                    s.connect(("127.0.0.1", port))
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                clients.append(s)
            await asyncio.sleep(0.5)  # Accepts meet EMFILE meanwhile.
            for s in hog:
                s.close()
            for s in clients:
                s.close()
            ok = await still_serves(port)
            server.close()
            # That the fault happened: the accept's EMFILE was reported.
            report(serves_after=ok, emfile_reported=24 in reports)
        run(main())
    """,
    # The peer resets the connection while the server is writing to it:
    # the protocol is told (connection_lost or a write error), and the
    # server goes on serving.
    "peer_resets_mid_write": """
        outcome = {}
        async def flood(reader, writer):
            try:
                for _ in range(400):
                    writer.write(b"x" * 65536)
                    await writer.drain()
                outcome["finished"] = True
            except ConnectionError:
                outcome["error"] = True
            finally:
                writer.close()
        async def main():
            server, echo_server, echo_port, s = await flood_and_echo_servers(flood)
            await asyncio.sleep(0.3)  # The flood fills both buffers.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00")
            s.close()  # An RST.
            async with asyncio.timeout(10):
                while not outcome:
                    await asyncio.sleep(0.01)
            ok = await still_serves(echo_port)
            server.close(); echo_server.close()
            report(told=outcome.get("error", False), serves_after=ok)
        run(main())
    """,
    # A client that never reads: the writer's drain() waits (its buffer
    # stays bounded), and everyone else is served meanwhile.
    "reader_that_never_reads": """
        state = {"written": 0, "buffer": 0}
        async def flood(reader, writer):
            try:
                while True:
                    writer.write(b"y" * 65536)
                    state["written"] += 65536
                    state["buffer"] = max(state["buffer"],
                                          writer.transport.get_write_buffer_size())
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()
        async def main():
            server, echo_server, echo_port, s = await flood_and_echo_servers(flood)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await asyncio.sleep(0.5)
            served = [await still_serves(echo_port) for _ in range(20)]
            written = state["written"]
            await asyncio.sleep(0.3)
            stuck = state["written"] == written  # drain() is waiting.
            s.close()
            server.close(); echo_server.close()
            report(all_served=all(served) and echoed[0] == 20 * 4, writer_paused=stuck,
                   buffer_bounded=state["buffer"] <= 2 * 1024 * 1024)
        run(main())
    """,
    # An exception in every kind of callback goes to the exception
    # handler, once each, and the loop goes on.
    "exceptions_in_every_callback": """
        seen = []
        class Bad(asyncio.Protocol):
            def data_received(self, data):
                raise ValueError("data_received")
        async def main():
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(
                lambda loop, ctx: seen.append(type(ctx.get("exception")).__name__))
            loop.call_soon(lambda: 1 / 0)
            loop.call_later(0.01, lambda: [][1])
            loop.call_soon_threadsafe(lambda: {}["k"])
            fut = loop.create_future()
            fut.add_done_callback(lambda f: int("x"))
            fut.set_result(None)
            a, b = socket.socketpair()
            loop.add_reader(a.fileno(), lambda: (loop.remove_reader(a.fileno()),
                                                 a.recv(10), 1 / 0))
            b.send(b"!")
            server = await loop.create_server(Bad, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"boom")
            await asyncio.sleep(0.5)
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            w.close(); a.close(); b.close(); server.close(); echo_server.close()
            report(handled=sorted(seen), serves_after=ok)
        run(main())
    """,
    # MemoryError is an Exception: in a callback it goes to the exception
    # handler like any other, and the loop goes on.
    "memory_error_in_a_callback": """
        seen = []
        def hungry():
            raise MemoryError()
        async def main():
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(
                lambda loop, ctx: seen.append(type(ctx.get("exception")).__name__))
            for _ in range(3):
                loop.call_soon(hungry)
            await asyncio.sleep(0.1)
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            echo_server.close()
            report(handled=seen, serves_after=ok)
        run(main())
    """,
    # 1,000 SIGUSR1 from another thread: the handler runs (signals that
    # arrive together coalesce), nothing crashes, the loop goes on.
    "signal_storm": """
        count = [0]
        async def main():
            loop = asyncio.get_running_loop()
            done = asyncio.Event()
            loop.add_signal_handler(signal.SIGUSR1, lambda: count.__setitem__(0, count[0] + 1))
            def storm():
                for _ in range(1000):
                    os.kill(os.getpid(), signal.SIGUSR1)
                loop.call_soon_threadsafe(done.set)
            threading.Thread(target=storm).start()
            async with asyncio.timeout(20):
                await done.wait()
            await asyncio.sleep(0.2)
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            echo_server.close()
            loop.remove_signal_handler(signal.SIGUSR1)
            report(handler_ran=1 <= count[0] <= 1000, serves_after=ok)
        run(main())
    """,
    # 2,000 connections at once, each one round trip: all answered.
    "burst_of_2000_connections": """
        async def main():
            resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
            server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=4096)
            port = server.sockets[0].getsockname()[1]
            async def one(i):
                payload = str(i).encode()
                for attempt in range(20):
                    try:
                        return await still_serves(port, payload)
                    except ConnectionError:
                        await asyncio.sleep(0.05)
                return False
            results = await asyncio.gather(*(one(i) for i in range(2000)))
            server.close()
            report(answered=sum(results))
        run(main())
    """,
}

BACKENDS = [("stdlib", 1), ("mt", 1), ("mt", 4)]


def run_fault(name, backend, threads):
    env = dict(os.environ, FAULT_BACKEND=backend, FAULT_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    source = PRELUDE + textwrap.dedent(FAULTS[name])
    try:
        proc = subprocess.run([sys.executable, "-c", source], env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} on {backend}@{threads} hung (killed after 60 s)")
    assert proc.returncode == 0, (backend, threads, proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_survived_as_on_stdlib(name):
    reference = run_fault(name, "stdlib", 1)
    print(name, "stdlib:", reference)
    for backend, threads in BACKENDS[1:]:
        ours = run_fault(name, backend, threads)
        print(name, f"{backend}@{threads}:", ours)
        assert ours == reference, (backend, threads)
