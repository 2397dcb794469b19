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
import time

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
# Handlers run in parallel on mt_asyncio's workers: a counter two tasks
# bump is a read-modify-write that needs a lock, as across threads.
count_lock = threading.Lock()

async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            with count_lock:
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

async def numbered_request(port, i):
    # One 4-byte request on a connection of its own: answered with itself?
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"%04d" % i)
    got = await r.readexactly(4)
    w.close()
    return got == b"%04d" % i

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
    # Handlers that block their thread with time.sleep (a common mistake):
    # on stdlib every other connection waits behind them; on ours they
    # occupy workers. Either way every request is answered, and a ping
    # after them too.
    "handlers_block_every_worker": """
        async def blocking(reader, writer):
            data = await reader.readexactly(4)
            time.sleep(0.15)  # Blocks the thread that runs this step.
            writer.write(data)
            await writer.drain()
            writer.close()
        async def main():
            server = await asyncio.start_server(blocking, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            async with asyncio.timeout(30):
                answered = await asyncio.gather(*(numbered_request(port, i) for i in range(12)))
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            server.close(); echo_server.close()
            report(answered=sum(answered), serves_after=ok)
        run(main())
    """,
    # A client process with 60 connections, each half-way through its
    # request, is SIGKILLed: every handler ends (EOF or reset), every
    # server-side descriptor is closed, and the server goes on serving.
    "client_killed_with_60_half_sent_requests": """
        import subprocess
        CLIENT = '''if True:
            import socket, sys, time
            conns = []
            for _ in range(60):
                s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
                s.sendall(b"h" * 50)  # Half of the 100-byte request.
                conns.append(s)
            print("sent", flush=True)
            time.sleep(60)
        '''
        ended = []
        async def half(reader, writer):
            try:
                await reader.readexactly(100)
                ended.append("complete")
            except asyncio.IncompleteReadError:
                ended.append("eof")
            except ConnectionError:
                ended.append("reset")
            finally:
                writer.close()
        def fds():
            return len(os.listdir("/proc/self/fd"))
        async def main():
            server = await asyncio.start_server(half, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            before = fds()
            child = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)],
                                     stdout=subprocess.PIPE, text=True)
            line = await asyncio.to_thread(child.stdout.readline)
            async with asyncio.timeout(10):  # All 60 accepted (the child's pipe is one fd).
                while fds() - before < 61:
                    await asyncio.sleep(0.01)
            child.kill()
            child.wait()
            child.stdout.close()
            deadline = time.monotonic() + 10
            while (len(ended) < 60 or fds() > before) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            fds_back = fds() <= before  # Every accepted connection's descriptor closed.
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            server.close(); echo_server.close()
            report(client_sent=line.strip(), ended=len(ended),
                   none_complete="complete" not in ended, fds_back=fds_back,
                   serves_after=ok)
        run(main())
    """,
    # SIGTERM while 50 requests are in flight, with a handler that drains
    # the way services do: stop accepting, let the handlers finish. Every
    # in-flight request is answered.
    "sigterm_while_busy_drains": """
        inflight = set()
        received = [0]
        async def slow(reader, writer):
            inflight.add(asyncio.current_task())
            try:
                data = await reader.readexactly(4)
                with count_lock:
                    received[0] += 1
                await asyncio.sleep(0.3)
                writer.write(data)
                await writer.drain()
            finally:
                inflight.discard(asyncio.current_task())
                writer.close()
        async def main():
            loop = asyncio.get_running_loop()
            server = await asyncio.start_server(slow, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            term = asyncio.Event()
            loop.add_signal_handler(signal.SIGTERM, term.set)
            clients = [asyncio.create_task(numbered_request(port, i)) for i in range(50)]
            async with asyncio.timeout(10):
                while received[0] < 50:
                    await asyncio.sleep(0.005)
            os.kill(os.getpid(), signal.SIGTERM)
            async with asyncio.timeout(10):
                await term.wait()
                server.close()  # Stop accepting; the handlers run on.
                busy = len(inflight)
                answered = await asyncio.gather(*clients)
            loop.remove_signal_handler(signal.SIGTERM)
            report(busy_at_sigterm=busy > 0, answered=sum(answered), left=len(inflight))
        run(main())
    """,
    # The pool shrinks to one worker while 200 tasks wait on one lock: each
    # acquires it, in the order it asked (asyncio.Lock is FIFO); then the
    # pool grows back. stdlib's loop has no pool to resize: the reference.
    "resize_to_one_worker_while_all_wait_on_a_lock": """
        def resize(n):
            if os.environ["FAULT_BACKEND"] != "stdlib":
                mt_asyncio._admin.call("ResizeWorkers", target=n)
        async def main():
            lock = asyncio.Lock()
            order = []
            async def waiter(i):
                async with lock:
                    order.append(i)
                    await asyncio.sleep(0)
            async with lock:
                tasks = []
                for i in range(200):
                    tasks.append(asyncio.create_task(waiter(i)))
                    await asyncio.sleep(0)  # Each is queued on the lock in turn.
                await asyncio.sleep(0.05)
                resize(1)
                await asyncio.sleep(0.05)
            async with asyncio.timeout(20):
                await asyncio.gather(*tasks)
            resize(int(os.environ["FAULT_THREADS"]))
            echo_server = await asyncio.start_server(echo, "127.0.0.1", 0)
            ok = await still_serves(echo_server.sockets[0].getsockname()[1])
            echo_server.close()
            report(acquired=len(order), fifo=order == list(range(200)), serves_after=ok)
        run(main())
    """,
}

