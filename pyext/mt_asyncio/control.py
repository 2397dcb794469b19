"""Serve the gRPC control plane (``mt.control.v1``) inside this process.

The service runs on threads of its own: runtime and worker calls answer
while every worker is busy. By default it listens on a Unix socket in a
private folder, ``$XDG_RUNTIME_DIR/mt_asyncio/<pid>.sock`` (or
``/tmp/mt_asyncio-<uid>/<pid>.sock`` without XDG_RUNTIME_DIR): the folder
is 0700, the socket 0600, and every connection's peer credentials are
checked, so only this process's user (and root) get in. ``mtctl`` finds
processes there (``mtctl list``, ``mtctl --target PID ...``).

Over TCP it serves only with TLS and a bearer token on every call (the
admin token, or a read-only token that cannot change anything); see
serve() and docs/control.md.

``MT_ASYNCIO_CONTROL`` in a service's environment serves the control
plane as soon as ``mt_asyncio`` is imported: ``1``, ``true``, ``yes`` or
``on`` (any case) serve the default socket, an absolute path serves that
socket; empty, ``0``, ``false``, ``no`` and ``off`` serve nothing, and any
other value is refused with a line on stderr. ``MT_ASYNCIO_CONTROL_TCP``
(``HOST:PORT``) adds the TCP listener, with its files from
``MT_ASYNCIO_CONTROL_TLS_CERT``, ``..._TLS_KEY``, ``..._CLIENT_CA``,
``..._TOKEN_FILE`` and ``..._READONLY_TOKEN_FILE``.
``MT_ASYNCIO_CONTROL_HEALTH`` (``HOST:PORT``) adds the plaintext
health-only port for Kubernetes' probes (serve()'s ``health``).

Every file is opened once, without following a link, and checked on the
open descriptor: tokens and the TLS key must be regular files of this
user that no other user can read or write (0600 or 0400), or root's and
readable at most by its group (0640, 0440); the certificate and client
CA must belong to this user or root and be writable by nobody else.
"""

import atexit
import errno
import json
import os
import socket
import stat
import sys
import sysconfig
import threading
import weakref

from . import _core
from . import metrics as _metrics  # noqa: F401 - answers the service's GetMetrics.
from . import diagnose as _diagnose  # noqa: F401 - answers the service's Diagnose.

__all__ = ["serve", "ControlServer", "default_socket_path", "LIMITS"]

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107

_ENV = "MT_ASYNCIO_CONTROL"
# Keep _ENV_OFF in step with _start_control_from_env() in __init__.py.
_ENV_ON = frozenset(("1", "true", "yes", "on"))
_ENV_OFF = frozenset(("", "0", "false", "no", "off"))

# A token shorter than this is refused: it could be guessed.
_MIN_TOKEN_BYTES = 16
# Nor is one of fewer distinct characters. A floor against placeholders
# ("aaaa...", "abab..."), not a strength meter: a random hex token of 16
# characters has fewer than 4 distinct ones with probability 1.3e-9.
_MIN_TOKEN_DISTINCT = 4
# A longer one would not fit in the call metadata gRPC accepts.
_MAX_TOKEN_BYTES = 4096

# No certificate, key or token is this large; a bigger file (or a
# device that never ends) is refused rather than read into memory.
_MAX_FILE_BYTES = 1 << 20


# Every bound the control plane keeps on its callers: name -> (default,
# lowest, highest). Counts are whole numbers; names ending in _s are
# seconds, in _share a share of one core. serve(limits={...}) and
# MT_ASYNCIO_CONTROL_LIMITS="name=value,..." change them; docs/control.md
# says what each one bounds.
LIMITS = {
    "connections": (64, 1, 4096),                # TCP connections open at once
    "unauthenticated_per_address": (8, 1, 4096),  # ... from one address, before a valid call
    "handshake_timeout_s": (10.0, 0.1, 3600.0),  # accept to the end of TLS
    "first_call_deadline_s": (10.0, 0.1, 3600.0),  # accept to a call with a valid token
    "write_deadline_s": (10.0, 0.1, 3600.0),     # bytes or an answer waiting on a client
    "idle_connection_s": (60.0, 1.0, 86400.0),   # no call in progress
    "calls_per_connection": (8, 1, 16),          # calls in flight on one connection
    "read_only_calls": (16, 1, 48),              # read-only calls in flight, together
    "watchers": (32, 1, 48),                     # Watch streams open
    "header_block_bytes": (32768, 16384, 1 << 20),  # one HEADERS + CONTINUATIONs
    "control_frames_burst": (256, 16, 1 << 20),  # PING, SETTINGS, RST_STREAM... at once
    "control_frames_per_second": (32, 1, 1 << 20),  # ... then this many a second
    "admin_inspection_cpu_share": (0.25, 0.01, 1.0),  # Python inspection, admins
    "read_only_inspection_cpu_share": (0.05, 0.001, 1.0),  # ... read-only callers
    "inspection_wait_s": (5.0, 0.1, 600.0),      # a read-only call's wait for its turn
    "memory_quota_mib": (64, 16, 65536),         # gRPC's buffers, all connections
}


