"""Scenarios: streams (open_connection/start_server) over TCP and Unix
sockets."""

import os
import socket
import tempfile

from harness import aobserve, scenario
from net_common import TIMEOUT, close_writer, echo_handler, port_of, serving


@scenario
async def stream_echo_roundtrip(aio):
    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        w.write(b"hello\n")
        line = await aio.wait_for(r.readline(), TIMEOUT)
        w.write(b"abc")
        three = await aio.wait_for(r.readexactly(3), TIMEOUT)
        await close_writer(aio, w)
        return [line, three]


@scenario
async def stream_many_clients_each_get_their_bytes(aio):
    async with serving(aio, echo_handler) as server:
        port = port_of(server)

        async def client(i):
            r, w = await aio.open_connection("127.0.0.1", port)
            out = []
            for k in range(20):
                msg = bytes([i]) * (100 + k * 37)
                w.write(msg)
                out.append(await aio.wait_for(r.readexactly(len(msg)), TIMEOUT) == msg)
            await close_writer(aio, w)
            return all(out)

        return await aio.gather(*[client(i) for i in range(40)])


@scenario
async def stream_readuntil_and_separator_errors(aio):
    async def handler(reader, writer):
        writer.write(b"a,b,,tail")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        first = await aio.wait_for(r.readuntil(b","), TIMEOUT)
        second = await aio.wait_for(r.readuntil(b","), TIMEOUT)
        third = await aio.wait_for(r.readuntil(b","), TIMEOUT)
        missing = await aobserve(aio.wait_for(r.readuntil(b","), TIMEOUT))
        await close_writer(aio, w)
        return [first, second, third, missing[0], missing[1]]


@scenario
async def stream_incomplete_read_at_eof(aio):
    async def handler(reader, writer):
        writer.write(b"12345")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        try:
            await aio.wait_for(r.readexactly(10), TIMEOUT)
            got = None
        except aio.IncompleteReadError as e:
            got = [e.partial, e.expected]
        at_eof = r.at_eof()
        await close_writer(aio, w)
        return [got, at_eof]


@scenario
async def stream_limit_overrun(aio):
    async def handler(reader, writer):
        writer.write(b"x" * 200 + b"\n")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server), limit=64)
        res = await aobserve(aio.wait_for(r.readline(), TIMEOUT))
        await close_writer(aio, w)
        return res[0], res[1]


@scenario
async def stream_half_close_write_eof(aio):
    # The client sends, then closes its write side; the server reads to EOF
    # and still answers on the half-open connection.
    async def handler(reader, writer):
        data = await reader.read()
        writer.write(b"got " + str(len(data)).encode())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        can = w.can_write_eof()
        w.write(b"x" * 1000)
        w.write_eof()
        reply = await aio.wait_for(r.read(), TIMEOUT)
        after_eof = None
        try:
            w.write(b"more")
        except RuntimeError as e:
            after_eof = str(e)
        await close_writer(aio, w)
        return [can, reply, after_eof]


