"""Native TLS (mt_asyncio.tls): interop with the ssl module and the openssl
command both ways, TLS 1.2 and 1.3, ALPN, mutual TLS, SNI, the ssl
module's errors for bad certificates, timeouts, close_notify, settings
mirrored (and refused where BoringSSL has no equivalent), install(), key
logs, resumption, and many handshakes in parallel. Every wait is bounded."""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

import mt_asyncio.asyncio as asyncio
from mt_asyncio import tls

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tls_certs
import tls_certs  # noqa: E402

WAIT = 20
HAVE_OPENSSL = shutil.which("openssl") is not None


@pytest.fixture(scope="module")
def certs():
    yield tls_certs.certs()
    tls_certs.cleanup()


def server_ctx(certs, native=True, which="localhost"):
    make = tls.create_default_context if native else ssl.create_default_context
    ctx = make(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certs[which])
    return ctx


def client_ctx(certs, native=True):
    make = tls.create_default_context if native else ssl.create_default_context
    return make(cafile=certs["ca"])


def run(coro, threads=2):
    return asyncio.run(asyncio.wait_for(coro, WAIT), threads=threads)


async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def serve(ctx, handler=echo):
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ctx)
    return server, server.sockets[0].getsockname()[1]


async def stop(server):
    server.close()
    await asyncio.wait_for(server.wait_closed(), WAIT)


def test_engine_is_boringssl_and_ssl_stays_openssl():
    assert tls.engine_version() == "BoringSSL"
    assert ssl.OPENSSL_VERSION.startswith("OpenSSL")
    assert "BoringSSL" not in ssl.OPENSSL_VERSION


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
@pytest.mark.parametrize("native_server,native_client",
                         [(True, True), (True, False), (False, True)])
def test_echo_between_the_engine_and_the_ssl_module(certs, version, native_server,
                                                    native_client):
    async def main():
        sctx = server_ctx(certs, native_server)
        sctx.maximum_version = getattr(ssl.TLSVersion, version)
        server, port = await serve(sctx)
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs, native_client),
                                             server_hostname="localhost")
        obj = w.get_extra_info("ssl_object")
        assert obj.version() == version.replace("_", ".")
        assert w.get_extra_info("peercert")["subject"] == ((("commonName", "localhost"),),)
        assert w.get_extra_info("cipher")[1] == version.replace("_", ".")
        assert isinstance(w.get_extra_info("sslcontext"), ssl.SSLContext)
        for size in (1, 1000, 16385, 300_000):
            payload = os.urandom(size)
            w.write(payload)
            assert await r.readexactly(size) == payload
        w.close()
        await w.wait_closed()
        await stop(server)
        return type(obj).__name__

    assert run(main()) == ("TLSObject" if native_client else "SSLObject")


