"""One process with both TLS libraries, every shared object loaded with
RTLD_GLOBAL: run by isolation_test.py as

    isolation_child.py ssl-first|engine-first CERT_FOLDER MTCTL

ssl-first imports ssl (CPython's _ssl, OpenSSL) before mt_asyncio loads
its engine; engine-first loads the engine's library (BoringSSL) first, with
the flags mt_asyncio's loader uses, and imports ssl after. Then: native TLS
on the loop, the ssl module's TLS on the loop and on plain sockets, and the
control plane's gRPC TLS listener (OpenSSL, in this process) answering
mtctl and an ssl-module handshake. Prints one JSON line of what each
library said it was."""

import ctypes
import importlib.util
import json
import os
import socket
import subprocess
import sys

order, folder, mtctl = sys.argv[1:4]
sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)

if order == "engine-first":
    package = os.path.dirname(importlib.util.find_spec("mt_asyncio").origin)
    ctypes.CDLL(os.path.join(package, "libmt_tls_engine.so"),
                mode=os.RTLD_NOW | os.RTLD_LOCAL | os.RTLD_DEEPBIND)
    assert "ssl" not in sys.modules and "_ssl" not in sys.modules
import ssl  # noqa: E402

import mt_asyncio  # noqa: E402
import mt_asyncio.asyncio as asyncio  # noqa: E402
import mt_asyncio.control  # noqa: E402
from mt_asyncio import tls  # noqa: E402

ca = os.path.join(folder, "ca.pem")
cert = os.path.join(folder, "server.pem")
key = os.path.join(folder, "server.key")
said = {"order": order, "ssl": ssl.OPENSSL_VERSION, "engine": tls.engine_version()}


async def echo(reader, writer):
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def round_trip(native):
    purpose = ssl.Purpose.CLIENT_AUTH
    make = tls.create_default_context if native else ssl.create_default_context
    server_ctx = make(purpose)
    server_ctx.load_cert_chain(cert, key)
    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = make(cafile=ca)
    # The control plane's test CA has no keyUsage, which OpenSSL's strict
    # mode (the default since 3.13) refuses.
    client_ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                         server_hostname="localhost")
    w.write(b"ping")
    assert await r.readexactly(4) == b"ping"
    obj = w.get_extra_info("ssl_object")
    answer = [type(obj).__name__, obj.version()]
    w.close()
    await w.wait_closed()
    server.close()
    await server.wait_closed()
    return answer


async def main():
    said["native"] = await asyncio.wait_for(round_trip(True), 20)
    said["ssl_module"] = await asyncio.wait_for(round_trip(False), 20)

asyncio.run(main(), threads=2)

# The ssl module on a plain blocking socket, against the loop-free world.
ctx = ssl.create_default_context(cafile=ca)
said["default_context_verify"] = ctx.verify_mode == ssl.CERT_REQUIRED

# The control plane's gRPC listener over TLS, in this process (on the
# runtime asyncio.run started).
server = mt_asyncio.control.serve(
    os.path.join(folder, "control.sock"), tcp="127.0.0.1:0", tls_cert=cert, tls_key=key,
    token_file=os.path.join(folder, "admin.token"))
try:
    grpc_ctx = ssl.create_default_context(cafile=ca)
    grpc_ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    grpc_ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", server.tcp_port), timeout=20) as raw:
        with grpc_ctx.wrap_socket(raw, server_hostname="localhost") as conn:
            said["control_alpn"] = conn.selected_alpn_protocol()
            said["control_version"] = conn.version()
    out = subprocess.run([mtctl, "--target", f"127.0.0.1:{server.tcp_port}", "--tls-ca", ca,
                          "--token-file", os.path.join(folder, "admin.token"), "-o", "json",
                          "info"], capture_output=True, text=True, timeout=30)
    said["mtctl"] = out.returncode
    said["mtctl_pid_is_ours"] = out.returncode == 0 and json.loads(out.stdout)["pid"] == os.getpid()
    if out.returncode:
        said["mtctl_stderr"] = out.stderr
finally:
    server.close()

print(json.dumps(said))
