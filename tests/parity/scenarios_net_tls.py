"""Scenarios: TLS with the ssl module (a test CA made by the suite), and
again with mt_asyncio.tls contexts (the ``_native`` variants): stdlib's
loop runs those through its sslproto over TLSContext.wrap_bio() (the
engine's records moved by Python), ours on the native engine beside the
socket; both are BoringSSL, and what a user observes must match."""

import os
import socket
import ssl
import tempfile
import threading

from harness import aobserve, scenario, since
from net_common import (NATIVE_TLS, TIMEOUT, client_context, close_writer,
                        echo_handler, make_recorder, port_of, server_context,
                        tls_certs)


class _Native:
    """A scenario run with TLSContext contexts, registered as
    ``<name>_native``."""

    def __init__(self, fn):
        self._fn = fn
        self.__name__ = fn.__name__ + "_native"
        self.__module__ = fn.__module__

    def __getattr__(self, name):  # since()'s marks, set on the original.
        return getattr(self._fn, name)

    async def __call__(self, aio):
        token = NATIVE_TLS.set(True)
        try:
            return await self._fn(aio)
        finally:
            NATIVE_TLS.reset(token)


def both_paths(fn):
    """Registers a scenario as it is and as its native variant."""
    scenario(fn)
    scenario(_Native(fn))
    return fn


