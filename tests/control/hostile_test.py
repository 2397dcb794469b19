"""The control plane against a hostile neighbourhood: files and paths
another user can reach, environment values that are not what they seem,
and a socket swapped by another user under mtctl.

Every refusal is checked for what it leaves behind too: nothing served,
nothing created, nothing repaired. Cases that need a second user (a file
or socket of `nobody`) run as root and are skipped, with the reason,
otherwise.
"""

import base64
import json
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

import mt_asyncio
import mt_asyncio.control as control

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # The helpers beside it.
import attackers  # noqa: E402
import harness  # noqa: E402
from harness import MTCTL, Service  # noqa: E402

WAIT = 30
AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="needs root to act as another user")


def _nobody():
    import pwd
    return pwd.getpwnam("nobody")


@pytest.fixture
def folder():
    # Short, and 0700 (mkdtemp): a Unix socket path must fit 107 bytes.
    path = tempfile.mkdtemp(prefix="mthost-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


tls_files = pytest.fixture(scope="module")(harness.tls_files)


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)  # Whatever the umask.
    return path


def _copy(src, dst, mode):
    with open(src, "rb") as f:
        return _write(dst, f.read(), mode)


# --- tokens ---------------------------------------------------------------


def test_random_tokens_of_every_usual_shape_are_accepted():
    # The floor must never refuse a real token. Seeded, so the run is the
    # same every time; the chance that a random 16-character hex token has
    # fewer than 4 distinct characters is 1.3e-9.
    rng = random.Random(27)
    shapes = {
        "hex16": lambda: rng.randbytes(8).hex(),
        "hex48": lambda: rng.randbytes(24).hex(),
        "urlsafe16": lambda: base64.urlsafe_b64encode(rng.randbytes(12)).decode(),
        "digits20": lambda: "".join(rng.choice("0123456789") for _ in range(20)),
        "base32": lambda: base64.b32encode(rng.randbytes(10)).decode(),
        "uuid4": lambda: str(uuid.UUID(bytes=rng.randbytes(16), version=4)),
    }
    for name, make in shapes.items():
        for _ in range(20000):
            token = make()
            assert control._token_problem(token.encode()) is None, (name, token)


@pytest.mark.parametrize("token, problem", [
    (b"a" * 32, "does not look random"),
    (b"ab" * 16, "does not look random"),
    (b"abcd" * 8, "does not look random"),
    (b"changeme" * 2, "does not look random"),
    (b"aaaaaaaaaaaaaaab", "does not look random"),
    (b"short", "fewer than 16"),
    (b"c" * 10 + b" " + b"d" * 10, "printable"),
    (b"\xc3\xa9" * 16, "printable"),
    (os.urandom(4000).hex().encode(), "more than 4096"),
])
def test_placeholder_and_malformed_tokens_are_refused(token, problem):
    assert problem in control._token_problem(token)


# --- token, key, certificate and CA files -----------------------------------


def _tls(tls_files, folder, **files):
    """serve()'s TCP options, with the fixture's files unless replaced."""
    options = {
        "tcp": ("127.0.0.1", 0),
        "tls_cert": os.path.join(tls_files, "server.pem"),
        "tls_key": _copy(os.path.join(tls_files, "server.key"),
                         os.path.join(folder, "server.key"), 0o600),
        "token_file": _copy(os.path.join(tls_files, "admin.token"),
                            os.path.join(folder, "admin.token"), 0o600),
    }
    options.update(files)
    return options


@pytest.mark.parametrize("uid, mode, secret, refused", [
    # Secrets of this user (1000): closed to everyone else.
    (1000, 0o600, True, None), (1000, 0o400, True, None),
    (1000, 0o640, True, "open to other users"), (1000, 0o660, True, "open to other users"),
    (1000, 0o604, True, "open to other users"), (1000, 0o700, True, None),
    # Secrets root provisions for the service's group (Kubernetes, packages).
    (0, 0o440, True, None), (0, 0o640, True, None),
    (0, 0o660, True, "open to other users"), (0, 0o644, True, "open to other users"),
    (0, 0o650, True, "open to other users"),
    # Anyone else's file, whatever its mode.
    (1001, 0o600, True, "belongs to uid 1001"), (1001, 0o644, False, "belongs to uid 1001"),
    # Certificates and CAs: readable by all, writable by the owner only.
    (1000, 0o644, False, None), (0, 0o444, False, None),
    (1000, 0o664, False, "writable by other users"), (0, 0o646, False, "writable by other users"),
])
def test_ownership_rules(uid, mode, secret, refused):
    problem = control._ownership_problem(uid, mode, 1000, secret=secret)
    if refused is None:
        assert problem is None
    else:
        assert refused in problem


