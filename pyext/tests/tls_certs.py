"""Certificates for the TLS tests, made with the openssl command once per
process: a CA, leaves it signed (for localhost, another name, a client),
an expired leaf, a self-signed one, and a key under a password."""

import atexit
import functools
import os
import shutil
import subprocess
import tempfile

PASSWORD = "correct horse"

_CA_CONFIG = """\
[ca]
default_ca = test_ca
[test_ca]
database = {d}/index.txt
new_certs_dir = {d}
serial = {d}/serial
default_md = sha256
policy = any_name
copy_extensions = copy
[any_name]
commonName = supplied
"""


def _run(*args, cwd=None):
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


@functools.cache
def certs():
    d = tempfile.mkdtemp(prefix="mt-tls-test-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem",
         "-subj", "/CN=mt_asyncio TLS test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    with open(f"{d}/ca.cnf", "w") as f:
        f.write(_CA_CONFIG.format(d=d))
    open(f"{d}/index.txt", "w").close()
    with open(f"{d}/serial", "w") as f:
        f.write("1000\n")

    def leaf(name, san, usage="serverAuth", *, expired=False, password=None):
        key_args = ["-nodes"] if password is None else ["-passout", f"pass:{password}"]
        _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", *key_args,
             "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr", "-subj", f"/CN={name}",
             "-addext", f"subjectAltName={san}",
             "-addext", "basicConstraints=CA:FALSE",
             "-addext", f"extendedKeyUsage={usage}")
        dates = (["-startdate", "20200101000000Z", "-enddate", "20200102000000Z"]
                 if expired else ["-days", "2"])
        _run("ca", "-batch", "-config", f"{d}/ca.cnf", "-cert", f"{d}/ca.pem",
             "-keyfile", f"{d}/ca.key", "-in", f"{d}/{name}.csr",
             "-out", f"{d}/{name}.pem", "-notext", *dates)
        return f"{d}/{name}.pem", f"{d}/{name}.key"

    out = {"ca": f"{d}/ca.pem", "dir": d}
    out["localhost"] = leaf("localhost", "DNS:localhost,IP:127.0.0.1")
    out["other"] = leaf("other.test", "DNS:other.test")
    out["client"] = leaf("client.test", "DNS:client.test", "clientAuth")
    out["expired"] = leaf("expired", "DNS:localhost,IP:127.0.0.1", expired=True)
    out["locked"] = leaf("locked", "DNS:localhost", password=PASSWORD)
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "2", "-keyout", f"{d}/untrusted.key",
         "-out", f"{d}/untrusted.pem", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    out["untrusted"] = (f"{d}/untrusted.pem", f"{d}/untrusted.key")
    return out


def cleanup():
    if certs.cache_info().currsize:
        d = certs()["dir"]
        for name in os.listdir(d):
            os.remove(os.path.join(d, name))
        os.rmdir(d)