def _limits(given):
    """serve()'s `limits` checked against LIMITS: every name with its
    value (the default where not given)."""
    values = {name: default for name, (default, _, _) in LIMITS.items()}
    for name, value in dict(given or {}).items():
        if name not in LIMITS:
            raise ValueError(f"unknown control-plane limit {name!r}; the limits are "
                             + ", ".join(LIMITS))
        default, lo, hi = LIMITS[name]
        whole = isinstance(default, int)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (whole and value != int(value)) or not lo <= value <= hi):
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"control-plane limit {name} must be {kind} in [{lo}, {hi}], "
                             f"got {value!r}")
        values[name] = int(value) if whole else float(value)
    return values


def _limits_from_env(text):
    """MT_ASYNCIO_CONTROL_LIMITS ("name=value,...") as a dict for _limits."""
    limits = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            limits[name.strip()] = float(value) if "." in value else int(value)
        except ValueError:
            raise ValueError(f"expected name=value, got {item!r}") from None
    return limits


def _interpreter_info():
    return {
        "implementation": sys.implementation.name,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable or "",
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": bool(getattr(sys, "_is_gil_enabled", lambda: True)()),
    }


def _default_dir():
    # Keep in step with DefaultSocketDir() in control/src/mtctl.cc.
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "mt_asyncio")
    return f"/tmp/mt_asyncio-{os.geteuid()}"


def default_socket_path(pid=None):
    """Where serve() listens by default (for `pid`, default this process)."""
    return os.path.join(_default_dir(), f"{os.getpid() if pid is None else pid}.sock")