BACKENDS = [("stdlib", 1), ("mt", 1), ("mt", 4)]

# Blocking work that never ends when the service is told to shut down.
# stdlib has no answer to compare with: asyncio.run() waits up to 300 s
# for its executor, then interpreter exit joins the thread forever. Ours
# has the coordinated shutdown (the control plane's Shutdown, `mtctl
# shutdown`): after its grace the stuck jobs are abandoned and reported,
# and the process exits in bounded time. Run on ours only, at 1 and 4
# workers.
STUCK_AT_SHUTDOWN = {
    "to_thread_job_that_never_returns": """
        never = threading.Event()
        async def start_stuck_work():
            return asyncio.ensure_future(asyncio.to_thread(never.wait))
    """,
    # The resolver is stuck (a getaddrinfo that never answers): our
    # loop.getaddrinfo runs socket.getaddrinfo on the blocking pool.
    "dns_lookup_that_hangs": """
        never = threading.Event()
        def stuck_getaddrinfo(*args, **kwargs):
            never.wait()
        socket.getaddrinfo = stuck_getaddrinfo
        async def start_stuck_work():
            return asyncio.ensure_future(
                asyncio.get_running_loop().getaddrinfo("db.internal", 5432))
    """,
}

SHUTDOWN_MAIN = """
    from mt_asyncio import _admin
    async def main():
        stuck = await start_stuck_work()
        await asyncio.sleep(0.2)
        threading.Thread(target=_admin.call, args=("Shutdown",),
                         kwargs={"grace_seconds": 1}).start()
        await asyncio.sleep(30)  # The shutdown cancels this.
    try:
        run(main())
        ended = "returned"
    except asyncio.CancelledError:
        ended = "cancelled"
    except RuntimeError as e:  # The runtime stopped under the run.
        ended = "runtime stopped" if "shut down" in str(e) else repr(e)
    report(ended=ended)
"""


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


@pytest.mark.parametrize("name", sorted(STUCK_AT_SHUTDOWN))
@pytest.mark.parametrize("threads", [1, 4])
def test_stuck_blocking_work_does_not_hold_the_shutdown(name, threads):
    env = dict(os.environ, FAULT_BACKEND="mt", FAULT_THREADS=str(threads),
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    source = (PRELUDE + textwrap.dedent(STUCK_AT_SHUTDOWN[name]) +
              textwrap.dedent(SHUTDOWN_MAIN))
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", source], env=env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} at {threads} workers: the shutdown hung (killed after 60 s)")
    elapsed = time.monotonic() - started
    print(name, f"mt@{threads}:", proc.stdout.strip(), f"exit {proc.returncode} after {elapsed:.1f} s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Grace (1 s) + the unwind allowance (1 s) + start-up: well under 15 s.
    assert elapsed < 15, elapsed
    # The run ends as its cancelled main task says (not cut off by the
    # runtime stopping under it): the wait for the executor gave up at
    # the grace.
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ended"] == "cancelled", proc.stdout
    assert "abandoned 1 blocking job(s)" in proc.stderr, proc.stderr[-3000:]