def test_as_root_a_secret_must_be_closed_to_the_group_too():
    assert "open to other users" in control._ownership_problem(0, 0o640, 0, secret=True)


def test_good_files_are_served(folder, tls_files):
    sock = os.path.join(folder, "c.sock")
    ca = _copy(os.path.join(tls_files, "ca.pem"), os.path.join(folder, "ca.pem"), 0o644)
    ro = _write(os.path.join(folder, "ro.token"), os.urandom(24).hex(), 0o400)
    with control.serve(sock, client_ca=ca, readonly_token_file=ro,
                       **_tls(tls_files, folder)) as server:
        assert server.tcp_port
    assert not os.path.exists(sock)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644, 0o620])
def test_a_token_file_others_can_reach_is_refused(folder, tls_files, mode):
    sock = os.path.join(folder, "c.sock")
    token = _write(os.path.join(folder, "t.token"), os.urandom(24).hex(), mode)
    with pytest.raises(PermissionError, match="open to other users"):
        control.serve(sock, **_tls(tls_files, folder, token_file=token))
    assert not os.path.exists(sock)


@pytest.mark.parametrize("what", ["token_file", "tls_key", "tls_cert", "client_ca"])
def test_no_file_is_read_through_a_link(folder, tls_files, what):
    sock = os.path.join(folder, "c.sock")
    options = _tls(tls_files, folder)
    target = options.get(what) or os.path.join(tls_files, "ca.pem")
    link = os.path.join(folder, "link")
    os.symlink(target, link)
    options[what] = link
    with pytest.raises(PermissionError, match="symbolic link"):
        control.serve(sock, **options)
    assert not os.path.exists(sock)


def test_a_fifo_a_folder_and_a_huge_file_are_refused_without_blocking(folder, tls_files):
    sock = os.path.join(folder, "c.sock")
    fifo = os.path.join(folder, "fifo")
    os.mkfifo(fifo, 0o600)  # Nobody writes: a blocking open would hang.
    with pytest.raises(PermissionError, match="not a regular file"):
        control.serve(sock, **_tls(tls_files, folder, token_file=fifo))
    sub = os.path.join(folder, "sub")
    os.mkdir(sub, 0o700)
    with pytest.raises(PermissionError, match="not a regular file"):
        control.serve(sock, **_tls(tls_files, folder, tls_key=sub))
    huge = _write(os.path.join(folder, "huge.pem"), b"x" * (2 << 20), 0o644)
    with pytest.raises(ValueError, match="larger than"):
        control.serve(sock, **_tls(tls_files, folder, tls_cert=huge))
    assert not os.path.exists(sock)


def test_a_key_others_can_read_and_a_ca_or_cert_others_can_write_are_refused(
        folder, tls_files):
    sock = os.path.join(folder, "c.sock")
    key = _copy(os.path.join(tls_files, "server.key"), os.path.join(folder, "k.key"), 0o640)
    with pytest.raises(PermissionError, match="TLS key .* open to other users"):
        control.serve(sock, **_tls(tls_files, folder, tls_key=key))
    ca = _copy(os.path.join(tls_files, "ca.pem"), os.path.join(folder, "ca.pem"), 0o666)
    with pytest.raises(PermissionError, match="client CA .* writable by other users"):
        control.serve(sock, client_ca=ca, **_tls(tls_files, folder))
    cert = _copy(os.path.join(tls_files, "server.pem"), os.path.join(folder, "s.pem"), 0o664)
    with pytest.raises(PermissionError, match="certificate .* writable by other users"):
        control.serve(sock, **_tls(tls_files, folder, tls_cert=cert))
    assert not os.path.exists(sock)


