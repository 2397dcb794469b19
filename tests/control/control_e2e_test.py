"""End to end: serve mt.control.v1 from a live process, query it with mtctl."""

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading

import pytest

import mt_asyncio
import mt_asyncio.control

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
MTCTL = os.path.join(os.environ.get("TEST_SRCDIR", ""), "mt_asyncio", "control", "mtctl")
WAIT = 10


def mtctl(*args, check=True):
    proc = subprocess.run([MTCTL, *args], capture_output=True, text=True, timeout=30)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def socket_path():
    # Bazel's TEST_TMPDIR is too deep for a Unix socket path.
    folder = tempfile.mkdtemp(prefix="mtctl-e2e-", dir="/tmp")
    try:
        yield os.path.join(folder, "control.sock")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(socket_path):
    mt_asyncio.start_runtime(2, blocking_threadpool_size=16)
    server = mt_asyncio.control.serve(socket_path)
    try:
        yield server
    finally:
        server.close()
        mt_asyncio.shutdown_runtime()


def test_info_over_a_unix_socket(served, socket_path):
    assert served.target == "unix://" + socket_path
    assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600

    text = mtctl("--target", served.target, "info").stdout
    assert f"pid {os.getpid()}" in text
    assert "2 target, 2 live" in text
    assert ("free-threaded" if FREE_THREADED else "GIL build") in text

    info = json.loads(mtctl("--target", served.target, "info", "--json").stdout)
    assert info["pid"] == os.getpid()
    assert info["mt_asyncio_version"] == mt_asyncio.__version__
    assert info["interpreter"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    assert info["interpreter"]["free_threaded"] == FREE_THREADED
    assert info["interpreter"]["gil_enabled"] == (not FREE_THREADED)
    runtime = info["runtime"]
    assert runtime["state"] == "RUNTIME_STATE_RUNNING"
    assert runtime["config"]["worker_threads"] == 2
    assert runtime["config"]["blocking_threads_max"] == 16
    assert len(runtime["workers"]) == 2


def test_answers_while_every_worker_is_blocked(served):
    release = threading.Event()
    started = threading.Semaphore(0)

    def hog():
        started.release()
        release.wait(WAIT)

    for _ in range(2):
        mt_asyncio._core.spawn(hog)
    try:
        for _ in range(2):
            assert started.acquire(timeout=WAIT)
        info = json.loads(mtctl("--target", served.target, "--timeout", "5",
                                "info", "--json").stdout)
        assert info["runtime"]["live_workers"] == 2
    finally:
        release.set()


def test_counts_units_and_reports_shutdown(served):
    for _ in range(50):
        mt_asyncio._core.spawn(lambda: None)
    mt_asyncio.shutdown_runtime()
    info = json.loads(mtctl("--target", served.target, "info", "--json").stdout)
    assert info["runtime"]["state"] == "RUNTIME_STATE_STOPPED"
    assert sum(int(w["units_run"]) for w in info["runtime"]["workers"]) == 50


def test_stopped_server_gives_a_clean_error(served):
    served.close()
    served.close()  # Idempotent.
    # The socket is gone with the server: "not found", exit 3.
    proc = mtctl("--target", served.target, "--timeout", "2", "info", check=False)
    assert proc.returncode == 3
    assert proc.stderr.startswith("mtctl: no control socket at ")


_LATE_SERVER = """
import sys, time
import mt_asyncio, mt_asyncio.control
time.sleep(3)  # a process still starting up
mt_asyncio.start_runtime(2)
server = mt_asyncio.control.serve(sys.argv[1])
sys.stdin.read()  # serve until the test closes our stdin
server.close()
"""


def test_connect_timeout_waits_for_a_process_that_is_starting(socket_path):
    child = subprocess.Popen([sys.executable, "-c", _LATE_SERVER, socket_path],
                             stdin=subprocess.PIPE, text=True)
    try:
        # Without it, a socket that is not there yet is "not found" at once.
        early = mtctl("--target", "unix://" + socket_path, "info", check=False)
        assert early.returncode == 3, early.stderr
        assert "no control socket" in early.stderr
        late = mtctl("--target", "unix://" + socket_path, "--connect-timeout", "20",
                     "info", "--json")
        assert json.loads(late.stdout)["pid"] == child.pid
    finally:
        child.stdin.close()
        assert child.wait(timeout=WAIT) == 0


def test_connect_timeout_gives_up(socket_path):
    proc = mtctl("--target", "unix://" + socket_path, "--connect-timeout", "0.3",
                 "info", check=False)
    assert proc.returncode == 3
    assert proc.stderr.startswith("mtctl: no control socket at ")


@pytest.mark.parametrize("args, message", [
    ((), "no command given"),
    (("info",), "no target"),
    (("--target", "unix:///x", "frobnicate"), "unknown command"),
    (("--target", "unix:///x", "--timeout", "soon", "info"), "bad --timeout"),
    (("--target", "unix:///x", "--connect-timeout", "-1", "info"), "bad --connect-timeout"),
    (("--bogus",), "unknown option"),
])
def test_bad_usage_exits_2(args, message):
    env = {k: v for k, v in os.environ.items() if k != "MTCTL_TARGET"}
    proc = subprocess.run([MTCTL, *args], capture_output=True, text=True,
                          timeout=30, env=env)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_help():
    out = mtctl("--help").stdout
    assert out.startswith("usage: mtctl")
    assert "info" in out


def test_serve_rejects_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        mt_asyncio.control.serve(tmp_path / "missing" / "x.sock")
    with pytest.raises(ValueError):
        mt_asyncio.control.serve("/tmp/" + "x" * 200)
    regular = tmp_path / "not-a-socket"
    regular.write_text("keep me")
    if len(str(regular)) <= 107:
        with pytest.raises(FileExistsError):
            mt_asyncio.control.serve(regular)
        assert regular.read_text() == "keep me"


def _secret(path, text, mode=0o600):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def test_tcp_is_served_only_with_tls_and_a_good_token(tmp_path, socket_path):
    serve = mt_asyncio.control.serve
    token = _secret(tmp_path / "admin.token", os.urandom(16).hex() + "\n")
    cert, key = tmp_path / "cert.pem", _secret(tmp_path / "key.pem", "")
    cert.write_text("")
    with pytest.raises(ValueError, match="needs TLS"):
        serve(socket_path, tcp="127.0.0.1:0", token_file=token)
    with pytest.raises(ValueError, match="bearer token"):
        serve(socket_path, tcp="127.0.0.1:0", tls_cert=cert, tls_key=key)
    with pytest.raises(ValueError, match="give tcp="):
        serve(socket_path, token_file=token)
    with pytest.raises(ValueError, match="HOST:PORT"):
        serve(socket_path, tcp="8080", tls_cert=cert, tls_key=key, token_file=token)
    tls = {"tcp": ("127.0.0.1", 0), "tls_cert": cert, "tls_key": key}
    # Tokens: private to this user, long enough, distinct, printable.
    with pytest.raises(PermissionError, match="other users"):
        serve(socket_path, token_file=_secret(tmp_path / "open.token", "b" * 32, 0o644), **tls)
    with pytest.raises(ValueError, match="fewer than 16"):
        serve(socket_path, token_file=_secret(tmp_path / "short.token", "short"), **tls)
    with pytest.raises(ValueError, match="printable"):
        serve(socket_path, token_file=_secret(tmp_path / "sp.token", "c" * 10 + " " + "c" * 10),
              **tls)
    with pytest.raises(ValueError, match="must differ"):
        serve(socket_path, token_file=token, readonly_token_file=token, **tls)
    # The key file is a secret too.
    _secret(tmp_path / "open.key", "", 0o604)
    with pytest.raises(PermissionError, match="TLS key"):
        serve(socket_path, token_file=token, tcp="127.0.0.1:0", tls_cert=cert,
              tls_key=tmp_path / "open.key")
    assert not os.path.exists(socket_path)  # Nothing half-started.


def test_a_live_socket_is_not_taken_over_and_a_stale_one_is(socket_path):
    mt_asyncio.start_runtime(1)
    try:
        with mt_asyncio.control.serve(socket_path):
            with pytest.raises(FileExistsError, match="another process"):
                mt_asyncio.control.serve(socket_path)
        # A socket file nobody listens on (a killed process's) is replaced.
        import socket
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(socket_path)
        stale.close()
        with mt_asyncio.control.serve(socket_path) as server:
            assert json.loads(mtctl("--target", server.target, "-o", "json",
                                    "info").stdout)["pid"] == os.getpid()
    finally:
        mt_asyncio.shutdown_runtime()


def test_default_path_is_in_a_private_folder(monkeypatch):
    folder = tempfile.mkdtemp(prefix="mtxdg-", dir="/tmp")
    try:
        monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
        path = mt_asyncio.control.default_socket_path()
        assert path == os.path.join(folder, "mt_asyncio", f"{os.getpid()}.sock")
        old = os.umask(0)  # The widest umask: the folder must still be 0700.
        try:
            server = mt_asyncio.control.serve()
        finally:
            os.umask(old)
        with server:
            assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            env = dict(os.environ, XDG_RUNTIME_DIR=folder)
            env.pop("MTCTL_TARGET", None)
            out = subprocess.run([MTCTL, "--target", str(os.getpid()), "health"],
                                 capture_output=True, text=True, timeout=30, env=env)
            assert out.returncode == 0 and out.stdout.strip() == "SERVING"
        assert not os.path.exists(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)



def test_metrics_page_with_the_services_own_counters(served):
    """mtctl metrics gives the page mt_asyncio.metrics serves, with the
    control service's counters (calls by method) on it, in both formats;
    the page rendered in the same process shows those counters too.
    (prometheus_client names a counter's family without _total.)"""
    from prometheus_client import parser as prometheus_parser
    from prometheus_client.openmetrics import parser as openmetrics_parser
    from mt_asyncio import metrics

    mtctl("--target", served.target, "info")
    mtctl("--target", served.target, "info")
    text = mtctl("--target", served.target, "metrics").stdout
    families = {f.name: f for f in prometheus_parser.text_string_to_metric_families(text)}
    calls = {s.labels["method"]: s.value
             for s in families["mt_asyncio_control_calls"].samples}
    assert calls["GetInfo"] >= 2 and calls["GetMetrics"] >= 1, calls
    assert families["mt_asyncio_workers_live"].samples[0].value == 2
    assert families["mt_asyncio_control_draining"].samples[0].value == 0

    text = mtctl("--target", served.target, "metrics", "--openmetrics").stdout
    assert text.endswith("# EOF\n")
    parsed = {f.name: f for f in openmetrics_parser.text_string_to_metric_families(text)}
    assert parsed["mt_asyncio_control_calls"].type == "counter"
    answer = json.loads(mtctl("--target", served.target, "-o", "json", "metrics").stdout)
    assert answer["content_type"].startswith("text/plain; version=0.0.4")

    page = metrics.render(openmetrics=False)  # In-process: from the live service.
    local = {f.name: f for f in prometheus_parser.text_string_to_metric_families(page)}
    calls = {s.labels["method"]: s.value
             for s in local["mt_asyncio_control_calls"].samples}
    assert calls["GetMetrics"] >= 3, calls
