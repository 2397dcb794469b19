"""Scenarios: the contextvars context protocol callbacks run in.

stdlib runs a connection's callbacks in copies of the context current when
the connection was made: create_connection's caller's, or, for a server's
connections, the one current when the server started serving. A handler
started by start_server sees a variable set before the server started,
and not one its caller set afterwards.
"""

import contextvars
import os
import socket
import tempfile

from harness import scenario
from net_common import TIMEOUT, client_context, port_of, server_context


def _recording_protocol(aio, var, log, done=None):
    """A protocol that logs var.get() in each callback it gets."""

    class Recording(aio.Protocol):
        def __init__(self):
            log.append(("factory", var.get()))
            self.transport = None

        def connection_made(self, transport):
            self.transport = transport
            log.append(("made", var.get()))

        def data_received(self, data):
            log.append(("data", var.get()))
            if data.endswith(b"!"):
                # The server answers, then closes.
                self.transport.write(b"reply")
                self.transport.close()

        def eof_received(self):
            log.append(("eof", var.get()))

        def connection_lost(self, exc):
            log.append(("lost", var.get()))
            if done is not None and not done.done():
                done.set_result(None)

    return Recording


async def _exchange(aio, var, start_server, connect):
    """Serves with recording protocols on both sides; the client sends,
    the server answers and closes. Returns both logs."""
    loop = aio.get_running_loop()
    server_log, client_log = [], []
    server_done = loop.create_future()
    client_done = loop.create_future()
    var.set("before serving")
    server = await start_server(_recording_protocol(aio, var, server_log, server_done))
    var.set("caller of connect")
    transport, _ = await connect(_recording_protocol(aio, var, client_log, client_done))
    var.set("after connect")
    transport.write(b"hello!")
    await aio.wait_for(aio.gather(server_done, client_done), TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    # Only the kinds of callbacks and what each saw: how many data_received
    # calls the bytes took is not promised.
    return [sorted(set(server_log)), sorted(set(client_log))]


def _tcp(loop, server_ssl=None, client_ssl=None):
    """start_server and connect callables for _exchange over TCP."""
    port = []

    async def start(factory):
        server = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_ssl)
        port.append(port_of(server))
        return server

    def connect(factory):
        tls = {} if client_ssl is None else {"ssl": client_ssl,
                                             "server_hostname": "localhost"}
        return loop.create_connection(factory, "127.0.0.1", port[0], **tls)

    return start, connect


@scenario
async def ctx_tcp_protocol_callbacks(aio):
    var = contextvars.ContextVar("where", default="unset")
    return await _exchange(aio, var, *_tcp(aio.get_running_loop()))


@scenario
async def ctx_unix_protocol_callbacks(aio):
    var = contextvars.ContextVar("where", default="unset")
    loop = aio.get_running_loop()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "s")
        return await _exchange(
            aio, var, lambda factory: loop.create_unix_server(factory, path),
            lambda factory: loop.create_unix_connection(factory, path))


@scenario
async def ctx_tls_protocol_callbacks(aio):
    var = contextvars.ContextVar("where", default="unset")
    return await _exchange(aio, var, *_tcp(aio.get_running_loop(), server_context(),
                                           client_context()))


@scenario
async def ctx_start_server_handler_sees_serving_context(aio):
    var = contextvars.ContextVar("where", default="unset")
    seen = []

    async def handler(reader, writer):
        seen.append(var.get())
        await reader.read(100)
        writer.write(var.get().encode())
        writer.close()
        await writer.wait_closed()

    var.set("before serving")
    server = await aio.start_server(handler, "127.0.0.1", 0)
    var.set("after serving")
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    w.write(b"x")
    reply = await aio.wait_for(r.read(), TIMEOUT)
    w.close()
    await aio.wait_for(w.wait_closed(), TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [seen, reply, var.get()]


@scenario
async def ctx_datagram_endpoint_callbacks(aio):
    var = contextvars.ContextVar("where", default="unset")
    loop = aio.get_running_loop()
    log = []
    got = loop.create_future()

    class Receiver(aio.DatagramProtocol):
        def connection_made(self, transport):
            log.append(("made", var.get()))

        def datagram_received(self, data, addr):
            log.append(("datagram", var.get()))
            if not got.done():
                got.set_result(data)

        def connection_lost(self, exc):
            log.append(("lost", var.get()))

    var.set("before endpoint")
    transport, _ = await loop.create_datagram_endpoint(
        Receiver, local_addr=("127.0.0.1", 0))
    var.set("after endpoint")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"ping", transport.get_extra_info("sockname"))
        data = await aio.wait_for(got, TIMEOUT)
    transport.close()
    await aio.sleep(0.01)
    return [data, log]


@scenario
async def ctx_connect_accepted_socket_callbacks(aio):
    var = contextvars.ContextVar("where", default="unset")
    loop = aio.get_running_loop()
    log = []
    done = loop.create_future()
    a, b = socket.socketpair()
    a.setblocking(False)
    var.set("before connect_accepted_socket")
    transport, _ = await loop.connect_accepted_socket(
        _recording_protocol(aio, var, log, done), a)
    var.set("after")
    b.sendall(b"hi!")
    await aio.wait_for(done, TIMEOUT)
    b.close()
    return sorted(set(log))
