"""Scenarios: the loop's sock_* coroutines, add_reader/add_writer and name
resolution."""

import os
import socket
import tempfile

from harness import aobserve, observe, scenario
from net_common import TIMEOUT


def _tcp_listener():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    return listener


async def _tcp_pair(aio):
    """A connected pair of non-blocking TCP sockets made with sock_*."""
    loop = aio.get_running_loop()
    listener = _tcp_listener()
    client = socket.socket()
    client.setblocking(False)
    try:
        connect = aio.create_task(loop.sock_connect(client, listener.getsockname()))
        conn, addr = await aio.wait_for(loop.sock_accept(listener), TIMEOUT)
        await aio.wait_for(connect, TIMEOUT)
    finally:
        listener.close()
    return client, conn, addr


@scenario
async def sock_connect_accept_sendall_recv(aio):
    loop = aio.get_running_loop()
    client, conn, addr = await _tcp_pair(aio)
    try:
        await loop.sock_sendall(client, b"hello")
        got = await aio.wait_for(loop.sock_recv(conn, 5), TIMEOUT)
        blocking = conn.getblocking()
        return [got, addr[0], blocking]
    finally:
        client.close()
        conn.close()


@scenario
async def sock_recv_waits_for_data(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    try:
        pending = aio.create_task(loop.sock_recv(conn, 100))
        await aio.sleep(0.02)
        early = pending.done()
        await loop.sock_sendall(client, b"late")
        got = await aio.wait_for(pending, TIMEOUT)
        return [early, got]
    finally:
        client.close()
        conn.close()


@scenario
async def sock_recv_into_and_eof(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    try:
        buf = bytearray(10)
        await loop.sock_sendall(client, b"abcdef")
        n = await aio.wait_for(loop.sock_recv_into(conn, buf), TIMEOUT)
        client.shutdown(socket.SHUT_WR)
        eof = await aio.wait_for(loop.sock_recv(conn, 10), TIMEOUT)
        return [n, bytes(buf[:n]), eof]
    finally:
        client.close()
        conn.close()


@scenario
async def sock_sendall_large_with_backpressure(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    size = 8 * 1024 * 1024
    payload = os.urandom(1024) * (size // 1024)
    try:
        async def read_all():
            chunks = []
            n = 0
            while n < size:
                data = await loop.sock_recv(conn, 1 << 20)
                if not data:
                    break
                chunks.append(data)
                n += len(data)
            return b"".join(chunks)

        reader = aio.create_task(read_all())
        await aio.wait_for(loop.sock_sendall(client, payload), 60)
        got = await aio.wait_for(reader, 60)
        return got == payload
    finally:
        client.close()
        conn.close()


@scenario
async def sock_recv_cancelled_then_reused(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    try:
        t = aio.create_task(loop.sock_recv(conn, 10))
        await aio.sleep(0.01)
        t.cancel()
        cancelled = await aobserve(t)
        await loop.sock_sendall(client, b"again")
        got = await aio.wait_for(loop.sock_recv(conn, 10), TIMEOUT)
        return [cancelled[1], got]
    finally:
        client.close()
        conn.close()


@scenario
async def sock_connect_refused(aio):
    loop = aio.get_running_loop()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = socket.socket()
    c.setblocking(False)
    try:
        res = await aobserve(aio.wait_for(loop.sock_connect(c, ("127.0.0.1", port)),
                                          TIMEOUT))
        return res[0]
    finally:
        c.close()


@scenario
async def sock_udp_sendto_recvfrom(aio):
    loop = aio.get_running_loop()
    a = socket.socket(type=socket.SOCK_DGRAM)
    b = socket.socket(type=socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    a.setblocking(False)
    b.setblocking(False)
    try:
        pending = aio.create_task(loop.sock_recvfrom(b, 100))
        await aio.sleep(0.01)
        n = await loop.sock_sendto(a, b"dgram", b.getsockname())
        data, addr = await aio.wait_for(pending, TIMEOUT)
        await loop.sock_sendto(a, b"into", b.getsockname())
        buf = bytearray(16)
        nbytes, addr2 = await aio.wait_for(loop.sock_recvfrom_into(b, buf), TIMEOUT)
        await loop.sock_sendto(a, b"limited", b.getsockname())
        buf2 = bytearray(16)
        nbytes2, _ = await aio.wait_for(loop.sock_recvfrom_into(b, buf2, 3), TIMEOUT)
        return [n, data, addr == a.getsockname(), nbytes, bytes(buf[:nbytes]),
                addr2 == a.getsockname(), nbytes2, bytes(buf2[:nbytes2])]
    finally:
        a.close()
        b.close()


@scenario
async def sock_unix_stream_pair(aio):
    loop = aio.get_running_loop()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen()
        listener.setblocking(False)
        client = socket.socket(socket.AF_UNIX)
        client.setblocking(False)
        try:
            connect = aio.create_task(loop.sock_connect(client, path))
            conn, _ = await aio.wait_for(loop.sock_accept(listener), TIMEOUT)
            await connect
            await loop.sock_sendall(conn, b"over unix")
            got = await aio.wait_for(loop.sock_recv(client, 100), TIMEOUT)
            conn.close()
            return got
        finally:
            client.close()
            listener.close()


@scenario
async def sock_unix_datagram(aio):
    loop = aio.get_running_loop()
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a"), os.path.join(d, "b")
        a = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        b = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.bind(pa)
        b.bind(pb)
        a.setblocking(False)
        b.setblocking(False)
        try:
            await loop.sock_sendto(a, b"unix dgram", pb)
            data, addr = await aio.wait_for(loop.sock_recvfrom(b, 100), TIMEOUT)
            return [data, addr == pa]
        finally:
            a.close()
            b.close()


@scenario
async def sock_sendfile_native(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    payload = bytes(range(256)) * 4096  # 1 MiB
    try:
        with tempfile.TemporaryFile() as f:
            f.write(payload)
            f.flush()
            f.seek(0)

            async def read_n(n):
                chunks = []
                while n > 0:
                    data = await loop.sock_recv(conn, 1 << 20)
                    if not data:
                        break
                    chunks.append(data)
                    n -= len(data)
                return b"".join(chunks)

            reader = aio.create_task(read_n(len(payload) - 100 - 1000))
            sent = await aio.wait_for(
                loop.sock_sendfile(client, f, offset=100, count=len(payload) - 1100),
                TIMEOUT)
            got = await aio.wait_for(reader, TIMEOUT)
            pos = f.tell()
            return [sent, got == payload[100:len(payload) - 1000], pos]
    finally:
        client.close()
        conn.close()


@scenario
async def sock_sendfile_argument_errors(aio):
    loop = aio.get_running_loop()
    client, conn, _ = await _tcp_pair(aio)
    udp = socket.socket(type=socket.SOCK_DGRAM)
    udp.setblocking(False)
    try:
        with tempfile.TemporaryFile() as f, tempfile.TemporaryFile("w") as text:
            out = [
                await aobserve(loop.sock_sendfile(client, text)),
                await aobserve(loop.sock_sendfile(udp, f)),
                await aobserve(loop.sock_sendfile(client, f, count=0)),
                await aobserve(loop.sock_sendfile(client, f, count="1")),
                await aobserve(loop.sock_sendfile(client, f, offset=-1)),
                await aobserve(loop.sock_sendfile(client, f, offset=1.5)),
                await aobserve(loop.sock_sendfile(client, f)),  # Empty file.
            ]
        return out
    finally:
        udp.close()
        client.close()
        conn.close()


@scenario
async def sock_blocking_socket_in_debug_mode(aio):
    loop = aio.get_running_loop()
    loop.set_debug(True)
    s = socket.socket()
    try:
        return await aobserve(loop.sock_recv(s, 1))
    finally:
        loop.set_debug(False)
        s.close()


@scenario
async def reader_callback_runs_while_readable(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    got = bytearray()
    done = loop.create_future()

    def on_readable():
        data = b.recv(3)  # Less than there is: level-triggered again.
        got.extend(data)
        if len(got) >= 9 and not done.done():
            done.set_result(None)

    try:
        loop.add_reader(b.fileno(), on_readable)
        a.send(b"123456789")
        await aio.wait_for(done, TIMEOUT)
        removed = loop.remove_reader(b.fileno())
        removed_again = loop.remove_reader(b.fileno())
        return [bytes(got), removed, removed_again]
    finally:
        a.close()
        b.close()


@scenario
async def reader_replaced_and_args(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    b.setblocking(False)
    calls = []
    done = loop.create_future()

    def first(tag):
        calls.append(("first", tag))

    def second(tag, other):
        calls.append(("second", tag, other))
        b.recv(100)
        if not done.done():
            done.set_result(None)

    try:
        loop.add_reader(b, first, "x")  # A file object works too.
        loop.add_reader(b, second, "y", 2)
        a.send(b"go")
        await aio.wait_for(done, TIMEOUT)
        loop.remove_reader(b)
        return calls[:1]
    finally:
        a.close()
        b.close()


@scenario
async def writer_callback(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    done = loop.create_future()

    def on_writable():
        a.send(b"w")
        loop.remove_writer(a.fileno())
        done.set_result("written")

    try:
        loop.add_writer(a.fileno(), on_writable)
        res = await aio.wait_for(done, TIMEOUT)
        return [res, b.recv(10), loop.remove_writer(a.fileno())]
    finally:
        a.close()
        b.close()


@scenario
async def reader_and_writer_on_one_fd(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    events = []
    got_read = loop.create_future()
    got_write = loop.create_future()

    def on_read():
        events.append(("r", a.recv(10)))
        loop.remove_reader(a)
        got_read.set_result(None)

    def on_write():
        loop.remove_writer(a)
        got_write.set_result(None)

    try:
        loop.add_reader(a, on_read)
        loop.add_writer(a, on_write)
        await aio.wait_for(got_write, TIMEOUT)
        b.send(b"in")
        await aio.wait_for(got_read, TIMEOUT)
        return events
    finally:
        a.close()
        b.close()


@scenario
async def reader_errors(aio):
    loop = aio.get_running_loop()
    bad_fd = observe(loop.add_reader, -1, print)
    bad_obj = observe(loop.add_reader, object(), print)
    with tempfile.TemporaryFile() as f:
        regular = observe(loop.add_reader, f.fileno(), print)
    return [bad_fd, bad_obj[0], bad_obj[1], regular[0], regular[1]]


@scenario
async def reader_on_transport_fd_refused(aio):
    loop = aio.get_running_loop()
    async def handler(reader, writer):
        writer.close()

    server = await aio.start_server(handler, "127.0.0.1", 0)
    r, w = await aio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    fd = w.get_extra_info("socket").fileno()
    res = [observe(loop.add_reader, fd, print)[:2],
           observe(loop.remove_reader, fd)[:2],
           observe(loop.add_writer, fd, print)[:2],
           observe(loop.remove_writer, fd)[:2]]
    w.close()
    await aio.wait_for(w.wait_closed(), TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return res


@scenario
async def reader_callback_exception_goes_to_handler(aio):
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    b.setblocking(False)
    seen = loop.create_future()

    def handler(lp, ctx):
        if not seen.done():
            seen.set_result((ctx["message"].split(" ")[0:3],
                             type(ctx["exception"]).__name__))

    def on_read():
        b.recv(10)
        raise KeyError("in reader")

    loop.set_exception_handler(handler)
    try:
        loop.add_reader(b, on_read)
        a.send(b"x")
        res = await aio.wait_for(seen, TIMEOUT)
        loop.remove_reader(b)
        return res
    finally:
        a.close()
        b.close()


@scenario
async def getaddrinfo_and_getnameinfo(aio):
    loop = aio.get_running_loop()
    infos = await loop.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)
    name = await loop.getnameinfo(("127.0.0.1", 80),
                                  socket.NI_NUMERICHOST | socket.NI_NUMERICSERV)
    bad = await aobserve(loop.getaddrinfo("not-numeric", 80,
                                          flags=socket.AI_NUMERICHOST))
    return [infos[0][4], name, bad[0]]


@scenario
async def remove_reader_and_writer_of_a_closed_socket(aio):
    # The registration is found by the socket object itself, as selectors
    # do once its fileno() is -1; a socket that then gets the same number
    # is watched afresh.
    # (With both a reader and a writer, stdlib's selector fails on the
    # closed descriptor itself: one direction each here.)
    loop = aio.get_running_loop()
    a, b = socket.socketpair()
    w, x = socket.socketpair()
    loop.add_reader(a, lambda: None)
    loop.add_writer(w, lambda: None)
    a.close()
    w.close()
    removed = [observe(loop.remove_reader, a), observe(loop.remove_writer, w),
               observe(loop.remove_reader, a)]
    c, d = socket.socketpair()
    fired = loop.create_future()
    loop.add_reader(c, lambda: fired.done() or fired.set_result("fired"))
    d.send(b"x")
    got = await aio.wait_for(fired, TIMEOUT)
    loop.remove_reader(c)
    for s in (b, c, d, x):
        s.close()
    return [removed, got]


@scenario
async def cancelled_create_connection_with_sock_lets_go_of_it(aio):
    # When the cancel arrives, the socket is no longer the transport's: the
    # caller closes it, and the next connection, whose socket likely gets
    # the same number, is made without "File descriptor N is used by
    # transport". (Whether the cancel beat the connection is timing.)
    return await _cancel_connections_on_sock(aio, ssl=None, timeout=0)


@scenario
async def cancelled_tls_create_connection_with_sock_lets_go_of_it(aio):
    # The same over TLS, cancelled during the handshake (the listener
    # never answers it): the TLS transport's socket transport lets go of
    # the socket before the CancelledError arrives.
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return await _cancel_connections_on_sock(aio, ssl=ctx, timeout=0.002)


async def _cancel_connections_on_sock(aio, *, ssl, timeout):
    """20 rounds: create_connection(sock=s) cancelled after `timeout`, s
    closed, then a plain connection on a new socket: how did each end?"""
    loop = aio.get_running_loop()
    tls = {} if ssl is None else {"ssl": ssl, "server_hostname": ""}
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    outcomes = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port))
            s.setblocking(False)
            try:
                transport, _ = await aio.wait_for(
                    loop.create_connection(aio.Protocol, sock=s, **tls), timeout)
                transport.close()
            except TimeoutError:
                pass
            s.close()
            again = socket.create_connection(("127.0.0.1", port))
            again.setblocking(False)
            r = await aobserve(loop.create_connection(aio.Protocol, sock=again))
            outcomes.append(r[0])
            if r[0] == "ok":
                r[1][0].close()
            else:
                again.close()
            conn, _ = listener.accept()
            conn.close()
            conn, _ = listener.accept()
            conn.close()
    finally:
        listener.close()
    await aio.sleep(0.01)
    return outcomes
