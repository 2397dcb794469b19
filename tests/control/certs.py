"""Test certificates for the control plane's TLS listener, made with the
openssl command: a CA, a server certificate for 127.0.0.1 and localhost,
a client certificate (CN "ops"), and two bearer tokens (mode 0600)."""

import os
import shutil
import subprocess


def make(folder):
    """Writes ca.pem, server.pem/.key, client.pem/.key, admin.token and
    readonly.token into `folder`; returns None, or why it could not."""
    if shutil.which("openssl") is None:
        return "the openssl command is not installed"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    steps = [
        ["req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
         "-subj", "/CN=mt_asyncio test CA"],
        ["req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "san.ext"],
        ["req", *ec, "-keyout", "client.key", "-out", "client.csr", "-subj", "/CN=ops"],
        ["x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "client.pem", "-days", "2"],
    ]
    with open(os.path.join(folder, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for step in steps:
        proc = subprocess.run(["openssl", *step], cwd=folder, capture_output=True, text=True,
                              timeout=60)
        if proc.returncode != 0:
            return f"openssl {step[0]} failed: {proc.stderr[-500:]}"
    for name in ("admin.token", "readonly.token"):
        path = os.path.join(folder, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(24).hex() + "\n")
    for name in ("ca.key", "server.key", "client.key"):
        os.chmod(os.path.join(folder, name), 0o600)
    return None