@both_paths
async def tls_stream_echo_and_extra_info(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    cctx = client_context()
    r, w = await aio.open_connection("127.0.0.1", port_of(server), ssl=cctx,
                                     server_hostname="localhost")
    w.write(b"over tls")
    got = await aio.wait_for(r.readexactly(8), TIMEOUT)
    info = [w.get_extra_info("sslcontext") is cctx,
            w.get_extra_info("peercert")["subject"],
            w.get_extra_info("cipher")[1],
            isinstance(w.get_extra_info("ssl_object"), ssl.SSLObject),
            w.get_extra_info("peername")[0],
            w.get_extra_info("socket").family == socket.AF_INET]
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [got, info]


@both_paths
async def tls_large_transfer_both_ways(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    r, w = await aio.open_connection("127.0.0.1", port_of(server),
                                     ssl=client_context(),
                                     server_hostname="localhost")
    payload = os.urandom(64 * 1024) * 16  # 1 MiB

    async def send():
        for i in range(0, len(payload), 100_000):
            w.write(payload[i:i + 100_000])
            await w.drain()

    sender = aio.create_task(send())
    got = await aio.wait_for(r.readexactly(len(payload)), 60)
    await sender
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return got == payload


@both_paths
async def tls_verification_failure_untrusted(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context("untrusted"))
    res = await aobserve(aio.wait_for(aio.open_connection(
        "127.0.0.1", port_of(server), ssl=client_context(),
        server_hostname="localhost"), TIMEOUT))
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [res[0], res[1], "certificate verify failed" in res[2]]


@both_paths
async def tls_hostname_mismatch(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    res = await aobserve(aio.wait_for(aio.open_connection(
        "127.0.0.1", port_of(server), ssl=client_context(),
        server_hostname="wrong.test"), TIMEOUT))
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [res[0], res[1], "Hostname mismatch" in res[2]]


@both_paths
async def tls_sni_selects_certificate(aio):
    names = []
    default = server_context()
    other = server_context("other")

    def pick(sslobj, server_name, ctx):
        names.append(server_name)
        if server_name == "other.test":
            sslobj.context = other

    default.sni_callback = pick
    server = await aio.start_server(echo_handler, "127.0.0.1", 0, ssl=default)
    out = []
    for host in ("localhost", "other.test"):
        r, w = await aio.open_connection("127.0.0.1", port_of(server),
                                         ssl=client_context(),
                                         server_hostname=host)
        out.append(w.get_extra_info("peercert")["subject"][0][0][1])
        await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [out, names]


@both_paths
async def tls_alpn_negotiation(aio):
    sctx = server_context()
    sctx.set_alpn_protocols(["h2", "http/1.1"])
    seen = []

    async def handler(reader, writer):
        seen.append(writer.get_extra_info("ssl_object").selected_alpn_protocol())
        await echo_handler(reader, writer)

    server = await aio.start_server(handler, "127.0.0.1", 0, ssl=sctx)
    cctx = client_context()
    cctx.set_alpn_protocols(["http/1.1"])
    r, w = await aio.open_connection("127.0.0.1", port_of(server), ssl=cctx,
                                     server_hostname="localhost")
    chosen = w.get_extra_info("ssl_object").selected_alpn_protocol()
    w.write(b"x")
    await aio.wait_for(r.readexactly(1), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [chosen, seen]


@both_paths
async def tls_protocol_callbacks_and_close_notify(aio):
    loop = aio.get_running_loop()
    Recorder = make_recorder(aio)
    made = []

    def factory():
        p = Recorder()
        made.append(p)
        return p

    server = await loop.create_server(factory, "127.0.0.1", 0, ssl=server_context())
    ct, cp = await loop.create_connection(Recorder, "127.0.0.1", port_of(server),
                                          ssl=client_context(),
                                          server_hostname="localhost")
    ct.write(b"hello tls")
    sp = made[0] if made else None
    for _ in range(1000):
        if made and bytes(made[0].data) == b"hello tls":
            break
        await aio.sleep(0.005)
    sp = made[0]
    write_eof = [ct.can_write_eof()]
    ct.close()  # close_notify, then the server sees EOF.
    await aio.wait_for(cp.done, TIMEOUT)
    await aio.wait_for(sp.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [bytes(sp.data), sp.log, cp.log, write_eof]


def _starttls_handler(sctx, reply_prefix):
    """A server handler: answers one plain line, upgrades the connection
    to TLS with `sctx`, then answers one line over it."""
    async def handler(reader, writer):
        line = await reader.readline()
        writer.write(b"OK " + line)
        await writer.drain()
        await writer.start_tls(sctx)
        secret = await reader.readline()
        writer.write(reply_prefix + secret)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
    return handler


@both_paths
async def tls_start_tls_upgrade(aio):
    handler = _starttls_handler(server_context(), b"secure ")
    server = await aio.start_server(handler, "127.0.0.1", 0)
    r, w = await aio.open_connection("127.0.0.1", port_of(server))
    w.write(b"STARTTLS\n")
    ok = await aio.wait_for(r.readline(), TIMEOUT)
    plain_cipher = w.get_extra_info("cipher")
    await aio.wait_for(w.start_tls(client_context(), server_hostname="localhost"),
                       TIMEOUT)
    w.write(b"pw\n")
    reply = await aio.wait_for(r.readline(), TIMEOUT)
    tls_version = w.get_extra_info("cipher")[1]
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [ok, plain_cipher, reply, tls_version]


@scenario
async def tls_start_tls_argument_errors(aio):
    loop = aio.get_running_loop()
    Recorder = make_recorder(aio)
    server = await loop.create_server(Recorder, "127.0.0.1", 0)
    ct, cp = await loop.create_connection(Recorder, "127.0.0.1", port_of(server))
    bad_ctx = await aobserve(loop.start_tls(ct, cp, "not a context"))

    class NotATransport:
        pass

    bad_transport = await aobserve(loop.start_tls(NotATransport(), cp,
                                                  client_context()))
    ct.close()
    await aio.wait_for(cp.done, TIMEOUT)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [bad_ctx[:2], bad_transport[:2]]


@both_paths
async def tls_handshake_timeout(aio):
    # A plain server that never answers the ClientHello.
    async def silent(reader, writer):
        await reader.read()
        writer.close()

    server = await aio.start_server(silent, "127.0.0.1", 0)
    res = await aobserve(aio.wait_for(aio.open_connection(
        "127.0.0.1", port_of(server), ssl=client_context(),
        server_hostname="localhost", ssl_handshake_timeout=0.2), TIMEOUT))
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [res[0], res[1], res[2].startswith("SSL handshake is taking longer")]


@scenario
async def tls_argument_errors(aio):
    loop = aio.get_running_loop()
    Recorder = make_recorder(aio)
    s = socket.socket()
    try:
        out = [
            await aobserve(loop.create_connection(Recorder, sock=s, ssl=True)),
            await aobserve(loop.create_server(Recorder, "127.0.0.1", 0, ssl=True)),
            await aobserve(loop.create_unix_connection(Recorder, "/x", ssl=True)),
            await aobserve(loop.create_unix_server(Recorder, "/x", ssl=False,
                                                   ssl_handshake_timeout=1)),
        ]
    finally:
        s.close()
    return out


@both_paths
async def tls_over_unix_socket(aio):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tls.sock")
        server = await aio.start_unix_server(echo_handler, path,
                                             ssl=server_context())
        r, w = await aio.open_unix_connection(path, ssl=client_context(),
                                              server_hostname="localhost")
        w.write(b"unix+tls")
        got = await aio.wait_for(r.readexactly(8), TIMEOUT)
        await close_writer(aio, w)
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)
        return got


@both_paths
async def tls_many_clients(aio):
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    port = port_of(server)
    cctx = client_context()

    async def client(i):
        r, w = await aio.open_connection("127.0.0.1", port, ssl=cctx,
                                         server_hostname="localhost")
        ok = True
        for k in range(10):
            msg = bytes([i]) * (50 + k * 100)
            w.write(msg)
            ok = ok and await r.readexactly(len(msg)) == msg
        await close_writer(aio, w)
        return ok

    res = await aio.wait_for(aio.gather(*[client(i) for i in range(12)]), 60)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return res


@scenario
async def tls_client_default_context_with_ssl_true(aio):
    # ssl=True builds a default context (the system's CAs): our test CA is
    # not among them, so verification fails the same way on both loops.
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    res = await aobserve(aio.wait_for(aio.open_connection(
        "127.0.0.1", port_of(server), ssl=True, server_hostname="localhost"),
        TIMEOUT))
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return res[:2]


tls_certs  # noqa: B018 - imported for scenario authors; made on first use.


@since(3, 14, reason="stdlib 3.13's loop.sendfile() over TLS stalls (the "
       "reference side of this comparison); fixed in 3.14")
@both_paths
async def tls_loop_sendfile_falls_back(aio):
    loop = aio.get_running_loop()
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    r, w = await aio.open_connection("127.0.0.1", port_of(server),
                                     ssl=client_context(),
                                     server_hostname="localhost")
    payload = os.urandom(200_000)
    with tempfile.TemporaryFile() as f:
        f.write(payload)
        f.flush()
        no_native = await aobserve(loop.sendfile(w.transport, f, fallback=False))
        sent = await aio.wait_for(loop.sendfile(w.transport, f), TIMEOUT)
    got = await aio.wait_for(r.readexactly(len(payload)), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [no_native[:2], sent, got == payload]


@both_paths
async def tls_start_tls_over_tls(aio):
    """start_tls() on a connection that is already TLS: TLS inside TLS on
    both ends (a proxy's CONNECT tunnel to a TLS origin does this)."""
    handler = _starttls_handler(server_context(), b"inner ")
    server = await aio.start_server(handler, "127.0.0.1", 0, ssl=server_context())
    r, w = await aio.open_connection("127.0.0.1", port_of(server),
                                     ssl=client_context(),
                                     server_hostname="localhost")
    w.write(b"STARTTLS\n")
    ok = await aio.wait_for(r.readline(), TIMEOUT)
    outer = w.get_extra_info("ssl_object")
    await aio.wait_for(w.start_tls(client_context(), server_hostname="localhost"),
                       TIMEOUT)
    inner = w.get_extra_info("ssl_object")
    w.write(b"pw\n")
    reply = await aio.wait_for(r.readline(), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return [ok, reply, outer is not inner, inner.version()]


@both_paths
async def tls_writes_keep_call_order_across_threads(aio):
    """A plain thread writes to the TLS transport while the task that made
    the connection waits for it; then that task writes: the peer gets the
    thread's bytes first, as the calls were made. (Ours once ran the
    task's write at once and the thread's later: the task's step may run
    on the connection's behalf, the thread's call waited for the
    connection's turn.)"""
    server = await aio.start_server(echo_handler, "127.0.0.1", 0,
                                    ssl=server_context())
    r, w = await aio.open_connection("127.0.0.1", port_of(server),
                                     ssl=client_context(),
                                     server_hostname="localhost")
    expected = bytearray()
    for i in range(20):
        first, second = b"thread%02d." % i, b"task%02d." % i
        writer = threading.Thread(target=w.write, args=(first,))
        writer.start()
        writer.join(TIMEOUT)  # Blocks this step, as a sync call would.
        w.write(second)
        expected += first + second
    got = await aio.wait_for(r.readexactly(len(expected)), TIMEOUT)
    await close_writer(aio, w)
    server.close()
    await aio.wait_for(server.wait_closed(), TIMEOUT)
    return got == expected or bytes(got)