def _private_dir(path):
    """Make (or check) a folder only this user can enter. One found in
    another state is refused, never repaired: what others could put in it
    while it was open would stay there."""
    try:
        os.mkdir(path, 0o700)  # mkdir's mode is narrowed by the umask only.
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a folder (a link or a file is not followed)")
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise PermissionError(
            f"{path} is open to other users (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"remove it, or make it 0700 if nothing in it is foreign")


def _check_socket_folder(folder):
    """A socket given by path: its folder must be this user's (or root's)
    and writable by nobody else, or another user could swap the socket."""
    st = os.stat(folder)
    if st.st_uid not in (os.geteuid(), 0):
        raise PermissionError(
            f"the socket folder {folder} belongs to uid {st.st_uid}, not to this user or root")
    if st.st_mode & 0o022:
        raise PermissionError(
            f"the socket folder {folder} is writable by other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): another user could replace the socket; "
            f"use a folder only this user can write, or the default path")


def _remove_stale_socket(path):
    """A socket file left by a dead process is removed; a live one, or
    anything that is not a socket, is an error."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise FileExistsError(f"refusing to replace {path}: not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        os.unlink(path)
        return
    finally:
        probe.close()
    raise FileExistsError(f"another process serves {path}")


def _ownership_problem(uid, mode, euid, *, secret):
    """Why a file of owner `uid` and permission bits `mode` cannot be
    trusted by a process running as `euid`, or None.

    A secret (token, key) must be this user's and closed to everyone else
    (0600, 0400), or root's and readable at most by its group (0640,
    0440): the layout of secrets an administrator or Kubernetes provisions
    for a service's group, as PostgreSQL accepts its key. A certificate or
    CA is public but must not be replaceable: this user's or root's, and
    writable by nobody else.
    """
    if uid not in (euid, 0):
        return f"belongs to uid {uid}, not to this user or root"
    if secret:
        closed = 0o077 if uid == euid else 0o037
        if mode & closed:
            return (f"is open to other users (mode {mode:04o}); make it 0600, or 0640 "
                    f"owned by root")
    elif mode & 0o022:
        return f"is writable by other users (mode {mode:04o}); make it 0644 or narrower"
    return None


def _read_checked(path, what, *, secret):
    """The contents of `path`, opened once without following a link and
    checked on the open descriptor (so it cannot be swapped between the
    check and the read), by _ownership_problem()'s rules."""
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PermissionError(
                errno.ELOOP, f"the {what} {path} is a symbolic link; give the file itself"
            ) from None
        raise OSError(exc.errno, f"cannot read the {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            raise PermissionError(f"the {what} {path} is not a regular file")
        problem = _ownership_problem(st.st_uid, mode, os.geteuid(), secret=secret)
        if problem is not None:
            raise PermissionError(f"the {what} {path} {problem}")
        if st.st_size > _MAX_FILE_BYTES:
            raise ValueError(f"the {what} {path} is larger than {_MAX_FILE_BYTES} bytes")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > _MAX_FILE_BYTES:
                raise ValueError(f"the {what} {path} is larger than {_MAX_FILE_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _is_periodic(text):
    """Whether `text` is a shorter string repeated ("abcabcabc"): exactly
    then is it found in its doubling with the ends cut off."""
    return len(text) > 1 and text in (text + text)[1:-1]


def _token_problem(token):
    """Why `token` (bytes) cannot be a bearer token, or None."""
    if len(token) < _MIN_TOKEN_BYTES:
        return f"holds fewer than {_MIN_TOKEN_BYTES} bytes"
    if len(token) > _MAX_TOKEN_BYTES:
        return f"holds more than {_MAX_TOKEN_BYTES} bytes"
    if any(b < 0x21 or b > 0x7E for b in token):
        return "must be printable ASCII without spaces"
    if len(set(token)) < _MIN_TOKEN_DISTINCT or _is_periodic(token):
        return (f"does not look random (fewer than {_MIN_TOKEN_DISTINCT} distinct "
                f"characters, or a repeated pattern); make one with `openssl rand -hex 24`")
    return None


def _read_token(path, what):
    token = _read_checked(path, what, secret=True).strip()
    problem = _token_problem(token)
    if problem is not None:
        raise ValueError(f"the {what} {os.fspath(path)} {problem}")
    return token.decode("ascii")


def _tcp_address(tcp, what="tcp"):
    """"HOST:PORT", or (host, port) with an IPv6 host bracketed."""
    if isinstance(tcp, str):
        host, sep, port = tcp.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"{what} must be 'HOST:PORT' or (host, port), not {tcp!r}")
        return tcp
    host, port = tcp
    port = int(port)
    if not 0 <= port <= 65535:
        raise ValueError(f"{what} port out of range: {port}")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _tcp_options(tcp, tls_cert, tls_key, client_ca, token_file, readonly_token_file):
    if tls_cert is None or tls_key is None:
        raise ValueError("serving over TCP needs TLS: give tls_cert and tls_key")
    if token_file is None:
        raise ValueError("serving over TCP needs a bearer token: give token_file")
    admin = _read_token(token_file, "token file")
    read_only = ""
    if readonly_token_file is not None:
        read_only = _read_token(readonly_token_file, "read-only token file")
        if read_only == admin:
            raise ValueError("the read-only token must differ from the admin token")
    return {
        "address": _tcp_address(tcp),
        "cert_chain_pem": _read_checked(tls_cert, "TLS certificate", secret=False)
                          .decode("ascii", "replace"),
        "private_key_pem": _read_checked(tls_key, "TLS key", secret=True)
                           .decode("ascii", "replace"),
        "client_ca_pem": ("" if client_ca is None else
                          _read_checked(client_ca, "client CA", secret=False)
                          .decode("ascii", "replace")),
        "admin_token": admin,
        "read_only_token": read_only,
    }


class ControlServer:
    """A running control service. Use as a context manager or call close()."""

    def __init__(self, native, path, tcp_host=None):
        self._native = native
        self.path = path
        self.target = "unix://" + path
        # The TCP listener, when served: its port (chosen by the system
        # when asked for port 0) and an mtctl target for it.
        self.tcp_port = native.tcp_port or None
        self.tcp_target = (None if self.tcp_port is None
                           else f"{tcp_host}:{self.tcp_port}")
        # The health-only port, when served (see serve(health=)).
        self.health_port = native.health_port or None
        self._lock = threading.Lock()

    def close(self, grace=1.0):
        """Stop serving (calls in progress get `grace` seconds) and remove
        the socket. Idempotent."""
        with self._lock:
            native, self._native = self._native, None
        if native is not None:
            native.stop(float(grace))

    stop = close  # The name earlier releases used.

    def _stats(self):
        native = self._native
        if native is None:
            return None
        text = native.control_stats_json()
        return json.loads(text) if text else None  # "": stopped meanwhile.

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._native is None else "serving"
        tcp = "" if self.tcp_target is None else f" tls://{self.tcp_target}"
        return f"<ControlServer {state} {self.target}{tcp}>"


# The services this process serves, for the metrics page's control
# counters (mt_asyncio.metrics).
_servers = weakref.WeakSet()


def _live_stats():
    """ControlStats (proto3 JSON as a dict) of the first service still
    serving, or None."""
    for server in list(_servers):
        stats = server._stats()
        if stats is not None:
            return stats
    return None


def serve(path=None, *, tcp=None, tls_cert=None, tls_key=None, client_ca=None,
          token_file=None, readonly_token_file=None, limits=None, health=None):
    """Start the control service and return a ControlServer.

    ``path`` is the Unix socket (default: default_socket_path(), in a
    private folder made on demand). A given path's folder must exist,
    belong to this user or root and be writable by nobody else; a stale
    socket there is replaced, a live one is an error. The socket is
    always served; only this process's user and root may connect.

    ``tcp`` (``"HOST:PORT"`` or ``(host, port)``; port 0 picks a free one,
    see ControlServer.tcp_port) adds a TCP listener, which serves only over
    TLS (``tls_cert`` and ``tls_key``: PEM files; ``client_ca``: also
    require client certificates signed by it) and only to calls carrying a
    bearer token: the one in ``token_file`` may call everything, the one in
    ``readonly_token_file`` (optional) only the methods that change
    nothing. Token and key files must be this user's and closed to others
    (0600), or root's and readable at most by its group (0640); no file
    may be a symbolic link.

    ``limits`` changes the bounds the service keeps on its callers (a dict
    of names in LIMITS to values; ValueError for an unknown name or a value
    out of range).

    ``health`` (``"HOST:PORT"`` or ``(host, port)``; port 0 picks a free
    one, see ControlServer.health_port) adds a plaintext gRPC port that
    serves only ``grpc.health.v1`` (for Kubernetes' gRPC probes and
    grpc-health-probe, which carry neither TLS nor a token): SERVING until
    Drain or Shutdown, and nothing else reachable there.
    """
    limit_values = _limits(limits)
    tcp_options = None
    if tcp is not None:
        tcp_options = _tcp_options(tcp, tls_cert, tls_key, client_ca, token_file,
                                   readonly_token_file)
    elif any(v is not None for v in (tls_cert, tls_key, client_ca, token_file,
                                     readonly_token_file)):
        raise ValueError("the TLS and token options are for the TCP listener: give tcp=")
    if path is None:
        path = default_socket_path()
        _private_dir(os.path.dirname(path))
    path = os.path.abspath(os.fspath(path))
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise ValueError(f"socket path longer than {_MAX_SOCKET_PATH} bytes: {path!r}")
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"socket folder does not exist: {folder}")
    _check_socket_folder(folder)
    _remove_stale_socket(path)
    try:
        from . import _control  # Loaded on demand: it links gRPC.
    except ImportError as exc:
        raise ImportError(
            "mt_asyncio's control extension is not available: " + str(exc)) from exc
    health_address = "" if health is None else _tcp_address(health, "health")
    native = _control.serve(path, _core._admin_abi, _interpreter_info(), tcp_options,
                            limit_values, health_address)
    tcp_host = None
    if tcp_options is not None:
        tcp_host = tcp_options["address"].rpartition(":")[0]
    server = ControlServer(native, path, tcp_host)
    _servers.add(server)
    # Its threads attach to the interpreter for loop and task calls: they
    # must be gone before it finalizes (close() is idempotent).
    atexit.register(server.close)
    return server


