"""The TLS workloads' certificate: one self-signed ECDSA P-256 certificate
for localhost, made with the openssl command once per process (the key
type most servers use today; its signature costs a handshake less than
RSA's)."""

import atexit
import functools
import os
import ssl
import shutil
import subprocess
import tempfile


@functools.cache
def cert_and_key():
    d = tempfile.mkdtemp(prefix="mt-bench-tls-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                    "-keyout", os.path.join(d, "k.pem"), "-out", os.path.join(d, "c.pem"),
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    return os.path.join(d, "c.pem"), os.path.join(d, "k.pem")


def contexts(native):
    """(server context, client context): mt_asyncio.tls's when `native`,
    else the ssl module's. The client trusts the server's certificate."""
    make = ssl.create_default_context
    if native:
        from mt_asyncio import tls
        make = tls.create_default_context
    cert, key = cert_and_key()
    server = make(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, make(cafile=cert)


def native_available():
    """Whether this interpreter's mt_asyncio has the native engine (PyPI's
    mt-asyncio 0.3.0a1, sharing the import name, has not)."""
    try:
        from mt_asyncio import tls
        tls.engine_version()
        return True
    except (ImportError, AttributeError, OSError):
        return False