def _blocking_ssl_server(ctx, handle):
    """An ssl-module server on a thread: one connection, `handle(conn)`."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    port = listener.getsockname()[1]
    errors = []

    def body():
        try:
            raw, _ = listener.accept()
            raw.settimeout(WAIT)
            with ctx.wrap_socket(raw, server_side=True) as conn:
                handle(conn)
        except Exception as exc:  # noqa: BLE001 - reported by the test.
            errors.append(exc)
        finally:
            listener.close()

    thread = threading.Thread(target=body)
    thread.start()
    return port, thread, errors


def test_native_client_against_a_blocking_ssl_module_server(certs):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certs["localhost"])
    ctx.set_alpn_protocols(["h2", "http/1.1"])

    def handle(conn):
        assert conn.selected_alpn_protocol() == "http/1.1"
        conn.sendall(conn.recv(100).upper())

    port, thread, errors = _blocking_ssl_server(ctx, handle)

    async def main():
        cctx = client_ctx(certs)
        cctx.set_alpn_protocols(["http/1.1"])
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                             server_hostname="localhost")
        assert w.get_extra_info("ssl_object").selected_alpn_protocol() == "http/1.1"
        w.write(b"hello")
        assert await r.readexactly(5) == b"HELLO"
        w.close()
        await w.wait_closed()

    run(main())
    thread.join(WAIT)
    assert not errors


@pytest.mark.skipif(not HAVE_OPENSSL, reason="no openssl command")
@pytest.mark.parametrize("flag", ["-tls1_2", "-tls1_3"])
def test_openssl_s_client_against_a_native_server(certs, flag):
    async def main():
        ctx = server_ctx(certs)
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        server, port = await serve(ctx)
        proc = await asyncio.create_subprocess_exec(
            "openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
            "-CAfile", certs["ca"], "-verify_return_error", "-alpn", "h2", flag, "-ign_eof",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        # s_client sends stdin once connected; the server echoes; closing
        # stdin and then the server's close_notify end it.
        proc.stdin.write(b"ping from s_client\n")
        await proc.stdin.drain()
        out = b""
        while b"ping from s_client" not in out.partition(b"Verify return code")[2]:
            chunk = await proc.stdout.read(4096)
            if not chunk:
                break
            out += chunk
        proc.stdin.close()
        await stop_all_clients(server)
        out += await proc.stdout.read()
        await proc.wait()
        await stop(server)
        return out.decode(errors="replace")

    out = run(main())
    assert "Verify return code: 0 (ok)" in out, out
    assert "ALPN protocol: h2" in out, out
    assert ("TLSv1.3" if flag == "-tls1_3" else "TLSv1.2") in out, out
    # The echo, after the handshake's summary.
    assert "ping from s_client" in out.partition("Verify return code")[2], out


async def stop_all_clients(server):
    server.close_clients()


async def _connect_when_listening(port, ctx):
    """open_connection() to an openssl s_server started a moment ago."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                 server_hostname="localhost")
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.skipif(not HAVE_OPENSSL, reason="no openssl command")
@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_native_client_against_openssl_s_server(certs, version):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cert, key = certs["localhost"]
    flag = "-tls1_3" if version == "TLSv1_3" else "-tls1_2"
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", str(port), "-cert", cert, "-key", key, "-rev",
         "-alpn", "h2", flag, "-naccept", "1"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async def main():
            ctx = client_ctx(certs)
            ctx.set_alpn_protocols(["h2"])
            r, w = await _connect_when_listening(port, ctx)
            obj = w.get_extra_info("ssl_object")
            assert obj.version() == version.replace("_", ".")
            assert obj.selected_alpn_protocol() == "h2"
            w.write(b"drawer\n")
            line = await r.readline()
            w.close()
            await w.wait_closed()
            return line

        assert run(main()) == b"reward\n"
    finally:
        server.kill()
        server.communicate()


def test_mutual_tls(certs):
    async def main():
        sctx = server_ctx(certs)
        sctx.verify_mode = ssl.CERT_REQUIRED
        sctx.load_verify_locations(certs["ca"])
        seen = []

        async def who(reader, writer):
            seen.append(writer.get_extra_info("peercert"))
            writer.write(b"ok")
            await writer.drain()
            writer.close()

        server, port = await serve(sctx, who)
        cctx = client_ctx(certs)
        cctx.load_cert_chain(*certs["client"])
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                             server_hostname="localhost")
        assert await r.read() == b"ok"
        w.close()
        # Without a certificate the server refuses the handshake.
        with pytest.raises((ssl.SSLError, ConnectionError)):
            r2, w2 = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                                   server_hostname="localhost")
            # TLS 1.3: the refusal comes with the first read.
            await r2.read()
            raise ConnectionResetError("closed")
        await stop(server)
        return seen

    seen = run(main())
    assert seen[0]["subject"] == ((("commonName", "client.test"),),)


