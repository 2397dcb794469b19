"""BoringSSL (the native TLS engine) and OpenSSL (CPython's ssl module and
the control plane's gRPC) in one process, whichever loads first and with
every library loaded RTLD_GLOBAL: each answers for its own callers."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "control"))
import certs  # noqa: E402

MTCTL = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mt_asyncio", "control", "mtctl")


@pytest.fixture(scope="module")
def cert_folder():
    folder = tempfile.mkdtemp(prefix="mt-tls-iso-", dir="/tmp")
    why = certs.make(folder)
    if why:
        pytest.skip(why)
    yield folder
    subprocess.run(["rm", "-rf", folder], check=False)


@pytest.mark.parametrize("order", ["ssl-first", "engine-first"])
def test_both_tls_libraries_answer_for_their_own_callers(cert_folder, order):
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "isolation_child.py"), order, cert_folder, MTCTL],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["ssl"].startswith("OpenSSL 3"), said
    assert said["engine"] == "BoringSSL", said
    assert said["native"] == ["TLSObject", "TLSv1.3"], said
    assert said["ssl_module"] == ["SSLObject", "TLSv1.3"], said
    assert said["default_context_verify"] is True
    assert said["control_alpn"] == "h2", said
    assert said["control_version"] in ("TLSv1.2", "TLSv1.3"), said
    assert said["mtctl"] == 0 and said["mtctl_pid_is_ours"], said


_WITHOUT_DEEPBIND = """
import ctypes, importlib.util, os, sys
sys.setdlopenflags(os.RTLD_GLOBAL | os.RTLD_NOW)
import ssl
package = os.path.dirname(importlib.util.find_spec("mt_asyncio").origin)
lib = ctypes.CDLL(os.path.join(package, "libmt_tls_engine.so"),
                  mode=os.RTLD_NOW | os.RTLD_LOCAL | {deep})
class Engine(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("version", ctypes.CFUNCTYPE(ctypes.c_char_p))]
lib.mt_tls_engine_v1.restype = ctypes.POINTER(Engine)
print(lib.mt_tls_engine_v1().contents.version().decode())
"""


@pytest.mark.parametrize("deep,expected", [("0", "OpenSSL"), ("os.RTLD_DEEPBIND", "BoringSSL")])
def test_why_the_loader_binds_deep(deep, expected):
    """The hazard the loader's flags answer: with OpenSSL global first, an
    engine loaded RTLD_LOCAL alone has its BoringSSL calls captured by
    OpenSSL (its version call answers "OpenSSL 3..."); RTLD_DEEPBIND keeps
    them in BoringSSL."""
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_DEEPBIND.format(deep=deep)],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(expected), proc.stdout
