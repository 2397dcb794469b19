"""A live service for the control plane's end-to-end suites: a
service_app.py process with the control plane served from its
environment, its event stream, and mtctl aimed at it."""

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "service_app.py")
MTCTL = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mt_asyncio", "control", "mtctl")
WAIT = 30


class Service:
    """A service_app.py process and its event stream."""

    def __init__(self, *args, threads=2, env=None):
        # A short private runtime folder: the socket path must fit 107 bytes.
        self.runtime_dir = tempfile.mkdtemp(prefix="mtsvc-", dir="/tmp")
        self.env = dict(os.environ, MT_ASYNCIO_CONTROL="1",
                        XDG_RUNTIME_DIR=self.runtime_dir,
                        PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **(env or {}))
        self.env.pop("MTCTL_TARGET", None)
        self.proc = subprocess.Popen(
            [sys.executable, APP, "--threads", str(threads), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
            env=self.env)
        self.events = queue.Queue()
        self.stderr = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        ready = self.wait_for("ready")
        self.pid = ready["pid"]
        self.port = ready["port"]
        self.control_tcp_port = ready["control_tcp_port"]
        self.socket = os.path.join(self.runtime_dir, "mt_asyncio", f"{self.pid}.sock")
        deadline = time.monotonic() + WAIT
        while not os.path.exists(self.socket):
            assert time.monotonic() < deadline, "the control socket never appeared"
            time.sleep(0.01)

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.events.put(json.loads(line))
            except ValueError:
                self.events.put({"event": "text", "line": line})
        self.events.put({"event": "eof"})

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def wait_for(self, name, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {name!r} event; stderr: {''.join(self.stderr)[-2000:]}"
            event = self.events.get(timeout=left)
            if event["event"] == name:
                return event
            assert event["event"] != "eof", f"exited before {name!r}: {''.join(self.stderr)}"

    def mtctl(self, *args, check=True, target=True, timeout=WAIT):
        argv = [MTCTL, *(("--target", str(self.pid)) if target else ()), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=self.env)
        if check:
            assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def json(self, *args):
        return json.loads(self.mtctl("-o", "json", *args).stdout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(WAIT)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


def tls_files():
    """A generator for a module-scoped pytest fixture: a folder with the
    test CA, certificates and tokens of certs.make() (the test is skipped
    when they cannot be made)."""
    import pytest

    import certs
    folder = tempfile.mkdtemp(prefix="mtcerts-", dir="/tmp")
    try:
        why = certs.make(folder)
        if why:
            pytest.skip(why)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tls_service(tls_files):
    """A generator for a pytest fixture: a Service that also serves TLS on
    a free port, with the certificate, key and both tokens of tls_files."""
    svc = Service(env={
        "MT_ASYNCIO_CONTROL_TCP": "127.0.0.1:0",
        "MT_ASYNCIO_CONTROL_TLS_CERT": os.path.join(tls_files, "server.pem"),
        "MT_ASYNCIO_CONTROL_TLS_KEY": os.path.join(tls_files, "server.key"),
        "MT_ASYNCIO_CONTROL_TOKEN_FILE": os.path.join(tls_files, "admin.token"),
        "MT_ASYNCIO_CONTROL_READONLY_TOKEN_FILE": os.path.join(tls_files, "readonly.token"),
    })
    try:
        assert svc.control_tcp_port, "the TCP listener did not start: " + "".join(svc.stderr)
        yield svc
    finally:
        svc.close()


def grpcurl_path():
    """grpcurl, if installed (tools/setup.sh builds it when Go is present)."""
    import pwd
    explicit = os.environ.get("MT_GRPCURL")
    if explicit:
        return explicit
    # tools/setup.sh builds it here (HOME may be moved by the test runner).
    home = pwd.getpwuid(os.getuid()).pw_dir
    path = os.path.join(home, ".cache", "mt_asyncio", "bin", "grpcurl")
    return path if os.access(path, os.X_OK) else shutil.which("grpcurl")


def rss_kib(pid):
    """A process's resident memory in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