def test_sni_callback_chooses_between_two_certificates(certs):
    async def main():
        default = server_ctx(certs, which="localhost")
        other = server_ctx(certs, which="other")
        names = []

        def choose(ssl_object, server_name, context):
            names.append(server_name)
            assert context is default
            if server_name == "other.test":
                ssl_object.context = other

        default.sni_callback = choose
        server, port = await serve(default)
        subjects = []
        for name in ("localhost", "other.test"):
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                                 server_hostname=name)
            subjects.append(w.get_extra_info("peercert")["subject"][0][0][1])
            w.close()
            await w.wait_closed()
        await stop(server)
        return names, subjects

    names, subjects = run(main())
    assert names == ["localhost", "other.test"]
    assert subjects == ["localhost", "other.test"]


async def _verify_error(certs, which, hostname, native):
    server, port = await serve(server_ctx(certs, which=which))
    try:
        with pytest.raises(ssl.SSLCertVerificationError) as info:
            await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs, native),
                                          server_hostname=hostname)
        return info.value
    finally:
        await stop(server)


@pytest.mark.parametrize("which,hostname,code", [
    ("expired", "localhost", 10),
    ("other", "localhost", 62),
    ("untrusted", "localhost", 18),
])
def test_bad_certificates_fail_as_the_ssl_module_says(certs, which, hostname, code):
    ours = run(_verify_error(certs, which, hostname, native=True))
    theirs = run(_verify_error(certs, which, hostname, native=False))
    assert ours.verify_code == theirs.verify_code == code
    assert ours.verify_message == theirs.verify_message
    assert ours.reason == theirs.reason == "CERTIFICATE_VERIFY_FAILED"
    assert ours.library == theirs.library == "SSL"


def test_handshake_timeout_aborts(certs):
    async def main():
        silent = socket.create_server(("127.0.0.1", 0))
        port = silent.getsockname()[1]
        try:
            started = time.monotonic()
            with pytest.raises(ConnectionAbortedError, match="SSL handshake is taking longer"):
                await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                              server_hostname="localhost",
                                              ssl_handshake_timeout=0.3)
            return time.monotonic() - started
        finally:
            silent.close()

    assert run(main()) < 5


def test_peer_close_notify_is_eof(certs):
    async def main():
        async def say_bye(reader, writer):
            writer.write(b"bye")
            await writer.drain()
            writer.close()

        server, port = await serve(server_ctx(certs), say_bye)
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                             server_hostname="localhost")
        data = await r.read()
        assert r.at_eof()
        w.close()
        await w.wait_closed()
        await stop(server)
        return data

    assert run(main()) == b"bye"


def test_buffered_protocol_and_pause_reading(certs):
    class Collect(asyncio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(100)  # Smaller than what comes.
            self.got = bytearray()
            self.done = asyncio.get_running_loop().create_future()

        def connection_made(self, transport):
            self.transport = transport
            # Paused before anything can arrive: paused only once
            # create_connection() returned, the server's 200 KB could
            # all be in by then (workers read the connection while the
            # task waits to resume; seen once in CI).
            transport.pause_reading()

        def get_buffer(self, sizehint):
            return self.buf

        def buffer_updated(self, n):
            self.got += self.buf[:n]
            if len(self.got) == 200_000 and not self.done.done():
                self.done.set_result(bytes(self.got))

        def connection_lost(self, exc):
            pass

    async def main():
        payload = os.urandom(200_000)

        async def send(reader, writer):
            writer.write(payload)
            await writer.drain()
            await reader.read()
            writer.close()

        server, port = await serve(server_ctx(certs), send)
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_connection(
            Collect, "127.0.0.1", port, ssl=client_ctx(certs), server_hostname="localhost")
        assert not transport.is_reading()
        await asyncio.sleep(0.2)
        assert len(proto.got) < len(payload)
        transport.resume_reading()
        got = await proto.done
        assert not transport.can_write_eof()
        with pytest.raises(NotImplementedError):
            transport.write_eof()
        transport.close()
        await stop(server)
        return got == payload

    assert run(main())


def test_settings_are_mirrored_and_unsupported_ones_refused(certs):
    ctx = tls.TLSContext(ssl.PROTOCOL_TLS_CLIENT)
    assert isinstance(ctx, ssl.SSLContext)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    ctx.set_alpn_protocols(["h2"])
    ctx.set_ciphers("ECDHE+AESGCM")
    ctx.set_ecdh_curve("prime256v1")
    ctx.load_verify_locations(certs["ca"])
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.get_ca_certs()[0]["subject"] == ((("commonName", "mt_asyncio TLS test CA"),),)
    with pytest.raises(ValueError, match="SSLv3"):
        ctx.minimum_version = ssl.TLSVersion.SSLv3
    with pytest.raises(NotImplementedError, match="load_dh_params"):
        ctx.load_dh_params("/nonexistent")
    with pytest.raises(ValueError, match="set_ecdh_curve"):
        ctx.set_ecdh_curve("brainpoolP256r1")
    with pytest.raises(ValueError, match="server socket with a PROTOCOL_TLS_CLIENT"):
        ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_side=True)
    # The ssl module still takes it, for its own sockets.
    plain = ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="localhost")
    assert isinstance(plain, ssl.SSLObject)