_from_env = None


def _socket_from_env(value):
    """MT_ASYNCIO_CONTROL's value as serve()'s path: False for off, None
    for the default socket, or an absolute path. Anything else (a typo, a
    relative path) is refused rather than taken as a socket's name."""
    word = value.strip().lower()
    if word in _ENV_OFF:
        return False
    if word in _ENV_ON:
        return None
    if value.startswith("/"):
        return value
    raise ValueError(
        "expected 1, true, yes or on (the default socket), an absolute path, "
        "or 0, false, no or off")


def _serve_from_env():
    """MT_ASYNCIO_CONTROL: serve when mt_asyncio is imported."""
    global _from_env
    value = os.environ.get(_ENV, "")
    if _from_env is not None:
        return
    try:
        path = _socket_from_env(value)
    except ValueError as exc:
        print(f"mt_asyncio: {_ENV}={value!r}: control plane not started: {exc}",
              file=sys.stderr)
        return
    if path is False:
        return
    options = {}
    try:
        options["limits"] = _limits(_limits_from_env(os.environ.get(_ENV + "_LIMITS", "")))
    except ValueError as exc:
        print(f"mt_asyncio: {_ENV}_LIMITS: control plane not started: {exc}", file=sys.stderr)
        return
    if os.environ.get(_ENV + "_HEALTH"):
        options["health"] = os.environ[_ENV + "_HEALTH"]
    if os.environ.get(_ENV + "_TCP"):
        options["tcp"] = os.environ[_ENV + "_TCP"]
        for key in ("tls_cert", "tls_key", "client_ca", "token_file", "readonly_token_file"):
            file = os.environ.get(f"{_ENV}_{key.upper()}")
            if file:
                options[key] = file
    try:
        _from_env = serve(path, **options)
    except Exception as exc:  # noqa: BLE001 - the service must still start.
        print(f"mt_asyncio: {_ENV}={value!r}: control plane not started: {exc}",
              file=sys.stderr)
