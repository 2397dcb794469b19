"""The control plane end to end, against a live service process.

service_app.py runs a real workload (tasks on several workers, a queue
pipeline, to_thread jobs, a TCP server, waves of short tasks) with
MT_ASYNCIO_CONTROL=1; every test drives it through mtctl, as an operator
would, and checks what the service itself reports.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # The helpers beside it.
import attackers  # noqa: E402
import harness  # noqa: E402
from harness import (  # noqa: E402
    MTCTL, WAIT, Service, grpc_health_probe_path, grpcurl_path, rss_kib,
)


@pytest.fixture
def service():
    svc = Service()
    try:
        yield svc
    finally:
        svc.close()


def test_private_socket_and_every_read_command(service):
    folder = os.path.dirname(service.socket)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert os.stat(service.socket).st_mode & 0o777 == 0o600

    text = service.mtctl("info").stdout
    assert f"pid {service.pid}" in text and "running" in text
    info = service.json("info")
    assert info["pid"] == service.pid
    assert info["runtime"]["state"] == "RUNTIME_STATE_RUNNING"
    assert info["control"]["draining"] is False

    workers = service.json("workers")
    assert len(workers["workers"]) == 2
    for w in workers["workers"]:
        assert w["state"].startswith("WORKER_STATE_")
        assert os.path.isdir(f"/proc/{service.pid}/task/{w['os_thread_id']}")
    assert "IDX" in service.mtctl("workers").stdout
    assert "STOLEN_UNITS" in service.mtctl("-o", "wide", "workers").stdout

    loops = service.json("loops")["loops"]
    assert len(loops) == 1 and loops[0]["state"] == "LOOP_STATE_RUNNING"
    assert int(loops[0]["tasks"]["pending"]) >= 8
    table = service.mtctl("loops").stdout.splitlines()
    assert table[0].split()[:3] == ["ID", "STATE", "TASKS"], table
    assert table[1].split()[:2] == [str(loops[0]["id"]), "running"], table

    tasks = service.json("ps", "--all")
    names = {t["name"] for t in tasks["tasks"]}
    assert {"producer", "consumer", "thread-jobs", "batches", "spinner-0"} <= names
    spinner = next(t for t in tasks["tasks"] if t["name"] == "spinner-0")
    assert int(spinner["steps"]) > 0 and int(spinner["busy_ns"]) > 0
    assert spinner["coroutine"] == "guarded"
    # Filters and pages.
    only = service.json("ps", "--name", "spinner")["tasks"]
    assert sorted(t["name"] for t in only) == [f"spinner-{i}" for i in range(4)]
    first = service.json("ps", "--name", "spinner", "--limit", "2")
    assert len(first["tasks"]) == 2 and first["next_page_token"]
    assert "SUSPENDED AT" in service.mtctl("-o", "wide", "ps").stdout

    detail = service.json("task", spinner["id"])
    assert detail["task"]["name"] == "spinner-0"
    assert any(f["function"] == "guarded" for f in detail["stack"])
    if sys.version_info >= (3, 14):  # asyncio's call-graph API.
        assert "spinner" in detail["call_graph"]
    text = service.mtctl("task", spinner["id"]).stdout
    assert "await graph:" in text

    assert service.mtctl("health").stdout.strip() == "SERVING"
    listed = service.mtctl("list", target=False).stdout
    assert str(service.pid) in listed and "running" in listed


def test_hostile_task_name_is_answered_and_printed_inert():
    svc = Service("--hostile-name")
    try:
        def raw(*args):
            proc = subprocess.run([MTCTL, "--target", str(svc.pid), *args],
                                  capture_output=True, timeout=WAIT, env=svc.env)
            assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
            return proc.stdout

        # The page holds it (a lone surrogate once failed the whole page),
        # as U+FFFD, clipped by code point; the control characters are data.
        listed = json.loads(raw("-o", "json", "ps", "--name", "hostile"))["tasks"]
        assert len(listed) == 1, listed
        name = listed[0]["name"]
        assert name.startswith("hostile\x1b]0;owned\x07-\ufffd-\u00e9"), name
        assert len(name) == 300 and name.endswith("\u00e9..."), len(name)
        # Printed, nothing reaches the terminal: no ESC, no BEL, valid UTF-8.
        for out in (raw("ps", "--name", "hostile"), raw("-o", "wide", "ps"),
                    raw("task", str(listed[0]["id"]))):
            assert b"\x1b" not in out and b"\x07" not in out, out
            assert b"hostile\\x1b]0;owned\\x07-" in out, out
            out.decode("utf-8")
    finally:
        svc.close()


def test_every_command_in_table_and_json(service):
    # What the other cases read in one format only, in the other one too.
    lines = service.mtctl("watch", "--interval", "0.1", "--count", "2").stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["#1", "#2"], lines
    updates = [json.loads(line) for line in
               service.mtctl("-o", "json", "watch", "--interval", "0.1", "--count", "2",
                             "--loops").stdout.splitlines()]
    assert [int(u["sequence"]) for u in updates] == [1, 2]
    assert updates[0]["loops"][0]["state"] == "LOOP_STATE_RUNNING"
    assert service.json("health") == {"status": "SERVING"}
    listed = json.loads(service.mtctl("-o", "json", "list", target=False).stdout)
    assert [entry["info"]["pid"] for entry in listed] == [service.pid]
    text = service.mtctl("scale", "workers", "3", "--wait", "10").stdout
    assert text.startswith("workers: 2 -> 3 (3 live)"), text
    text = service.mtctl("scale", "blocking", "5").stdout
    assert text.startswith("blocking max threads: ") and "-> 5;" in text, text
    spinner = service.json("ps", "--name", "spinner-1")["tasks"][0]
    assert service.json("cancel", spinner["id"]) == {"cancelled": True}
    assert service.json("drain") == {"already_draining": False}
    assert service.json("drain") == {"already_draining": True}


def test_shutdown_in_json(service):
    progress = [json.loads(line) for line in
                service.mtctl("-o", "json", "shutdown", "--grace", "1", "--wait")
                .stdout.splitlines()]
    assert progress, "no progress lines"
    # The first line may still say running (the phases begin on the
    # runtime's own thread); then they move on, in order.
    phases = ["RUNTIME_STATE_RUNNING", "RUNTIME_STATE_DRAINING", "RUNTIME_STATE_CANCELLING",
              "RUNTIME_STATE_STOPPING", "RUNTIME_STATE_STOPPED"]
    seen = [phases.index(p["state"]) for p in progress]
    assert seen == sorted(seen) and seen[-1] >= 1, progress
    assert all(p["joined"] is False for p in progress)
    assert service.proc.wait(WAIT) == 0


def test_scale_workers_while_batches_run_loses_nothing(service):
    service.wait_for("batch")
    for target in (1, 8, 2):
        out = service.json("scale", "workers", str(target), "--wait", "10")
        assert out["target"] == target and out["converged"], out
        seen = service.json("workers")
        assert sum(1 for w in seen["workers"] if w["active"]) == target
        # Batches keep finishing whole on the new pool.
        for _ in range(2):
            batch = service.wait_for("batch")
            assert batch["done"] == batch["expected"]
    bad = service.mtctl("scale", "workers", "0", check=False)
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr
    bad = service.mtctl("scale", "workers", "100000", check=False)
    assert bad.returncode in (1, 2)


def test_scale_blocking_while_jobs_run(service):
    out = service.json("scale", "blocking", "3", "--idle-ttl", "2.5")
    assert out["max_threads"] == 3 and out["idle_ttl_seconds"] == 2.5
    pool = service.json("workers")["blocking"]
    assert pool["max_threads"] == 3 and pool["idle_ttl_seconds"] == 2.5
    info = service.json("info")["runtime"]
    assert info["config"]["blocking_threads_max"] == 3
    before = int(pool["completed"])
    deadline = time.monotonic() + WAIT
    while int(service.json("workers")["blocking"]["completed"]) < before + 20:
        assert time.monotonic() < deadline, "to_thread jobs stopped"
        time.sleep(0.05)


def test_drain_flips_health_and_work_goes_on(service):
    assert "NOT_SERVING" in service.mtctl("drain").stdout
    health = service.mtctl("health", check=False)
    assert health.returncode == 1 and health.stdout.strip() == "NOT_SERVING"
    assert service.json("info")["control"]["draining"] is True
    # Still working: new batches finish, the server still answers.
    service.wait_for("batch")
    with socket.create_connection(("127.0.0.1", service.port), timeout=WAIT) as c:
        c.sendall(b"hello\n")
        assert c.recv(100) == b"hello\n"


def test_health_port_answers_the_probe_through_drain_and_shutdown():
    """The plaintext health-only port (MT_ASYNCIO_CONTROL_HEALTH), read by
    the real probe client Kubernetes users run: SERVING, NOT_SERVING once
    drained (the "liveness" name still SERVING), nothing at all once the
    process shut down. Nothing but
    grpc.health.v1 is reachable there: the control service and reflection
    answer UNIMPLEMENTED."""
    probe = grpc_health_probe_path()
    if probe is None:
        pytest.skip("grpc-health-probe is not installed (tools/setup.sh builds it when "
                    "Go is present)")
    svc = Service(env={"MT_ASYNCIO_CONTROL_HEALTH": "127.0.0.1:0"})
    try:
        assert svc.health_port
        addr = f"127.0.0.1:{svc.health_port}"

        def check(*extra):
            return subprocess.run([probe, "-addr", addr, "-connect-timeout", "5s",
                                   "-rpc-timeout", "5s", *extra],
                                  capture_output=True, text=True, timeout=WAIT)

        ok = check()
        assert ok.returncode == 0 and "status: SERVING" in ok.stderr, (ok.stdout, ok.stderr)
        # Raw gRPC calls (h2): 12 is UNIMPLEMENTED.
        for method in ("/mt.control.v1.RuntimeControl/GetInfo",
                       "/mt.control.v1.RuntimeControl/Drain",
                       "/mt.control.v1.RuntimeControl/Shutdown",
                       "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"):
            assert attackers.grpc_calls(method, 1, plain=svc.health_port) == [12], method
        grpcurl = grpcurl_path()
        if grpcurl is not None:
            listed = subprocess.run([grpcurl, "-plaintext", addr, "list"],
                                    capture_output=True, text=True, timeout=WAIT)
            assert listed.returncode != 0 and "does not support the reflection API" in \
                listed.stderr, listed
        assert svc.mtctl("health").stdout.strip() == "SERVING"  # Not drained by the above.

        svc.mtctl("drain")
        drained = check()
        # grpc-health-probe exits 4 for a status other than SERVING.
        assert drained.returncode == 4 and "NOT_SERVING" in drained.stderr, \
            (drained.stdout, drained.stderr)
        alive = check("-service", "liveness")  # The liveness probe's name stays SERVING.
        assert alive.returncode == 0 and "status: SERVING" in alive.stderr, alive

        svc.mtctl("shutdown", "--grace", "1", "--wait", timeout=WAIT)
        assert svc.proc.wait(WAIT) == 0
        gone = check()
        assert gone.returncode == 2, (gone.stdout, gone.stderr)  # 2: connection failure.
    finally:
        svc.close()


def test_one_command_across_two_live_processes(tmp_path):
    """mtctl --target A --target B (or --targets-file): one table with a
    TARGET column for each read command, top across both, a JSON line per
    target, and exit statuses that tell which targets failed."""
    a, b = Service(), Service()
    try:
        # Each service has a runtime folder of its own: named by socket.
        ta, tb = f"unix://{a.socket}", f"unix://{b.socket}"
        targets = ["--target", ta, "--target", tb]

        def rows(text):
            return [line.split() for line in text.splitlines()[1:] if line.strip()]

        def run(*args, env=None):
            return subprocess.run([MTCTL, *args], capture_output=True, text=True,
                                  timeout=WAIT, env=env or a.env)

        out = run(*targets, "workers")
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split()[:2] == ["TARGET", "IDX"], lines[0]
        assert {r[0] for r in rows(out.stdout)} == {ta, tb}
        assert len(rows(out.stdout)) == 4  # Two workers each.

        info = rows(run(*targets, "info").stdout)
        assert [(r[0], r[1]) for r in info] == [(ta, str(a.pid)), (tb, str(b.pid))]
        tasks = rows(run(*targets, "ps", "--name", "spinner").stdout)
        assert {r[0] for r in tasks} == {ta, tb}
        assert {r[0] for r in rows(run(*targets, "loops").stdout)} == {ta, tb}

        listed = tmp_path / "targets"
        listed.write_text(f"# the fleet\n{ta}\n\n  {tb}  \n")
        out = run("--targets-file", str(listed), "-o", "json", "workers")
        answers = [json.loads(line) for line in out.stdout.splitlines()]
        assert [x["target"] for x in answers] == [ta, tb]
        assert all(len(x["response"]["workers"]) == 2 for x in answers)

        top = run(*targets, "top", "--iterations", "1")
        assert top.returncode == 0, top.stderr
        assert "2 targets" in top.stdout and str(b.pid) in top.stdout
        assert "busiest tasks:" in top.stdout

        b.mtctl("drain")
        health = run(*targets, "health")
        assert health.returncode == 4, (health.stdout, health.stderr)  # One of two.
        assert {tuple(r) for r in rows(health.stdout)} == {(ta, "SERVING"),
                                                            (tb, "NOT_SERVING")}

        missing = "unix:///nonexistent/control.sock"
        some = run(*targets, "--target", missing, "info")
        assert some.returncode == 4 and "/nonexistent/control.sock" in some.stderr, some.stderr
        assert len(rows(some.stdout)) == 2
        none = run("--target", missing, "--target", "unix:///nonexistent/other.sock", "workers")
        assert none.returncode == 1, none.stderr
        mutating = run(*targets, "drain")
        assert mutating.returncode == 2 and "one target" in mutating.stderr
    finally:
        a.close()
        b.close()


def test_cancel_a_task_runs_its_finally(service):
    producer = service.json("ps", "--name", "producer")["tasks"][0]
    assert "cancel requested" in service.mtctl("cancel", producer["id"], "--msg", "op").stdout
    deadline = time.monotonic() + WAIT
    while service.json("ps", "--name", "producer")["tasks"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    missing = service.mtctl("cancel", producer["id"], check=False)
    assert missing.returncode == 3 and "NOT_FOUND" in missing.stderr
    missing = service.mtctl("task", "999999999", check=False)
    assert missing.returncode == 3


@pytest.mark.parametrize("hang", [False, True], ids=["plain", "hung-to_thread"])
def test_shutdown_wait_under_load(hang):
    svc = Service(*(["--hang-thread"] if hang else []))
    try:
        svc.wait_for("batch")
        # A client with a request in flight, and one that stays connected.
        slow = socket.create_connection(("127.0.0.1", svc.port), timeout=WAIT)
        slow.sendall(b"slow request\n")
        idle = socket.create_connection(("127.0.0.1", svc.port), timeout=WAIT)
        grace = 2.0
        started = time.monotonic()
        out = svc.mtctl("shutdown", "--grace", str(grace), "--wait")
        assert "draining" in out.stdout, out.stdout
        # The server stopped accepting at once...
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", svc.port), timeout=2).close()
        # ...the request in flight was answered, then connections closed.
        assert slow.recv(100) == b"slow request\n"
        assert slow.recv(100) == b""
        assert idle.recv(100) == b""
        exit_event = svc.wait_for("exit")
        assert svc.proc.wait(WAIT) == 0, "".join(svc.stderr)[-3000:]
        took = time.monotonic() - started
        assert took < grace + 1.5, took
        tasks = 9 if hang else 8
        assert exit_event["finally_ran"] == tasks, exit_event
        assert exit_event["state"] in ("stopped", "stopping", "cancelling", "draining")
        if hang:
            assert any("abandoned 1 blocking job" in line for line in svc.stderr), svc.stderr
        slow.close()
        idle.close()
    finally:
        svc.close()


def test_another_user_is_refused(service):
    if os.geteuid() != 0:
        pytest.skip("needs root to connect as another user")
    import pwd
    nobody = pwd.getpwnam("nobody")
    # The private folder is the first gate; open it to reach the second,
    # the peer-credential check.
    os.chmod(service.runtime_dir, 0o755)  # mkdtemp made it 0700.
    os.chmod(os.path.dirname(service.socket), 0o755)
    os.chmod(service.socket, 0o666)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(service.socket)
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            code = 0 if s.recv(100) == b"" else 2
        except PermissionError:
            code = 10  # setuid refused (a sandbox that maps only root).
        except OSError:
            code = 0  # Reset by the listener: refused too.
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 10:
        pytest.skip("cannot switch to uid nobody here")
    assert os.waitstatus_to_exitcode(status) == 0
    assert int(service.json("info")["control"]["refused_connections"]) == 1


def test_bad_input_gets_a_status_not_a_crash(service):
    # Garbage on the socket: the server drops that connection only.
    for payload in (os.urandom(4096), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512),
                    b"\x00" * 9):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(service.socket)
            try:
                s.sendall(payload)
                s.recv(100)
            except OSError:
                pass
    long_name = service.mtctl("ps", "--name", "x" * 5000, check=False)
    assert long_name.returncode == 1 and "INVALID_ARGUMENT" in long_name.stderr
    for args in (("watchers",), ("scale", "workers", "two"), ("task", "abc"),
                 ("shutdown", "--grace", "-1")):
        assert service.mtctl(*args, check=False).returncode == 2, args
    # Still serving, nothing lost.
    assert service.json("info")["runtime"]["state"] == "RUNTIME_STATE_RUNNING"
    batch = service.wait_for("batch")
    assert batch["done"] == batch["expected"]


def test_top_draws_and_quits(service):
    out = service.mtctl("top", "--interval", "0.2", "--iterations", "2").stdout
    assert out.count("mtctl top") == 2
    assert "busiest tasks" in out and "spinner" in out


def test_grpcurl_discovers_and_calls_by_reflection(service):
    grpcurl = grpcurl_path()
    if grpcurl is None:
        pytest.skip("grpcurl is not installed (tools/setup.sh builds it when Go is present)")

    def call(*args):
        proc = subprocess.run([grpcurl, "-plaintext", "-unix", *args], capture_output=True,
                              text=True, timeout=WAIT)
        assert proc.returncode == 0, (args, proc.stderr)
        return proc.stdout

    services = call(service.socket, "list").split()
    assert {"mt.control.v1.RuntimeControl", "grpc.health.v1.Health"} <= set(services)
    assert "ListTasks" in call(service.socket, "list", "mt.control.v1.RuntimeControl")
    info = json.loads(call(service.socket, "mt.control.v1.RuntimeControl/GetInfo"))
    assert info["pid"] == service.pid
    workers = json.loads(call(service.socket, "mt.control.v1.RuntimeControl/ListWorkers"))
    assert len(workers["workers"]) == 2
    health = json.loads(call(service.socket, "grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"
    tasks = json.loads(call("-d", '{"name_contains": "spinner", "page_size": 2}', service.socket,
                            "mt.control.v1.RuntimeControl/ListTasks"))
    assert len(tasks["tasks"]) == 2 and tasks["next_page_token"]


def test_many_watchers_are_bounded_and_released(service):
    # More Watch streams than the server keeps (32): the rest get
    # RESOURCE_EXHAUSTED; when the clients go, every place is freed; the
    # service's memory stays bounded and it keeps serving.
    service.wait_for("batch")
    rss_before = rss_kib(service.pid)
    argv = [MTCTL, "--target", str(service.pid), "-o", "json", "watch", "--interval", "0.1"]
    clients = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=service.env) for _ in range(48)]
    try:
        deadline = time.monotonic() + WAIT
        while int(service.json("info")["control"]["watchers"]) < 32:
            assert time.monotonic() < deadline, "watchers never reached the cap"
            time.sleep(0.1)
        # The other 16 are refused and exit, each in its own time (48
        # clients starting at once on a small machine take a while).
        while sum(c.poll() is not None for c in clients) < 48 - 32:
            assert time.monotonic() < deadline, "the clients over the cap did not exit"
            time.sleep(0.1)
        refused = sum("RESOURCE_EXHAUSTED" in c.stderr.read()
                      for c in clients if c.poll() is not None)
        assert int(service.json("info")["control"]["watchers"]) == 32
        time.sleep(1)  # Let the 32 stream for a while.
    finally:
        for c in clients:
            c.kill()
        for c in clients:
            c.wait(WAIT)
    assert refused == 48 - 32
    deadline = time.monotonic() + WAIT
    while int(service.json("info")["control"]["watchers"]) != 0:
        assert time.monotonic() < deadline, "watcher places were not released"
        time.sleep(0.1)
    assert rss_kib(service.pid) < rss_before + 64 * 1024  # Bounded: well under 64 MiB.
    batch = service.wait_for("batch")
    assert batch["done"] == batch["expected"]


tls_files = pytest.fixture(scope="module")(harness.tls_files)


tls_service = pytest.fixture(harness.tls_service)


def _over_tls(svc, tls_files, token, *args, check=False):
    return svc.mtctl("--target", f"127.0.0.1:{svc.control_tcp_port}",
                     "--tls-ca", os.path.join(tls_files, "ca.pem"),
                     "--token-file", os.path.join(tls_files, token), *args,
                     target=False, check=check)


def test_tcp_serves_tls_with_tokens_and_read_only_cannot_mutate(tls_service, tls_files):
    svc = tls_service
    info = json.loads(_over_tls(svc, tls_files, "admin.token", "-o", "json", "info",
                                check=True).stdout)
    assert info["pid"] == svc.pid
    # The read-only token reads everything...
    assert "IDX" in _over_tls(svc, tls_files, "readonly.token", "workers", check=True).stdout
    tasks = json.loads(_over_tls(svc, tls_files, "readonly.token", "-o", "json", "ps",
                                 "--name", "spinner", check=True).stdout)["tasks"]
    assert len(tasks) == 4
    assert _over_tls(svc, tls_files, "readonly.token", "health", check=True).stdout.strip() \
        == "SERVING"
    # ...and changes nothing: every mutating command is PERMISSION_DENIED.
    for args in (("scale", "workers", "3"), ("scale", "blocking", "4"),
                 ("cancel", tasks[0]["id"]), ("drain",), ("shutdown", "--grace", "1")):
        denied = _over_tls(svc, tls_files, "readonly.token", *args)
        assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr, (args, denied)
    state = svc.json("info")
    assert state["runtime"]["state"] == "RUNTIME_STATE_RUNNING"
    assert state["control"]["draining"] is False
    assert state["runtime"]["config"]["worker_threads"] == 2
    # A wrong token gets nothing at all.
    wrong = os.path.join(tls_files, "wrong.token")
    fd = os.open(wrong, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("0" * 48)
    refused = _over_tls(svc, tls_files, "wrong.token", "info")
    assert refused.returncode == 1 and "UNAUTHENTICATED" in refused.stderr
    # The admin token may change things, and the change is audited with
    # the caller's identity.
    out = json.loads(_over_tls(svc, tls_files, "admin.token", "-o", "json", "scale",
                               "workers", "3", "--wait", "10", check=True).stdout)
    assert out["target"] == 3 and out["converged"]
    deadline = time.monotonic() + WAIT
    while not any("tls role=admin" in line and "ResizeWorkers target=3" in line
                  for line in svc.stderr):
        assert time.monotonic() < deadline, svc.stderr
        time.sleep(0.05)
    assert any("PERMISSION_DENIED" in line and "tls role=read-only" in line
               for line in svc.stderr)
    assert int(svc.json("info")["control"]["rejected_calls"]) == 6
    batch = svc.wait_for("batch")
    assert batch["done"] == batch["expected"]


def test_tcp_without_tls_is_refused(tls_service):
    # Plain HTTP/2 on the TLS port: no gRPC answer, the handshake fails.
    with socket.create_connection(("127.0.0.1", tls_service.control_tcp_port),
                                  timeout=WAIT) as s:
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 64)
        try:
            data = s.recv(100)
        except ConnectionResetError:
            data = b""
    # Nothing, or a TLS alert record (content type 21): never an HTTP/2 frame.
    assert data == b"" or data[0] == 0x15, data
    assert tls_service.json("info")["runtime"]["state"] == "RUNTIME_STATE_RUNNING"


def test_grpcurl_over_tls_needs_a_token(tls_service, tls_files):
    grpcurl = grpcurl_path()
    if grpcurl is None:
        pytest.skip("grpcurl is not installed (tools/setup.sh builds it when Go is present)")
    with open(os.path.join(tls_files, "readonly.token")) as f:
        token = f.read().strip()
    base = [grpcurl, "-cacert", os.path.join(tls_files, "ca.pem"), "-max-time", "10"]
    address = f"127.0.0.1:{tls_service.control_tcp_port}"

    def call(*args, auth=True):
        header = ["-H", f"authorization: Bearer {token}"] if auth else []
        return subprocess.run([*base, *header, address, *args], capture_output=True,
                              text=True, timeout=WAIT)

    listed = call("list")
    assert listed.returncode == 0, listed.stderr
    assert "mt.control.v1.RuntimeControl" in listed.stdout.split()
    info = call("mt.control.v1.RuntimeControl/GetInfo")
    assert info.returncode == 0 and json.loads(info.stdout)["pid"] == tls_service.pid
    anonymous = call("mt.control.v1.RuntimeControl/GetInfo", auth=False)
    assert anonymous.returncode != 0 and "Unauthenticated" in anonymous.stderr
    drain = call("mt.control.v1.RuntimeControl/Drain")
    assert drain.returncode != 0 and "PermissionDenied" in drain.stderr