@needs_root
def test_files_of_another_user_are_refused(folder, tls_files):
    nobody = _nobody()
    sock = os.path.join(folder, "c.sock")
    token = _write(os.path.join(folder, "t.token"), os.urandom(24).hex(), 0o600)
    os.chown(token, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(PermissionError, match=f"belongs to uid {nobody.pw_uid}"):
        control.serve(sock, **_tls(tls_files, folder, token_file=token))
    ca = _copy(os.path.join(tls_files, "ca.pem"), os.path.join(folder, "ca.pem"), 0o644)
    os.chown(ca, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(PermissionError, match=f"client CA .* belongs to uid {nobody.pw_uid}"):
        control.serve(sock, client_ca=ca, **_tls(tls_files, folder))
    assert not os.path.exists(sock)


# --- socket folders ---------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o757])
def test_a_socket_folder_others_can_write_is_refused(folder, mode):
    shared = os.path.join(folder, "shared")
    os.mkdir(shared)
    os.chmod(shared, mode)
    with pytest.raises(PermissionError, match="writable by other users"):
        control.serve(os.path.join(shared, "c.sock"))
    assert os.listdir(shared) == []


def test_a_socket_folder_others_can_only_read_is_served(folder):
    os.chmod(folder, 0o755)
    with control.serve(os.path.join(folder, "c.sock")) as server:
        assert os.path.exists(server.path)


@needs_root
def test_a_socket_folder_of_another_user_is_refused(folder):
    nobody = _nobody()
    theirs = os.path.join(folder, "theirs")
    os.mkdir(theirs, 0o700)
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(PermissionError, match=f"belongs to uid {nobody.pw_uid}"):
        control.serve(os.path.join(theirs, "c.sock"))
    assert os.listdir(theirs) == []


@pytest.mark.parametrize("mode", [0o777, 0o755, 0o711])
def test_a_private_folder_in_the_wrong_state_is_refused_not_repaired(
        folder, monkeypatch, mode):
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    private = os.path.join(folder, "mt_asyncio")
    os.mkdir(private)
    os.chmod(private, mode)
    planted = _write(os.path.join(private, f"{os.getpid()}.sock"), "planted", 0o666)
    with pytest.raises(PermissionError, match="open to other users"):
        control.serve()
    assert stat.S_IMODE(os.lstat(private).st_mode) == mode  # Not narrowed.
    with open(planted) as f:
        assert f.read() == "planted"


def test_a_private_folder_that_is_a_link_is_refused(folder, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", folder)
    elsewhere = os.path.join(folder, "elsewhere")
    os.mkdir(elsewhere, 0o700)
    os.symlink(elsewhere, os.path.join(folder, "mt_asyncio"))
    with pytest.raises(PermissionError, match="not a folder"):
        control.serve()
    assert os.listdir(elsewhere) == []


# --- MT_ASYNCIO_CONTROL -------------------------------------------------------

_SHOW_ENV_SERVER = """
import json, mt_asyncio, mt_asyncio.control as c
print(json.dumps(None if c._from_env is None else c._from_env.path))
"""


def _import_with(folder, value):
    """Imports mt_asyncio in a fresh process with MT_ASYNCIO_CONTROL=value;
    returns (socket served or None, stderr, what appeared in its cwd)."""
    xdg = os.path.join(folder, "xdg")
    cwd = os.path.join(folder, "cwd")
    for path in (xdg, cwd):
        os.makedirs(path, mode=0o700, exist_ok=True)
    env = dict(os.environ, MT_ASYNCIO_CONTROL=value, XDG_RUNTIME_DIR=xdg,
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    for key in list(env):
        if key.startswith("MT_ASYNCIO_CONTROL_"):
            del env[key]
    proc = subprocess.run([sys.executable, "-c", _SHOW_ENV_SERVER], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr, os.listdir(cwd)


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " yes ", "On"])
def test_env_on_values_serve_the_default_socket(folder, value):
    served, err, cwd = _import_with(folder, value)
    assert served is not None and served.startswith(os.path.join(folder, "xdg", "mt_asyncio"))
    assert served.endswith(".sock") and err == "" and cwd == []


@pytest.mark.parametrize("value", ["", "0", "false", "No", " OFF "])
def test_env_off_values_serve_nothing_and_say_nothing(folder, value):
    assert _import_with(folder, value) == (None, "", [])


@pytest.mark.parametrize("value", ["ture", "2", "x.sock", "./x.sock", "~/x.sock", "unix:///x"])
def test_env_other_values_are_refused_not_taken_as_a_name(folder, value):
    served, err, cwd = _import_with(folder, value)
    assert served is None and cwd == []
    assert "control plane not started" in err and "absolute path" in err


# --- limits and their knobs ----------------------------------------------------


@pytest.mark.parametrize("limits, problem", [
    ({"conections": 64}, "unknown control-plane limit 'conections'"),
    ({"connections": 0}, "connections must be a whole number in [1, 4096]"),
    ({"connections": 8.5}, "connections must be a whole number"),
    ({"read_only_calls": True}, "read_only_calls must be a whole number"),
    ({"read_only_calls": 49}, "read_only_calls must be a whole number in [1, 48]"),
    ({"write_deadline_s": "10"}, "write_deadline_s must be a number"),
    ({"read_only_inspection_cpu_share": 0}, "must be a number in [0.001, 1.0]"),
])
def test_limits_out_of_range_or_unknown_are_refused(folder, limits, problem):
    with pytest.raises(ValueError) as raised:
        control.serve(os.path.join(folder, "x.sock"), limits=limits)
    assert problem in str(raised.value)
    assert not os.path.exists(os.path.join(folder, "x.sock"))


def test_every_limit_has_a_default_within_its_range():
    values = control._limits(None)
    assert set(values) == set(control.LIMITS)
    for name, (default, lo, hi) in control.LIMITS.items():
        assert lo <= default <= hi and values[name] == default, name
    assert control._limits({"watchers": 4, "write_deadline_s": 2})["write_deadline_s"] == 2.0


def test_limits_from_the_environment_are_enforced():
    # One Watch stream allowed: a second is refused while the first lasts.
    svc = Service(env={"MT_ASYNCIO_CONTROL_LIMITS": "watchers=1, write_deadline_s=2.5"})
    try:
        first = subprocess.Popen([MTCTL, "--target", str(svc.pid), "watch", "--interval", "0.2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=svc.env)
        try:
            assert first.stdout.readline(), "the first watcher got nothing"
            second = svc.mtctl("watch", "--count", "1", check=False)
            assert second.returncode != 0
            assert "too many Watch streams open (1)" in second.stderr, second.stderr
        finally:
            first.kill()
            first.wait(WAIT)
    finally:
        svc.close()


@pytest.mark.parametrize("value", ["watchers=0", "watchers", "nope=3", "watchers=two"])
def test_a_bad_limits_variable_serves_nothing_and_says_why(folder, value):
    xdg = os.path.join(folder, "xdg")
    os.makedirs(xdg, mode=0o700)
    env = dict(os.environ, MT_ASYNCIO_CONTROL="1", MT_ASYNCIO_CONTROL_LIMITS=value,
               XDG_RUNTIME_DIR=xdg, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-c", _SHOW_ENV_SERVER], env=env,
                          capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is None
    assert "MT_ASYNCIO_CONTROL_LIMITS: control plane not started" in proc.stderr


def test_env_absolute_path_is_served_only_in_a_safe_folder(folder):
    safe = os.path.join(folder, "safe")
    os.mkdir(safe, 0o700)
    served, err, _ = _import_with(folder, os.path.join(safe, "c.sock"))
    assert served == os.path.join(safe, "c.sock") and err == ""
    shared = os.path.join(folder, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    served, err, _ = _import_with(folder, os.path.join(shared, "c.sock"))
    assert served is None and "writable by other users" in err
    assert os.listdir(shared) == []


# --- mtctl and a swapped socket ------------------------------------------------

_FOREIGN_SERVER = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
print("ready", flush=True)
s.settimeout(20)
got = 0
try:
    while True:
        conn, _ = s.accept()
        conn.settimeout(2)
        try:
            while chunk := conn.recv(65536):
                got += len(chunk)
        except OSError:
            pass
        conn.close()
        print(got, flush=True)
except OSError:
    pass
"""


@needs_root
def test_mtctl_sends_nothing_to_a_socket_another_user_serves(folder):
    # The misconfiguration the check is for: a socket folder another user
    # can write, where they replaced the service's socket with theirs.
    nobody = _nobody()
    shared = os.path.join(folder, "mt_asyncio")
    os.mkdir(shared)
    os.chmod(folder, 0o755)
    os.chmod(shared, 0o777)
    path = os.path.join(shared, f"{os.getpid()}.sock")
    fake = subprocess.Popen([sys.executable, "-c", _FOREIGN_SERVER, path], user=nobody.pw_uid,
                            group=nobody.pw_gid, stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout.readline().strip() == "ready"
        env = dict(os.environ, XDG_RUNTIME_DIR=folder)
        env.pop("MTCTL_TARGET", None)
        for args in (["--target", "unix://" + path, "shutdown"],
                     ["--target", str(os.getpid()), "scale", "workers", "1"]):
            out = subprocess.run([MTCTL, *args], capture_output=True, text=True,
                                 timeout=WAIT, env=env)
            assert out.returncode == 1, out
            assert f"served by uid {nobody.pw_uid}" in out.stderr
            assert "nothing was sent" in out.stderr
            assert fake.stdout.readline().strip() == "0"  # Connected, then left unsent.
        listed = subprocess.run([MTCTL, "list"], capture_output=True, text=True,
                                timeout=WAIT, env=env)
        assert listed.returncode == 0, listed
        assert "foreign" in listed.stdout
        assert fake.stdout.readline().strip() == "0"
    finally:
        fake.kill()
        fake.wait(timeout=WAIT)


# --- audit: every refusal names its peer ---------------------------------------


tls_service = pytest.fixture(harness.tls_service)


def _over_tls(svc, tls_files, token_file, *args):
    return svc.mtctl("--target", f"127.0.0.1:{svc.control_tcp_port}",
                     "--tls-ca", os.path.join(tls_files, "ca.pem"),
                     "--token-file", token_file, *args, target=False, check=False)


def _stderr_lines(svc, pattern, count, timeout=10):
    """The service's stderr lines matching `pattern`, once there are `count`."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in svc.stderr if re.search(pattern, line)]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_refusals_name_their_peer_and_are_counted_per_peer(tls_service, tls_files, folder):
    svc = tls_service
    wrong = _write(os.path.join(folder, "wrong.token"), os.urandom(24).hex(), 0o600)
    out = _over_tls(svc, tls_files, wrong, "info")
    assert out.returncode == 1 and "UNAUTHENTICATED" in out.stderr
    out = _over_tls(svc, tls_files, os.path.join(tls_files, "readonly.token"),
                    "scale", "workers", "3")
    assert out.returncode == 1 and "PERMISSION_DENIED" in out.stderr
    [unauthenticated] = _stderr_lines(svc, r"GetInfo -> UNAUTHENTICATED", 1)
    assert re.search(r"tls role=none peer=ipv4:127\.0\.0\.1:\d+: GetInfo -> "
                     r"UNAUTHENTICATED \(wrong bearer token\)", unauthenticated)
    [denied] = _stderr_lines(svc, r"ResizeWorkers -> PERMISSION_DENIED", 1)
    assert re.search(r"tls role=read-only peer=ipv4:127\.0\.0\.1:\d+: ResizeWorkers", denied)
    info = svc.json("info")["control"]
    [peer] = [p for p in info["refusals"] if p["peer"] == "ipv4:127.0.0.1"]
    assert peer["unauthenticated_calls"] == "1" and peer["permission_denied_calls"] == "1"
    assert peer["last_reason"] == "read-only token"
    table = svc.mtctl("info").stdout
    assert re.search(r"refused +ipv4:127\.0\.0\.1, 1 unauthenticated, 1 denied", table), table


UNAUTHENTICATED = attackers.UNAUTHENTICATED


def test_a_refusal_flood_is_logged_at_a_bounded_rate_with_exact_counts(tls_service, tls_files):
    svc = tls_service
    ca = os.path.join(tls_files, "ca.pem")
    calls = 400
    statuses = attackers.grpc_calls("/grpc.health.v1.Health/Check", calls,
                                    port=svc.control_tcp_port, ca=ca)
    assert statuses == [UNAUTHENTICATED] * calls
    # A second apart: the rate limit lets some lines of the second flood
    # through however fast the first ran.
    time.sleep(1)
    statuses = attackers.grpc_calls("/mt.control.v1.RuntimeControl/GetInfo", calls,
                                    authorization="Bearer " + "0123456789abcdef" * 2,
                                    port=svc.control_tcp_port, ca=ca)
    assert statuses == [UNAUTHENTICATED] * calls
    time.sleep(1.5)  # Let the rate limit refill: the next line reports the gap.
    assert attackers.grpc_calls("/grpc.health.v1.Health/Check", 1,
                                port=svc.control_tcp_port, ca=ca) == [UNAUTHENTICATED]
    deadline = time.monotonic() + 10  # The service's stderr comes through a pipe.
    while True:
        lines = [line for line in svc.stderr if "-> UNAUTHENTICATED" in line]
        left_out = sum(int(m.group(1)) for line in lines
                       for m in [re.search(r"\((\d+) earlier refusals not logged", line)] if m)
        if len(lines) + left_out >= 2 * calls + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # Every refusal is either a line or counted in the next line's gap.
    assert len(lines) + left_out == 2 * calls + 1, (len(lines), left_out)
    assert len(lines) < 200, "not rate limited"
    health = [line for line in lines if "Health/Check" in line]
    assert health and all(re.search(r"tls role=none peer=ipv4:127\.0\.0\.1:\d+: "
                                    r"/grpc\.health\.v1\.Health/Check -> UNAUTHENTICATED", line)
                          for line in health)
    get_info = [line for line in lines if "GetInfo" in line]
    assert get_info and all(re.search(r"peer=ipv4:127\.0\.0\.1:\d+: GetInfo", line)
                            for line in get_info)
    info = svc.json("info")["control"]
    peers = {p["peer"]: p for p in info["refusals"]}
    # Health's and GetInfo's refusals alike, under the address.
    assert peers["ipv4:127.0.0.1"]["unauthenticated_calls"] == str(2 * calls + 1)
    assert peers["ipv4:127.0.0.1"]["last_reason"].startswith("no bearer token")  # The last check.
    assert info["unlogged_refusals"] == str(left_out)


@needs_root
def test_a_connection_from_another_uid_is_logged_with_its_uid_and_pid(tls_service):
    svc = tls_service
    nobody = _nobody()
    # The private folder is the first gate; open it to reach the second.
    os.chmod(svc.runtime_dir, 0o755)
    os.chmod(os.path.dirname(svc.socket), 0o755)
    os.chmod(svc.socket, 0o666)
    probe = ("import socket, sys, os; s = socket.socket(socket.AF_UNIX); s.settimeout(10); "
             "s.connect(sys.argv[1]); print(os.getpid(), flush=True); s.recv(1)")
    proc = subprocess.run([sys.executable, "-c", probe, svc.socket], user=nobody.pw_uid,
                          group=nobody.pw_gid, capture_output=True, text=True, timeout=WAIT)
    pid = proc.stdout.strip()
    [line] = _stderr_lines(svc, r"refused a connection from uid=", 1)
    assert f"uid={nobody.pw_uid} pid={pid} on the socket" in line, line
    info = svc.json("info")["control"]
    [peer] = [p for p in info["refusals"] if p["peer"] == f"uid={nobody.pw_uid}"]
    assert peer["refused_connections"] == "1"


# --- memory: control threads come and go, their interpreter states too --------


def _rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_rss_stays_flat_while_grpc_starts_and_retires_threads():
    # Bursts of concurrent ListTasks make gRPC's sync server start threads
    # and retire them after; each calls into Python with a thread state of
    # its own. Those states used to stay behind (about 8 MiB a burst here).
    import concurrent.futures
    svc = Service()
    try:
        def list_tasks(_):
            return svc.mtctl("-o", "json", "ps", "--limit", "10", check=False).returncode

        def burst():
            with concurrent.futures.ThreadPoolExecutor(42) as pool:
                assert set(pool.map(list_tasks, range(42))) == {0}
            return set(os.listdir(f"/proc/{svc.pid}/task"))

        seen = burst() | burst()
        baseline = _rss_mib(svc.pid)
        for _ in range(8):
            seen |= burst()
        grown = _rss_mib(svc.pid) - baseline
        alive = len(os.listdir(f"/proc/{svc.pid}/task"))
        assert len(seen) >= alive + 4, "gRPC retired no thread: the test proves nothing"
        assert grown < 16, f"RSS grew {grown:.1f} MiB over 8 bursts ({len(seen)} thread ids)"
    finally:
        svc.close()


# --- after authentication: a client that never reads ---------------------------


def test_a_read_only_client_that_never_reads_cannot_starve_the_admin(tls_service, tls_files):
    svc = tls_service
    with open(os.path.join(tls_files, "readonly.token")) as f:
        read_only = "Bearer " + f.read().strip()
    threads_before = len(os.listdir(f"/proc/{svc.pid}/task"))
    socks = [attackers.zero_window_calls("/mt.control.v1.RuntimeControl/GetInfo", 16,
                                         read_only, port=svc.control_tcp_port,
                                         ca=os.path.join(tls_files, "ca.pem"))
             for _ in range(8)]
    try:
        # Let the server take all 128 calls in (a second on a calm machine;
        # bounded, for a loaded one).
        deadline = time.monotonic() + 15
        while (int(svc.json("info")["control"]["calls_over_limit"]) < 8 * 16 - 16
               and time.monotonic() < deadline):
            time.sleep(0.2)
        for _ in range(5):
            start = time.monotonic()
            info = svc.json("info")["control"]
            assert time.monotonic() - start < 1.0
            over_tls = _over_tls(svc, tls_files, os.path.join(tls_files, "admin.token"), "info")
            assert over_tls.returncode == 0, over_tls.stderr
        # 16 read-only calls are admitted; the other 112 are refused at once.
        assert int(info["calls_over_limit"]) == 8 * 16 - 16, info
        # The admitted ones lose their calls once their answers have
        # waited 10 s, and give their threads back.
        deadline = time.monotonic() + 20
        while int(svc.json("info")["control"]["cancelled_writes"]) < 16:
            assert time.monotonic() < deadline, svc.json("info")["control"]
            time.sleep(0.5)
        assert len(os.listdir(f"/proc/{svc.pid}/task")) <= threads_before + 4
    finally:
        for sock in socks:
            sock.close()


# --- before authentication: connections that never make a call -----------------


def _open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_hundreds_of_silent_tcp_peers_hold_at_most_the_cap_and_leave_nothing(
        tls_service, tls_files):
    # 500 idle connections used to stay open indefinitely and, with the
    # descriptor limit at 256, to take the listener down for good.
    svc = tls_service
    admin = os.path.join(tls_files, "admin.token")
    assert _over_tls(svc, tls_files, admin, "info").returncode == 0
    time.sleep(0.5)
    baseline = _open_fds(svc.pid)
    refused_before = int(svc.json("info")["control"].get("refused_connections", 0))
    socks = attackers.silent_peers(svc.control_tcp_port, 500, addresses=100)
    try:
        time.sleep(0.5)
        start = time.monotonic()
        info = svc.json("info")["control"]
        assert time.monotonic() - start < 1.0
        assert int(info.get("open_tcp_connections", 0)) <= 64, info
        # Two descriptors per kept connection (gRPC's and the listener's).
        assert _open_fds(svc.pid) <= baseline + 2 * 64 + 8
        # Refused at accept or closed to make room: every one counted.
        assert int(info["refused_connections"]) - refused_before >= 500 - 64
        # An operator still gets in over TLS: the oldest silent connection
        # makes room.
        start = time.monotonic()
        out = _over_tls(svc, tls_files, admin, "info")
        assert out.returncode == 0, out.stderr
        assert time.monotonic() - start < 2.0
    finally:
        for s in socks:
            s.close()
    # Gone with the attackers: the listener's duplicates and gRPC's own.
    deadline = time.monotonic() + 5
    while _open_fds(svc.pid) > baseline + 2:
        assert time.monotonic() < deadline, (_open_fds(svc.pid), baseline)
        time.sleep(0.1)
    lines = _stderr_lines(svc, r"(refused|closed) a TCP connection from ipv4:127\.0\.1\.\d+", 20)
    assert len(lines) >= 20


def test_tls_peers_that_never_call_are_closed_at_the_first_call_deadline(
        tls_service, tls_files):
    # Past the TLS handshake and HTTP/2's opening (so gRPC's own handshake
    # timeout no longer applies), then silence: only the first-call
    # deadline ends these (gRPC would keep them 60 s, the idle limit).
    import ssl

    import h2.config
    import h2.connection
    svc = tls_service
    context = ssl.create_default_context(cafile=os.path.join(tls_files, "ca.pem"))
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.set_alpn_protocols(["h2"])
    socks = []
    try:
        for _ in range(4):
            sock = context.wrap_socket(
                socket.create_connection(("127.0.0.1", svc.control_tcp_port), timeout=WAIT),
                server_hostname="localhost")
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            sock.sendall(conn.data_to_send())
            socks.append(sock)
        start = time.monotonic()
        for sock in socks:
            sock.settimeout(1)
            while True:
                assert time.monotonic() - start < 20, "a silent TLS peer was kept"
                try:
                    if sock.recv(65536) == b"":
                        break
                except (TimeoutError, socket.timeout):
                    continue
                except (ConnectionResetError, ssl.SSLError):
                    break
        assert 9 <= time.monotonic() - start < 15
    finally:
        for sock in socks:
            sock.close()
    assert _stderr_lines(svc, r"closed a TCP connection from ipv4:127\.0\.0\.1: "
                              r"no call with a valid token within 10000 ms", 4)


# --- before authentication: HTTP/2 floods inside a TLS connection --------------


def _flood_was_cut(svc, pattern, count, timeout=10):
    return len(_stderr_lines(svc, pattern, count, timeout)) >= count


def test_http2_floods_before_any_call_are_cut_and_leave_no_memory(tls_service, tls_files):
    # Measured before the listener read frames: a CONTINUATION flood
    # buffered 32 MiB of headers without closing; 20,000 unread PINGs on one
    # connection grew RSS by 64 MiB, never released.
    svc = tls_service
    ca = os.path.join(tls_files, "ca.pem")
    admin = os.path.join(tls_files, "admin.token")
    assert _over_tls(svc, tls_files, admin, "info").returncode == 0
    time.sleep(0.5)
    baseline = _rss_mib(svc.pid)
    peak = baseline
    for name, (opening, frames, pattern) in attackers.FLOODS.items():
        socks = [attackers.h2_socket(port=svc.control_tcp_port, ca=ca) for _ in range(4)]
        try:
            for sock in socks:
                if opening:
                    sock.sendall(opening)
                sent = attackers.flood_until_closed(sock, frames, 32 << 20)
                assert sent < 8 << 20, f"{name}: {sent} bytes taken without closing"
            start = time.monotonic()
            svc.json("info")
            assert time.monotonic() - start < 1.0, name
            peak = max(peak, _rss_mib(svc.pid))
        finally:
            for sock in socks:
                sock.close()
        assert _flood_was_cut(svc, r"closed a TCP connection from ipv4:127\.0\.0\.1: .*" + pattern,
                              4), name
    assert peak - baseline < 64, f"RSS rose {peak - baseline:.1f} MiB during the floods"
    time.sleep(1)
    after = _rss_mib(svc.pid)
    print(f"floods: RSS {baseline:.1f} MiB before, {peak:.1f} at most during, {after:.1f} after")
    assert after - baseline < 16, f"RSS {after - baseline:.1f} MiB above the baseline after"
    # And the listener serves on.
    assert _over_tls(svc, tls_files, admin, "info").returncode == 0