def test_encrypted_key_with_a_password(certs):
    cert, key = certs["locked"]
    for password in (tls_certs.PASSWORD, tls_certs.PASSWORD.encode(),
                     lambda: tls_certs.PASSWORD):
        ctx = tls.TLSContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key, password)
    with pytest.raises(ssl.SSLError):
        tls.TLSContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, "wrong")


def test_install_makes_ssl_contexts_native():
    assert not tls.installed()
    tls.install()
    try:
        made = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        default = ssl.create_default_context()
        assert type(made) is tls.TLSContext
        assert type(default) is tls.TLSContext
        assert isinstance(made, ssl.SSLContext)
        assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
    finally:
        tls.uninstall()
    assert not tls.installed()
    assert type(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)) is ssl.SSLContext
    assert type(ssl.create_default_context()) is ssl.SSLContext


def test_key_log_and_resumption(certs, tmp_path):
    log = tmp_path / "keys.log"

    async def main():
        server, port = await serve(server_ctx(certs))
        cctx = client_ctx(certs)
        cctx.keylog_filename = str(log)
        reused = []
        for _ in range(3):
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                                 server_hostname="localhost")
            w.write(b"x")
            await r.readexactly(1)  # The tickets came before the echo.
            reused.append(w.get_extra_info("ssl_object").session_reused)
            w.close()
            await w.wait_closed()
        await stop(server)
        return reused

    assert run(main()) == [False, True, True]
    lines = log.read_text().splitlines()
    assert lines[0].startswith("#")
    assert any(line.startswith("CLIENT_TRAFFIC_SECRET_0 ") for line in lines)


def test_many_handshakes_in_parallel_on_four_workers(certs):
    async def main():
        server, port = await serve(server_ctx(certs))
        cctx = client_ctx(certs)

        async def one(i):
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                                 server_hostname="localhost")
            msg = f"connection {i}".encode()
            w.write(msg)
            got = await r.readexactly(len(msg))
            w.close()
            await w.wait_closed()
            return got == msg

        results = await asyncio.gather(*(one(i) for i in range(200)))
        await stop(server)
        return results

    assert all(run(main(), threads=4))


