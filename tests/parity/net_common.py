"""Helpers the network scenarios share: servers that clean up after
themselves, recording protocols, bounded waits."""

import contextlib
import contextvars

# Every wait in a network scenario is bounded: a hang fails, it does not
# stall the suite.
TIMEOUT = 10


def port_of(server):
    return server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def serving(aio, handler, host="127.0.0.1", **kwargs):
    """An asyncio.start_server that is closed (and waited for) on exit."""
    server = await aio.start_server(handler, host, 0, **kwargs)
    try:
        yield server
    finally:
        server.close()
        await aio.wait_for(server.wait_closed(), TIMEOUT)


async def echo_handler(reader, writer):
    """Echoes until EOF, then closes."""
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
        await writer.wait_closed()


async def close_writer(aio, writer):
    writer.close()
    await aio.wait_for(writer.wait_closed(), TIMEOUT)


def make_recorder(aio):
    """A Protocol class that logs its callbacks in order and resolves
    `done` at connection_lost."""

    class Recorder(aio.Protocol):
        def __init__(self):
            self.log = []
            self.data = bytearray()
            self.transport = None
            loop = aio.get_running_loop()
            self.made = loop.create_future()
            self.done = loop.create_future()

        def connection_made(self, transport):
            self.transport = transport
            self.log.append("made")
            self.made.set_result(None)

        def data_received(self, data):
            if not self.log or self.log[-1] != "data":
                self.log.append("data")
            self.data += data

        def eof_received(self):
            self.log.append("eof")

        def connection_lost(self, exc):
            self.log.append(("lost", type(exc).__name__ if exc else None))
            if not self.done.done():
                self.done.set_result(None)

    return Recorder


_CERTS = {}


def tls_certs():
    """A test CA and certificates it signed, made once per process with the
    openssl command: {'ca': ca.pem, 'localhost': (cert, key), 'other':
    (cert, key) for other.test, 'untrusted': (cert, key) self-signed}."""
    if _CERTS:
        return _CERTS
    import atexit
    import shutil
    import subprocess
    import tempfile
    d = tempfile.mkdtemp(prefix="mt-tls-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
        "-subj", "/CN=mt_asyncio test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def leaf(name, san):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{d}/{name}.key",
            "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}")
        with open(f"{d}/{name}.ext", "w") as f:
            f.write(f"subjectAltName={san}\n"
                    "basicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=serverAuth\n"
                    "subjectKeyIdentifier=hash\n"
                    "authorityKeyIdentifier=keyid,issuer\n")
        run("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem",
            "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "2",
            "-out", f"{d}/{name}.pem", "-extfile", f"{d}/{name}.ext")
        return f"{d}/{name}.pem", f"{d}/{name}.key"

    _CERTS["ca"] = f"{d}/ca.pem"
    _CERTS["localhost"] = leaf("localhost", "DNS:localhost,IP:127.0.0.1")
    _CERTS["other"] = leaf("other.test", "DNS:other.test")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{d}/untrusted.key", "-out", f"{d}/untrusted.pem",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost")
    _CERTS["untrusted"] = (f"{d}/untrusted.pem", f"{d}/untrusted.key")
    return _CERTS


# Whether server_context() and client_context() make mt_asyncio.tls
# contexts (the TLS scenarios' "_native" variants set it).
NATIVE_TLS = contextvars.ContextVar("NATIVE_TLS", default=False)


def _make_context(*args, **kwargs):
    import ssl
    if NATIVE_TLS.get():
        from mt_asyncio import tls
        return tls.create_default_context(*args, **kwargs)
    return ssl.create_default_context(*args, **kwargs)


def server_context(which="localhost"):
    import ssl
    ctx = _make_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*tls_certs()[which])
    return ctx


def client_context():
    return _make_context(cafile=tls_certs()["ca"])
