"""Scenarios: transports and protocols (create_connection/create_server)."""

import socket

from harness import aobserve, observe, scenario
from net_common import TIMEOUT, echo_handler, make_recorder, port_of, serving


async def _pair(aio, server_protocol_cls, client_protocol_cls, **server_kwargs):
    """A server with one accepted connection and its client: returns
    (server, server_protocol, client_transport, client_protocol)."""
    loop = aio.get_running_loop()
    accepted = loop.create_future()

    def factory():
        p = server_protocol_cls()
        if not accepted.done():
            accepted.set_result(p)
        return p

    server = await loop.create_server(factory, "127.0.0.1", 0, **server_kwargs)
    ct, cp = await loop.create_connection(client_protocol_cls, "127.0.0.1",
                                          port_of(server))
    sp = await aio.wait_for(accepted, TIMEOUT)
    # connection_made has run on the server side too (with one thread the
    # accept callbacks all run before the client's waiter resolves).
    await aio.wait_for(sp.made, TIMEOUT)
    return server, sp, ct, cp


async def _finish(aio, server, *protocols):
    for p in protocols:
        if p.transport is not None:
            p.transport.close()
    for p in protocols:
        await aio.wait_for(p.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)


@scenario
async def proto_callback_order_client_closes(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    ct.write(b"abc")
    ct.write_eof()
    await aio.wait_for(sp.done, TIMEOUT)  # Server: eof -> close -> lost.
    await aio.wait_for(cp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [sp.log, bytes(sp.data), cp.log]


@scenario
async def proto_callback_order_server_closes(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    sp.transport.write(b"bye")
    sp.transport.close()
    await aio.wait_for(cp.done, TIMEOUT)
    await aio.wait_for(sp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [sp.log, cp.log, bytes(cp.data)]


@scenario
async def proto_eof_received_true_keeps_writing(aio):
    Recorder = make_recorder(aio)

    class KeepOpen(Recorder):
        def eof_received(self):
            super().eof_received()
            self.transport.write(b"after-eof")
            self.transport.close()
            return True

    server, sp, ct, cp = await _pair(aio, KeepOpen, Recorder)
    ct.write_eof()
    await aio.wait_for(cp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [sp.log, bytes(cp.data), cp.log]


@scenario
async def proto_abort_drops_buffer_and_reports_none(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    ct.pause_reading()
    sp.transport.set_write_buffer_limits(high=0)
    ct_closing_before = ct.is_closing()
    ct.abort()
    closing_after = ct.is_closing()
    await aio.wait_for(cp.done, TIMEOUT)
    await aio.wait_for(sp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [ct_closing_before, closing_after, cp.log,
            sp.log[-1][0], sp.log[-1][1] in (None, "ConnectionResetError")]


@scenario
async def proto_write_after_close_is_ignored(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    ct.close()
    await aio.wait_for(cp.done, TIMEOUT)
    results = [observe(ct.write, b"late") for _ in range(3)]
    await aio.wait_for(sp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [results, ct.is_closing(), cp.log]


@scenario
async def proto_write_errors(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    bad_type = observe(ct.write, "str")
    bad_list = observe(ct.writelines, [b"ok", 3])
    empty = observe(ct.write, b"")
    ct.write_eof()
    after_eof = observe(ct.write, b"x")
    after_eof_lines = observe(ct.writelines, [b"x"])
    await _finish(aio, server, sp, cp)
    return [bad_type, bad_list[0], bad_list[1], empty, after_eof,
            after_eof_lines[0]]


@scenario
async def proto_write_buffer_limits(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    default = ct.get_write_buffer_limits()
    ct.set_write_buffer_limits(high=1000)
    a = ct.get_write_buffer_limits()
    ct.set_write_buffer_limits(low=100)
    b = ct.get_write_buffer_limits()
    ct.set_write_buffer_limits(high=10, low=5)
    c = ct.get_write_buffer_limits()
    bad = observe(ct.set_write_buffer_limits, high=1, low=2)
    neg = observe(ct.set_write_buffer_limits, high=-1)
    size = ct.get_write_buffer_size()
    await _finish(aio, server, sp, cp)
    return [default, a, b, c, bad, neg, size]


@scenario
async def proto_pause_and_resume_writing(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()

    class Flow(Recorder):
        def __init__(self):
            super().__init__()
            self.resumed = loop.create_future()

        def pause_writing(self):
            self.log.append("pause")

        def resume_writing(self):
            self.log.append("resume")
            if not self.resumed.done():
                self.resumed.set_result(None)

    server, sp, ct, cp = await _pair(aio, Recorder, Flow)
    sp.transport.pause_reading()
    ct.set_write_buffer_limits(high=64 * 1024)
    sent = 0
    # Fill the socket buffers and ours until the protocol is paused.
    while "pause" not in cp.log and sent < 64 * 1024 * 1024:
        ct.write(b"z" * 65536)
        sent += 65536
        await aio.sleep(0)
    paused = "pause" in cp.log
    sp.transport.resume_reading()
    await aio.wait_for(cp.resumed, TIMEOUT)
    # Every byte arrives once reading resumed.
    for _ in range(2000):
        if len(sp.data) == sent:
            break
        await aio.sleep(0.005)
    await _finish(aio, server, sp, cp)
    return [paused, cp.log[:3], len(sp.data) == sent]


@scenario
async def proto_pause_reading_holds_data(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    sp.transport.pause_reading()
    reading = [sp.transport.is_reading()]
    ct.write(b"held")
    await aio.sleep(0.05)
    while_paused = bytes(sp.data)
    sp.transport.pause_reading()  # Twice: no error.
    sp.transport.resume_reading()
    reading.append(sp.transport.is_reading())
    for _ in range(1000):
        if sp.data == b"held":
            break
        await aio.sleep(0.005)
    sp.transport.resume_reading()  # Twice: no error.
    await _finish(aio, server, sp, cp)
    reading.append(sp.transport.is_reading())
    return [reading, while_paused, bytes(sp.data)]


@scenario
async def proto_data_received_error_closes(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda lp, ctx: errors.append(
        (ctx["message"], type(ctx["exception"]).__name__,
         "transport" in ctx, "protocol" in ctx)))

    class Failing(Recorder):
        def data_received(self, data):
            super().data_received(data)
            raise ValueError("bad data")

    server, sp, ct, cp = await _pair(aio, Failing, Recorder)
    ct.write(b"x")
    await aio.wait_for(sp.done, TIMEOUT)
    await aio.wait_for(cp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [sp.log, errors]


@scenario
async def proto_buffered_protocol(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()

    class Buffered(aio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(7)
            self.chunks = []
            self.transport = None
            self.made = loop.create_future()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.made.set_result(None)

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, nbytes):
            self.chunks.append(bytes(self.buf[:nbytes]))

        def eof_received(self):
            self.chunks.append("eof")

        def connection_lost(self, exc):
            self.done.set_result(exc)

    server, sp, ct, cp = await _pair(aio, Buffered, Recorder)
    ct.write(b"0123456789abcdefghij")
    ct.write_eof()
    await aio.wait_for(sp.done, TIMEOUT)
    data = b"".join(c for c in sp.chunks if c != "eof")
    sizes_ok = all(len(c) <= 7 for c in sp.chunks if c != "eof")
    await _finish(aio, server, sp, cp)
    return [data, sizes_ok, sp.chunks[-1]]


@scenario
async def proto_buffered_empty_buffer_is_an_error(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    errors = []
    loop.set_exception_handler(lambda lp, ctx: errors.append(
        (ctx["message"], str(ctx.get("exception")))))

    class Empty(aio.BufferedProtocol):
        def __init__(self):
            self.transport = None
            self.made = loop.create_future()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.made.set_result(None)

        def get_buffer(self, sizehint):
            return bytearray()

        def buffer_updated(self, nbytes):
            pass

        def connection_lost(self, exc):
            self.done.set_result(type(exc).__name__)

    server, sp, ct, cp = await _pair(aio, Empty, Recorder)
    ct.write(b"data")
    lost = await aio.wait_for(sp.done, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return [lost, errors]


@scenario
async def proto_set_and_get_protocol(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    first = ct.get_protocol() is cp
    other = Recorder()
    ct.set_protocol(other)
    second = ct.get_protocol() is other
    ct.set_protocol(cp)
    sp.transport.write(b"to client")
    for _ in range(1000):
        if cp.data:
            break
        await aio.sleep(0.005)
    await _finish(aio, server, sp, cp)
    return [first, second, bytes(cp.data), other.log]


@scenario
async def proto_transport_repr_and_state(aio):
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    state = [ct.is_closing(), ct.is_reading(), ct.can_write_eof(),
             "fd=" in repr(ct)]
    await _finish(aio, server, sp, cp)
    state.append(ct.is_closing())
    return state


@scenario
async def proto_create_connection_with_sock(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    server = await loop.create_server(Recorder, "127.0.0.1", 0)
    s = socket.socket()
    s.setblocking(False)
    await loop.sock_connect(s, ("127.0.0.1", port_of(server)))
    ct, cp = await loop.create_connection(Recorder, sock=s)
    same = ct.get_extra_info("socket").fileno() == s.fileno()
    ct.close()
    await aio.wait_for(cp.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [same, cp.log]


@scenario
async def proto_create_connection_argument_errors(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    s = socket.socket()
    u = socket.socket(type=socket.SOCK_DGRAM)
    try:
        out = [
            await aobserve(loop.create_connection(Recorder, "127.0.0.1", 1, sock=s)),
            await aobserve(loop.create_connection(Recorder)),
            await aobserve(loop.create_connection(Recorder, sock=u)),
            await aobserve(loop.create_connection(Recorder, "127.0.0.1", 1,
                                                  server_hostname="x")),
            await aobserve(loop.create_connection(Recorder, "127.0.0.1", 1,
                                                  ssl_handshake_timeout=1)),
            await aobserve(loop.create_connection(Recorder, "127.0.0.1", 1,
                                                  ssl_shutdown_timeout=1)),
        ]
    finally:
        s.close()
        u.close()
    # Messages that show a socket's repr carry its fd number: cut there.
    return [(o[0], o[1], o[2].split(", got")[0]) for o in out]


@scenario
async def proto_create_server_argument_errors(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    s = socket.socket()
    u = socket.socket(type=socket.SOCK_DGRAM)
    try:
        out = [
            await aobserve(loop.create_server(Recorder, "127.0.0.1", 0, sock=s)),
            await aobserve(loop.create_server(Recorder)),
            await aobserve(loop.create_server(Recorder, sock=u)),
            await aobserve(loop.create_server(Recorder, "127.0.0.1", 0, ssl=True)),
            await aobserve(loop.create_server(Recorder, "127.0.0.1", 0,
                                              ssl_handshake_timeout=1)),
        ]
    finally:
        s.close()
        u.close()
    return [(o[0], o[1], o[2].split(", got")[0]) for o in out]


@scenario
async def proto_create_connection_local_addr(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    server = await loop.create_server(Recorder, "127.0.0.1", 0)
    ct, cp = await loop.create_connection(Recorder, "127.0.0.1", port_of(server),
                                          local_addr=("127.0.0.1", 0))
    local = ct.get_extra_info("sockname")[0]
    ct.close()
    await aio.wait_for(cp.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return local


@scenario
async def proto_create_connection_happy_eyeballs(aio):
    # Two addresses, the first refusing: the staggered race connects to
    # the second.
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    server = await loop.create_server(Recorder, "127.0.0.1", 0)
    port = port_of(server)
    dead = socket.socket()
    dead.bind(("127.0.0.2", 0))
    dead_port = dead.getsockname()[1]
    dead.close()

    async def fake_getaddrinfo(host, p, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.2", dead_port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    loop.getaddrinfo = fake_getaddrinfo
    try:
        ct, cp = await loop.create_connection(Recorder, "example.test", port,
                                              happy_eyeballs_delay=0.05)
        peer = ct.get_extra_info("peername")
        ct.close()
        await aio.wait_for(cp.done, TIMEOUT)
        sequential = await aobserve(loop.create_connection(
            Recorder, "example.test", port, interleave=1))
        if sequential[0] == "ok":
            sequential[1][0].close()
            await aio.wait_for(sequential[1][1].done, TIMEOUT)
    finally:
        del loop.getaddrinfo
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [peer == ("127.0.0.1", port), sequential[0]]


@scenario
async def proto_create_connection_all_errors(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    ports = []
    for host in ("127.0.0.2", "127.0.0.3"):
        s = socket.socket()
        s.bind((host, 0))
        ports.append((host, s.getsockname()[1]))
        s.close()

    async def fake_getaddrinfo(host, p, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", addr) for addr in ports]

    loop.getaddrinfo = fake_getaddrinfo
    try:
        try:
            await loop.create_connection(Recorder, "example.test", 1, all_errors=True)
            group = None
        except ExceptionGroup as eg:
            group = [type(e).__name__ for e in eg.exceptions]
        multi = await aobserve(loop.create_connection(Recorder, "example.test", 1))
    finally:
        del loop.getaddrinfo
    return [group, multi[0], multi[1].startswith("Multiple exceptions")]


@scenario
async def proto_server_multiple_hosts_and_reuse_port(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    server = await loop.create_server(Recorder, ["127.0.0.1", "127.0.0.2"], 0,
                                      reuse_port=True)
    hosts = sorted(s.getsockname()[0] for s in server.sockets)
    reuse = all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)
                for s in server.sockets)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [hosts, reuse, server.sockets]


@scenario
async def proto_server_bind_in_use(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        res = await aobserve(loop.create_server(Recorder, "127.0.0.1", port,
                                                reuse_address=False))
    finally:
        holder.close()
    return [res[0], res[1].startswith("[Errno 98] error while attempting to bind")]


@scenario
async def proto_server_keep_alive_and_backlog(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    server = await loop.create_server(Recorder, "127.0.0.1", 0, keep_alive=True,
                                      backlog=5)
    ka = server.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return bool(ka)


@scenario
async def proto_connect_accepted_socket(aio):
    Recorder = make_recorder(aio)
    loop = aio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    client = socket.socket()
    client.setblocking(False)
    connect = aio.create_task(loop.sock_connect(client, listener.getsockname()))
    conn, _ = await aio.wait_for(loop.sock_accept(listener), TIMEOUT)
    await connect
    st, sp = await loop.connect_accepted_socket(Recorder, conn)
    await loop.sock_sendall(client, b"via accepted")
    for _ in range(1000):
        if sp.data:
            break
        await aio.sleep(0.005)
    st.close()
    await aio.wait_for(sp.done, TIMEOUT)
    client.close()
    listener.close()
    bad = socket.socket(type=socket.SOCK_DGRAM)
    res = await aobserve(loop.connect_accepted_socket(Recorder, bad))
    bad.close()
    return [bytes(sp.data), sp.log, res[0]]


@scenario
async def proto_many_connections_callbacks_never_overlap(aio):
    # Each connection counts its own callbacks without a lock: if two ran
    # at once for one connection, the count would be off.
    loop = aio.get_running_loop()

    class Counting(aio.Protocol):
        def __init__(self):
            self.n = 0
            self.inside = False
            self.overlap = False
            self.done = loop.create_future()

        def connection_made(self, t):
            self.t = t

        def data_received(self, data):
            if self.inside:
                self.overlap = True
            self.inside = True
            for b in data:
                self.n += 1
            self.t.write(data)
            self.inside = False

        def connection_lost(self, exc):
            self.done.set_result((self.n, self.overlap))

    protos = []

    def factory():
        p = Counting()
        protos.append(p)
        return p

    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = port_of(server)

    async def client():
        r, w = await aio.open_connection("127.0.0.1", port)
        for _ in range(50):
            w.write(b"m" * 100)
            await r.readexactly(100)
        w.close()
        await w.wait_closed()

    await aio.wait_for(aio.gather(*[client() for _ in range(20)]), 30)
    results = await aio.wait_for(aio.gather(*[p.done for p in protos]), TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return sorted(set(results))


@scenario
async def proto_task_woken_by_data_runs_before_the_next_callback(aio):
    """A server answers and closes at once. The task that data_received
    woke runs before the connection's next callback, so it finds the
    transport open and eof_received not delivered yet (on a one-thread
    loop the end of stream is read in a later iteration than the data;
    aiohttp's ws_connect() asserts the transport is still there)."""
    loop = aio.get_running_loop()

    class AnswerAndClose(aio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(b"answer")
            self.transport.close()

    class Client(aio.Protocol):
        def __init__(self):
            self.log = []
            self.answered = loop.create_future()
            self.done = loop.create_future()

        def data_received(self, data):
            self.log.append("data")
            if not self.answered.done():
                self.answered.set_result(None)

        def eof_received(self):
            self.log.append("eof")

        def connection_lost(self, exc):
            self.log.append("lost")
            self.done.set_result(None)

    server = await loop.create_server(AnswerAndClose, "127.0.0.1", 0)
    seen = []
    for _ in range(40):
        transport, client = await loop.create_connection(
            Client, "127.0.0.1", port_of(server))
        transport.write(b"ask")
        await aio.wait_for(client.answered, TIMEOUT)
        seen.append((tuple(client.log), transport.is_closing()))
        await aio.wait_for(client.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return sorted(set(seen))


@scenario
async def proto_done_callback_added_first_runs_before_the_awaiting_step(aio):
    """A client protocol that finishes its request's waiter in
    data_received, whose first done callback was added when the waiter was
    made (asyncpg's protocol: _on_waiter_completed cancels the request's
    timeout handle). The callback runs before the step of the task awaiting
    the waiter, so it never finds the task's next request in place: run
    after that step, it cancelled the next request's timeout instead."""
    loop = aio.get_running_loop()

    class Client(aio.Protocol):
        def __init__(self):
            self.waiter = None
            self.timeout_handle = None
            self.seen = []

        def connection_made(self, transport):
            self.transport = transport

        def request(self, payload):
            self.waiter = loop.create_future()
            self.timeout_handle = loop.call_later(TIMEOUT, lambda: None)
            self.waiter.add_done_callback(self._on_waiter_completed)
            self.transport.write(payload)
            return self.waiter

        def _on_waiter_completed(self, fut):
            self.seen.append(fut is self.waiter)
            self.timeout_handle.cancel()
            self.timeout_handle = None

        def data_received(self, data):
            self.waiter.set_result(data)

    async with serving(aio, echo_handler) as server:
        transport, client = await loop.create_connection(
            Client, "127.0.0.1", port_of(server))
        answers = []
        for i in range(100):
            answers.append(await aio.wait_for(client.request(b"%03d" % i),
                                              TIMEOUT))
        transport.close()
    return answers == [b"%03d" % i for i in range(100)], sorted(set(client.seen))


@scenario
async def proto_transports_are_asyncio_transports(aio):
    """isinstance() checks written for stdlib's transports hold (libraries
    test `isinstance(transport, asyncio.Transport)`)."""
    Recorder = make_recorder(aio)
    server, sp, ct, cp = await _pair(aio, Recorder, Recorder)
    loop = aio.get_running_loop()
    lost = loop.create_future()

    class Datagram(aio.DatagramProtocol):
        def connection_lost(self, exc):
            lost.set_result(exc)

    dt, _ = await loop.create_datagram_endpoint(Datagram, local_addr=("127.0.0.1", 0))
    classes = (aio.BaseTransport, aio.ReadTransport, aio.WriteTransport,
               aio.Transport, aio.DatagramTransport)
    kinds = [[cls.__name__ for cls in classes if isinstance(t, cls)]
             for t in (ct, sp.transport, dt)]
    dt.close()
    await aio.wait_for(lost, TIMEOUT)
    await _finish(aio, server, sp, cp)
    return kinds


async def _peer_after_end(aio, end):
    """The peer's recv() right after the transport's close()/abort() and
    one sleep(0), made without yielding to the loop, as a test joining the
    thread that serves the other end blocks it."""
    loop = aio.get_running_loop()
    mine, peer = socket.socketpair()
    try:
        transport, _ = await loop.create_connection(aio.Protocol, sock=mine)
        getattr(transport, end)()
        await aio.sleep(0)
        peer.settimeout(TIMEOUT)
        try:
            return peer.recv(16)
        except TimeoutError:
            return "no end of stream"
    finally:
        peer.close()


@scenario
async def peer_sees_end_of_stream_after_abort_and_one_sleep(aio):
    return await _peer_after_end(aio, "abort")


@scenario
async def peer_sees_end_of_stream_after_close_and_one_sleep(aio):
    return await _peer_after_end(aio, "close")


@scenario
async def transport_method_patched_on_the_instance(aio):
    # Tests patch one transport's methods (aiohttp's patch its write());
    # libraries set attributes on transports.
    from unittest import mock
    loop = aio.get_running_loop()
    mine, peer = socket.socketpair()
    try:
        transport, _ = await loop.create_connection(aio.Protocol, sock=mine)
        seen = []
        with mock.patch.object(transport, "write", side_effect=seen.append):
            transport.write(b"x")
        transport.note = "set"
        got = [seen, transport.note, "write" in vars(transport)]
        transport.close()
        return got
    finally:
        peer.close()