def test_write_from_other_threads(certs):
    async def main():
        server, port = await serve(server_ctx(certs))
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                             server_hostname="localhost")
        transport = w.transport
        chunks = [bytes([65 + t]) * 1000 for t in range(4)]

        def writer(chunk):
            for _ in range(50):
                transport.write(chunk)

        threads = [threading.Thread(target=writer, args=(c,)) for c in chunks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        data = await r.readexactly(4 * 50 * 1000)
        w.close()
        await w.wait_closed()
        await stop(server)
        return data

    data = run(main(), threads=4)
    for t in range(4):
        assert data.count(bytes([65 + t])) == 50 * 1000


def test_start_tls_with_a_tls_context_upgrades(certs):
    async def main():
        upgraded = asyncio.Event()

        async def handler(reader, writer):
            await writer.start_tls(server_ctx(certs))
            upgraded.set()
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        await w.start_tls(client_ctx(certs), server_hostname="localhost")
        w.write(b"hello")
        got = await r.readexactly(5)
        # The same transport, now on the engine (no sslproto layer).
        native = type(w.get_extra_info("ssl_object")) is tls.TLSObject
        w.close()
        await stop(server)
        return got, native

    assert run(main()) == (b"hello", True)


def test_alpn_protocol_extra_and_trust_from_a_hashed_folder(certs, tmp_path):
    # capath: a folder of CA certificates named by their subject hashes.
    shutil.copy(certs["ca"], tmp_path / "ca.pem")
    subprocess.run(["openssl", "rehash", str(tmp_path)], check=True, capture_output=True)

    async def main():
        sctx = server_ctx(certs)
        sctx.set_alpn_protocols(["h2"])
        server, port = await serve(sctx)
        cctx = tls.TLSContext(ssl.PROTOCOL_TLS_CLIENT)
        cctx.load_verify_locations(capath=str(tmp_path))
        cctx.set_alpn_protocols(["h2", "http/1.1"])
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                             server_hostname="localhost")
        alpn = w.get_extra_info("alpn_protocol")
        w.close()
        await w.wait_closed()
        await stop(server)
        return alpn

    assert run(main()) == "h2"


def test_shutdown_timeout_when_the_peer_never_answers_close_notify(certs):
    """A peer that keeps the connection open and never sends close_notify:
    close() gives up after ssl_shutdown_timeout, as sslproto does."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*certs["localhost"])
    released = threading.Event()

    def handle(conn):
        released.wait(WAIT)  # Neither reads nor closes meanwhile.

    port, thread, errors = _blocking_ssl_server(ctx, handle)

    class Lost(asyncio.Protocol):
        def __init__(self):
            self.lost = asyncio.get_running_loop().create_future()

        def connection_lost(self, exc):
            self.lost.set_result(exc)

    async def main():
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_connection(
            Lost, "127.0.0.1", port, ssl=client_ctx(certs), server_hostname="localhost",
            ssl_shutdown_timeout=0.3)
        started = time.monotonic()
        transport.close()
        exc = await proto.lost
        return exc, time.monotonic() - started

    try:
        exc, took = run(main())
    finally:
        released.set()
        thread.join(WAIT)
    assert isinstance(exc, TimeoutError) and "SSL shutdown timed out" in str(exc)
    assert 0.2 < took < 5


@pytest.mark.skipif(not HAVE_OPENSSL, reason="no openssl command")
def test_renegotiation_is_refused(certs):
    """A TLS 1.2 server asking to renegotiate (openssl s_server's "R"
    command) ends the connection: the engine never renegotiates."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cert, key = certs["localhost"]
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", str(port), "-cert", cert, "-key", key,
         "-tls1_2", "-naccept", "1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async def main():
            r, w = await _connect_when_listening(port, client_ctx(certs))
            server.stdin.write(b"R\n")  # s_server: renegotiate.
            server.stdin.flush()
            try:
                got = await asyncio.wait_for(r.read(100), WAIT)
            except (ssl.SSLError, ConnectionError) as exc:
                got = exc
            w.close()
            return got

        got = run(main())
        # Refused: an error, or the connection's end (never data).
        assert isinstance(got, (ssl.SSLError, ConnectionError)) or got == b"", got
    finally:
        server.kill()
        server.communicate()


def _pump(a_out, b_in):
    data = a_out.read()
    if data:
        b_in.write(data)


