"""The servers users already run, started from the commands
docs/servers.md gives, serving on mt_asyncio's parallel loop: uvicorn
(--loop mt_asyncio.uvicorn:loop_factory), hypercorn (python -m
mt_asyncio), aiohttp's web.run_app (python -m mt_asyncio) and gunicorn
with uvicorn's worker (-k mt_asyncio.uvicorn.UvicornWorker). Each one:
every request answered, on our loop (and, in one process, on more than one
thread on a free-threaded build), then SIGTERM stops it gracefully (its
application's shutdown ran, exit status 0)."""

import concurrent.futures
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time

import pytest

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
WAIT = 60  # Every wait here is bounded.
HERE = os.path.dirname(os.path.abspath(__file__))
OUR_LOOP = "mt_asyncio.base_events.EventLoop"
REQUESTS = 48
CPU = 200_000  # Iterations per request: a few ms of Python.

for module in ("uvicorn", "fastapi", "aiohttp"):
    pytest.importorskip(module, reason=f"{module} is not installed (tools/setup.sh installs it)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, (path, response.status, body)
        return json.loads(body)
    finally:
        conn.close()


class Server:
    """A server command in its own process group, and what it printed."""

    def __init__(self, argv, port, env=None):
        self.port = port
        self.marker = tempfile.mktemp(prefix="servers-", suffix=".marker")
        self.log = tempfile.TemporaryFile(mode="w+")
        # HOME: gunicorn keeps a control socket there (the test's may be
        # read-only).
        self.home = tempfile.mkdtemp(prefix="servers-home-")
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                        SERVERS_MARKER=self.marker, MT_ASYNCIO_THREADS="4", HOME=self.home,
                        **(env or {}))
        self.proc = subprocess.Popen(argv, cwd=HERE, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def output(self):
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self):
        deadline = time.monotonic() + WAIT
        while True:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output()}"
            try:
                return get(self.port, "/info")
            except (OSError, http.client.HTTPException):
                assert time.monotonic() < deadline, f"never answered:\n{self.output()}"
                time.sleep(0.1)

    def stop(self):
        """SIGTERM, as a supervisor (systemd, Kubernetes) sends it."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(WAIT)
            raise AssertionError(f"no graceful stop within {WAIT} s:\n{self.output()}")

    def shutdowns(self):
        try:
            with open(self.marker) as f:
                return f.read().split("\n")[:-1]
        except FileNotFoundError:
            return []

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(WAIT)
        if os.path.exists(self.marker):
            os.unlink(self.marker)
        shutil.rmtree(self.home, ignore_errors=True)
        self.log.close()


def exercise(server, processes=1):
    """Readiness (of every serving process: one is answering before the
    others have loaded the application), then REQUESTS CPU requests from 8
    client threads, each on a connection of its own; returns (pid, thread)
    of each answer."""
    info = server.wait_ready()
    assert info["loop"] == OUR_LOOP, (info, server.output())
    pids = {info["pid"]}
    deadline = time.monotonic() + WAIT
    while len(pids) < processes:
        assert time.monotonic() < deadline, f"only {pids} answered:\n{server.output()}"
        answer = get(server.port, "/info")
        assert answer["loop"] == OUR_LOOP, answer
        pids.add(answer["pid"])
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: get(server.port, f"/cpu/{CPU}"), range(REQUESTS)))
    expected = sum(i * i for i in range(CPU))
    assert [a["total"] for a in answers] == [expected] * REQUESTS
    ran_on = {(a["pid"], a["thread"]) for a in answers}
    if processes == 1 and FREE_THREADED:
        # One process, one loop: the requests ran on several threads.
        assert len({thread for _, thread in ran_on}) >= 2, ran_on
    return ran_on


def run_and_stop(argv, port, processes=1, exit_status=0):
    server = Server(argv, port)
    try:
        ran_on = exercise(server, processes)
        code = server.stop()
        assert code == exit_status, f"exit status {code}:\n{server.output()}"
        # Every serving process ran its application's shutdown.
        assert len(server.shutdowns()) == processes, (server.shutdowns(), server.output())
        return ran_on
    finally:
        server.close()


def test_uvicorn_with_its_loop_option():
    port = free_port()
    # uvicorn (0.29 and later) raises the signal it stopped for again once
    # it has shut down, on every loop: the status says SIGTERM, and the
    # application's shutdown ran.
    run_and_stop([sys.executable, "-m", "uvicorn", "asgi_app:app", "--port", str(port),
                  "--loop", "mt_asyncio.uvicorn:loop_factory", "--log-level", "warning"],
                 port, exit_status=-signal.SIGTERM)


def test_hypercorn_under_python_m_mt_asyncio():
    pytest.importorskip("hypercorn", reason="hypercorn is not installed")
    port = free_port()
    # --workers 0: serve in this process. (Hypercorn's worker processes are
    # spawned fresh interpreters, which start on stdlib's loop.)
    run_and_stop([sys.executable, "-m", "mt_asyncio", "hypercorn", "asgi_app:app",
                  "--workers", "0", "--bind", f"127.0.0.1:{port}"], port)


def test_aiohttp_run_app_under_python_m_mt_asyncio():
    port = free_port()
    run_and_stop([sys.executable, "-m", "mt_asyncio", "aiohttp_app.py", str(port)], port)


def test_gunicorn_with_our_uvicorn_worker():
    pytest.importorskip("gunicorn", reason="gunicorn is not installed")
    port = free_port()
    ran_on = run_and_stop([sys.executable, "-m", "gunicorn", "asgi_app:app",
                           "-k", "mt_asyncio.uvicorn.UvicornWorker", "--workers", "2",
                           "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "20",
                           "--log-level", "warning"], port, processes=2)
    assert ran_on  # Which of the two workers took each request is the kernel's choice.


def test_launcher_usage_errors():
    for argv, message in ((["--threads", "0", "x"], "threads must be"),
                          ([], "usage:"), (["--bogus", "x"], "unknown option")):
        out = subprocess.run([sys.executable, "-m", "mt_asyncio", *argv], capture_output=True,
                             text=True, timeout=WAIT,
                             env=dict(os.environ,
                                      PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
        assert out.returncode != 0 and message in out.stderr, (argv, out.stderr)


def test_threads_from_the_environment():
    code = ("import mt_asyncio, mt_asyncio.asyncio as asyncio\n"
            "asyncio.run(asyncio.sleep(0))\n"
            "print(mt_asyncio.runtime_info()['config']['worker_threads'])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for value, expected, warns in (("3", "3", False), ("zero", None, True)):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=WAIT, env=dict(env, MT_ASYNCIO_THREADS=value))
        assert out.returncode == 0, out.stderr
        if expected is not None:
            assert out.stdout.strip() == expected
        assert ("MT_ASYNCIO_THREADS" in out.stderr) == warns, out.stderr