@scenario
async def stream_16mib_each_way_with_drain(aio):
    # Both directions at once, far more than any socket buffer: drain()
    # must apply backpressure, and every byte must arrive in order.
    size = 16 * 1024 * 1024
    chunk = bytes(range(256)) * 256  # 64 KiB

    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))

        async def send():
            for _ in range(size // len(chunk)):
                w.write(chunk)
                await w.drain()
            w.write_eof()

        async def receive():
            got = 0
            ok = True
            while True:
                data = await r.read(1 << 20)
                if not data:
                    return got, ok
                offset = got % 256
                ok = ok and data == (bytes(range(256)) * (len(data) // 256 + 2))[
                    offset:offset + len(data)]
                got += len(data)

        _, (got, ok) = await aio.wait_for(aio.gather(send(), receive()), 60)
        await close_writer(aio, w)
        return [got == size, ok]


@scenario
async def stream_drain_pauses_on_full_buffer(aio):
    # The server does not read: the client's buffer fills past the high
    # water mark and drain() blocks until the server starts reading.
    release = aio.Event()

    async def handler(reader, writer):
        await release.wait()
        n = 0
        while data := await reader.read(1 << 20):
            n += len(data)
        writer.write(str(n).encode())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        w.transport.set_write_buffer_limits(high=1024)
        blocked = None
        for _ in range(200):
            w.write(b"y" * 65536)
            try:
                await aio.wait_for(w.drain(), 0.05)
            except TimeoutError:
                # Blocked on a full buffer, not on a loaded machine that
                # did not get to the flush within 50 ms (on either loop).
                if w.transport.get_write_buffer_size() > 0:
                    blocked = True
                    break
        release.set()
        await aio.wait_for(w.drain(), TIMEOUT)
        w.write_eof()
        total = await aio.wait_for(r.read(), TIMEOUT)
        await close_writer(aio, w)
        return [blocked, int(total) % 65536 == 0]


@scenario
async def stream_extra_info(aio):
    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        peer = w.get_extra_info("peername")
        sockname = w.get_extra_info("sockname")
        sock = w.get_extra_info("socket")
        missing = w.get_extra_info("nope", "dflt")
        shape = [peer[0], peer[1] == port_of(server), sockname[0],
                 sock.family == socket.AF_INET, sock.type == socket.SOCK_STREAM,
                 missing, w.get_extra_info("sslcontext")]
        await close_writer(aio, w)
        return shape


@scenario
async def stream_server_close_with_clients_connected(aio):
    connected = aio.Event()
    ended = []

    async def handler(reader, writer):
        connected.set()
        data = await reader.read()  # Until the client closes.
        ended.append(data)
        writer.close()
        await writer.wait_closed()

    server = await aio.start_server(handler, "127.0.0.1", 0)
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    await aio.wait_for(connected.wait(), TIMEOUT)
    server.close()
    serving_after = server.is_serving()
    sockets_after = server.sockets
    # Closed, but the accepted connection keeps wait_closed() waiting.
    waited = await aobserve(aio.wait_for(aio.shield(server.wait_closed()), 0.2))
    w.write(b"still works")
    w.write_eof()
    await close_writer(aio, w)
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [serving_after, sockets_after, waited[1], ended]


@scenario
async def stream_server_close_clients(aio):
    connected = aio.Event()

    async def handler(reader, writer):
        connected.set()
        await reader.read()

    server = await aio.start_server(handler, "127.0.0.1", 0)
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    await aio.wait_for(connected.wait(), TIMEOUT)
    server.close()
    server.close_clients()
    got = await aio.wait_for(r.read(), TIMEOUT)
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    await close_writer(aio, w)
    return got


@scenario
async def stream_server_abort_clients(aio):
    connected = aio.Event()

    async def handler(reader, writer):
        connected.set()
        writer.write(b"q" * 10)
        await reader.read()

    server = await aio.start_server(handler, "127.0.0.1", 0)
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    await aio.wait_for(connected.wait(), TIMEOUT)
    server.close()
    server.abort_clients()
    data = bytearray()
    try:
        while chunk := await aio.wait_for(r.read(100), TIMEOUT):
            data += chunk
        end = "eof"
    except ConnectionResetError:
        end = "reset"
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    await close_writer(aio, w)
    return [bytes(data) in (b"", b"q" * 10), end in ("eof", "reset")]


@scenario
async def stream_server_async_with_and_serve_forever_cancel(aio):
    async with await aio.start_server(echo_handler, "127.0.0.1", 0) as server:
        port = port_of(server)
        forever = aio.create_task(server.serve_forever())
        await aio.sleep(0.01)
        twice = await aobserve(server.serve_forever())
        r, w = await aio.open_connection("127.0.0.1", port)
        w.write(b"ping")
        pong = await aio.wait_for(r.readexactly(4), TIMEOUT)
        await close_writer(aio, w)
        forever.cancel()
        cancelled = await aobserve(forever)
        serving = server.is_serving()
    return [twice[0], twice[1], pong, cancelled[1], serving]


@scenario
async def stream_server_start_serving_false(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    start_serving=False)
    before = server.is_serving()
    await server.start_serving()
    after = server.is_serving()
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    w.write(b"x")
    got = await aio.wait_for(r.readexactly(1), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    closed_serve = await aobserve(server.serve_forever())
    return [before, after, got, closed_serve[0], closed_serve[1]]


@scenario
async def stream_connection_refused(aio):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # Nobody listens there now.
    res = await aobserve(aio.wait_for(aio.open_connection("127.0.0.1", port), TIMEOUT))
    return res[0], res[1]


@scenario
async def stream_resolution_error(aio):
    res = await aobserve(aio.open_connection("not-a-numeric-host", 80,
                                             flags=socket.AI_NUMERICHOST))
    return res[0]


@scenario
async def stream_bad_port_resolution_error(aio):
    res = await aobserve(aio.open_connection("127.0.0.1", "no-such-service-xyz"))
    return res[0]


@scenario
async def stream_unix_echo_and_cleanup(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.sock")
        server = await aio.start_unix_server(echo_handler, path)
        exists = os.path.exists(path)
        r, w = await aio.open_unix_connection(path)
        w.write(b"unix!")
        got = await aio.wait_for(r.readexactly(5), TIMEOUT)
        peer = w.get_extra_info("peername")
        await close_writer(aio, w)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        return [exists, got, peer == path, os.path.exists(path)]


@scenario
async def stream_unix_keep_socket_file(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "keep.sock")
        server = await aio.start_unix_server(echo_handler, path,
                                             cleanup_socket=False)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        return os.path.exists(path)


@scenario
async def stream_unix_stale_file_replaced(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "stale.sock")
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(path)
        stale.close()  # Leaves the file behind.
        server = await aio.start_unix_server(echo_handler, path)
        r, w = await aio.open_unix_connection(path)
        w.write(b"ok")
        got = await aio.wait_for(r.readexactly(2), TIMEOUT)
        await close_writer(aio, w)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        return got


@scenario
async def stream_unix_abstract_name(aio):
    name = f"\0mt-parity-{os.getpid()}-{id(aio)}"
    server = await aio.start_unix_server(echo_handler, name)
    r, w = await aio.open_unix_connection(name)
    w.write(b"abs")
    got = await aio.wait_for(r.readexactly(3), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [got, server.sockets]


@scenario
async def stream_unix_missing_path(aio):
    res = await aobserve(aio.open_unix_connection("/nonexistent/dir/x.sock"))
    return res[0]


@scenario
async def stream_unix_path_in_use(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "busy.sock")
        holder = socket.socket(socket.AF_UNIX)
        holder.bind(path)
        holder.listen()
        try:
            # A live socket file is not stale: it is removed anyway by
            # stdlib's rule (it is a socket), so this binds.
            server = await aio.start_unix_server(echo_handler, path)
            server.close()
            await aio.wait_for(server.wait_closed(), TIMEOUT)
            return "bound"
        finally:
            holder.close()


@scenario
async def stream_writer_write_types(aio):
    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        bad = None
        try:
            w.write("text")
        except TypeError as e:
            bad = str(e)
        w.write(bytearray(b"ba"))
        w.write(memoryview(b"mv"))
        w.writelines([b"l1", bytearray(b"l2"), memoryview(b"l3")])
        got = await aio.wait_for(r.readexactly(10), TIMEOUT)
        await close_writer(aio, w)
        return [bad, got]


@scenario
async def stream_server_handler_exception_closes_connection(aio):
    async def handler(reader, writer):
        await reader.readexactly(1)
        raise ValueError("handler failed")

    loop = aio.get_running_loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(
        type(ctx.get("exception")).__name__))
    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        w.write(b"!")
        try:
            rest = await aio.wait_for(r.read(), TIMEOUT)
        except ConnectionResetError:
            rest = b""
        await close_writer(aio, w)
    # start_server reports the handler's exception, then closes.
    return [rest, seen]


@scenario
async def stream_server_closed_after_a_client_came_and_went(aio):
    """A client of the same loop connects, writes, closes and is gone
    before the server is closed: its handler still runs (here it fails)
    and wait_closed() waits for it, as a one-thread loop accepts in the
    iteration that learns of the connection. (Ours, at 4 busy workers,
    once closed the listening socket before a worker accepted: the
    handler never ran and its report never came; CPython's
    test_streams.test_unhandled_exception.)"""
    loop = aio.get_running_loop()
    seen = []
    loop.set_exception_handler(lambda lp, ctx: seen.append(ctx["message"]))
    rounds = []
    for _ in range(10):
        handled = []

        async def handler(reader, writer):
            handled.append(await reader.read(8))
            raise ValueError("handler failed")

        server = await aio.start_server(handler, "127.0.0.1", 0)
        await server.start_serving()
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        w.write(b"test msg")
        await w.drain()
        await close_writer(aio, w)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        rounds.append((handled, len(seen)))
    return rounds


@scenario
async def stream_ipv6_loopback_if_available(aio):
    if not socket.has_ipv6:
        return "no ipv6"
    try:
        server = await aio.start_server(echo_handler, "::1", 0)
    except OSError:
        return "no ipv6"
    r, w = await aio.open_connection("::1", port_of(server))
    w.write(b"6")
    got = await aio.wait_for(r.readexactly(1), TIMEOUT)
    fam = w.get_extra_info("socket").family == socket.AF_INET6
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [got, fam]


@scenario
async def stream_loop_sendfile_over_transport(aio):
    loop = aio.get_running_loop()
    payload = bytes(range(256)) * 2048  # 512 KiB

    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        with tempfile.TemporaryFile() as f:
            f.write(payload)
            f.flush()
            reader = aio.create_task(r.readexactly(len(payload) - 1000 - 24))
            sent = await aio.wait_for(
                loop.sendfile(w.transport, f, offset=1000, count=len(payload) - 1024),
                TIMEOUT)
            pos = f.tell()
            got = await aio.wait_for(reader, TIMEOUT)
        w.write(b"after")  # The stream works as before.
        after = await aio.wait_for(r.readexactly(5), TIMEOUT)
        await close_writer(aio, w)
    return [sent, pos, got == payload[1000:len(payload) - 24], after]


@scenario
async def stream_loop_sendfile_errors(aio):
    loop = aio.get_running_loop()
    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))

        class NoSendfile:
            def is_closing(self):
                return False

        with tempfile.TemporaryFile() as f:
            f.write(b"x" * 10)
            unsupported = await aobserve(loop.sendfile(NoSendfile(), f))
            no_fallback = await aobserve(loop.sendfile(w.transport, f, fallback=False))
            await close_writer(aio, w)
            closing = await aobserve(loop.sendfile(w.transport, f))
    return [unsupported[:2], no_fallback[:2], closing]


@scenario
async def stream_sendfile_after_buffered_writes_keeps_order(aio):
    loop = aio.get_running_loop()
    async with serving(aio, echo_handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        with tempfile.TemporaryFile() as f:
            f.write(b"FILE" * 50_000)
            f.flush()
            w.write(b"head:" * 30_000)  # Likely still buffered when sendfile starts.
            sent = await aio.wait_for(loop.sendfile(w.transport, f), TIMEOUT)
        w.write(b":tail")
        expected = b"head:" * 30_000 + b"FILE" * 50_000 + b":tail"
        got = await aio.wait_for(r.readexactly(len(expected)), TIMEOUT)
        await close_writer(aio, w)
    return [sent, got == expected]


@scenario
async def stream_many_lines_in_one_segment(aio):
    async def handler(reader, writer):
        writer.write(b"".join(b"line %d\n" % i for i in range(500)))
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async with serving(aio, handler) as server:
        r, w = await aio.open_connection("127.0.0.1", port_of(server))
        lines = []
        async for line in r:
            lines.append(line)
        await close_writer(aio, w)
    return [len(lines), lines[0], lines[-1]]


@scenario
async def stream_unix_server_on_sock(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "given.sock")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(path)
        server = await aio.start_unix_server(echo_handler, sock=sock)
        r, w = await aio.open_unix_connection(path)
        w.write(b"given")
        got = await aio.wait_for(r.readexactly(5), TIMEOUT)
        await close_writer(aio, w)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        tcp = socket.socket()
        bad = await aobserve(aio.start_unix_server(echo_handler, sock=tcp))
        tcp.close()
        return [got, bad[0], bad[1], os.path.exists(path)]


@scenario
async def stream_server_state_after_close(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0)
    loop_ok = server.get_loop() is aio.get_running_loop()
    state = [server.is_serving(), len(server.sockets)]
    server.close()
    server.close()  # Twice: no error.
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    await aio.wait_for(server.wait_closed(), TIMEOUT)  # Returns at once now.
    state += [server.is_serving(), server.sockets, loop_ok]
    return state