@pytest.mark.parametrize("server_native", [True, False])
def test_wrap_bio_speaks_the_ssl_object_interface(certs, server_native):
    sctx = server_ctx(certs, server_native)
    cctx = client_ctx(certs)
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = cctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = sctx.wrap_bio(s_in, s_out, server_side=True)
    assert isinstance(client, tls.TLSBIOObject) and isinstance(client, ssl.SSLObject)
    assert isinstance(server, tls.TLSBIOObject) == server_native
    with pytest.raises(ValueError, match="check_hostname requires server_hostname"):
        cctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
    with pytest.raises(ValueError):
        client.getpeercert()  # Handshake not done yet.
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, obj in (("client", client), ("server", server)):
            if done[name]:
                continue
            try:
                obj.do_handshake()
                done[name] = True
            except ssl.SSLWantReadError:
                pass
        _pump(c_out, s_in)
        _pump(s_out, c_in)
        if all(done.values()):
            break
    assert all(done.values())
    assert client.version() == "TLSv1.3"
    assert client.getpeercert()["subject"] == ((("commonName", "localhost"),),)
    assert client.server_hostname == "localhost" and not client.server_side
    with pytest.raises(ssl.SSLWantReadError):
        client.read(10)
    assert client.write(b"over bios") == 9
    _pump(c_out, s_in)
    assert server.read(100) == b"over bios"
    server.write(b"reply!")
    _pump(s_out, c_in)
    buf = bytearray(16)
    assert client.read(16, buf) == 6 and bytes(buf[:6]) == b"reply!"
    with pytest.raises(NotImplementedError):
        client.verify_client_post_handshake()
    # close_notify both ways.
    with pytest.raises(ssl.SSLWantReadError):
        client.unwrap()
    _pump(c_out, s_in)
    assert server.read(10) == b""  # The peer's close_notify.
    server.unwrap()
    _pump(s_out, c_in)
    client.unwrap()
    # A peer that is gone before the handshake ends.
    lone = cctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="localhost")
    lone._incoming.write_eof()
    with pytest.raises(ssl.SSLEOFError):
        lone.do_handshake()


def test_stdlib_loop_runs_a_tls_context_through_its_bio(certs):
    """stdlib asyncio (sslproto) with TLSContexts: wrap_bio() objects on
    BoringSSL, both ends."""
    import asyncio as stdlib

    async def main():
        server = await stdlib.start_server(echo, "127.0.0.1", 0, ssl=server_ctx(certs))
        port = server.sockets[0].getsockname()[1]
        r, w = await stdlib.open_connection("127.0.0.1", port, ssl=client_ctx(certs),
                                            server_hostname="localhost")
        w.write(b"stdlib")
        got = await stdlib.wait_for(r.readexactly(6), WAIT)
        kind = type(w.get_extra_info("ssl_object")).__name__
        w.close()
        await w.wait_closed()
        server.close()
        await server.wait_closed()
        return got, kind

    assert stdlib.run(main()) == (b"stdlib", "TLSBIOObject")


def test_finished_tls_connections_need_no_cyclic_collector(certs):
    """A closed TLS connection's transport and ssl_object are freed by
    their reference counts, as a plain connection's are, not left in a
    cycle for the collector (the ssl_object refers to its transport
    weakly): memory stays flat without the cyclic collector. Whatever the
    collector finds afterwards holds no transport of these 20 connections
    (it found all 40 ends when the reference was strong)."""
    import collections
    import gc

    async def main():
        server, port = await serve(server_ctx(certs))
        cctx = client_ctx(certs)
        for _ in range(20):
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                                 server_hostname="localhost")
            w.write(b"x")
            await r.readexactly(1)
            assert w.get_extra_info("ssl_object").version() == "TLSv1.3"
            w.close()
            await w.wait_closed()
        await stop(server)

    gc.collect()
    gc.disable()
    try:
        run(main())
        time.sleep(0.2)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kinds = collections.Counter(type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    # A few may sit in other cycles that happen to be there (a handler's
    # error at close keeps its frame; three under ASan once), never one per
    # connection end (40).
    assert kinds["SocketTransport"] < 10, kinds
    assert kinds["TLSObject"] < 10, kinds
