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

Setting ``MT_ASYNCIO_CONTROL=1`` in a service's environment serves the
default socket as soon as ``mt_asyncio`` is imported; any other non-empty
value except ``0`` is taken as the socket's path. ``MT_ASYNCIO_CONTROL_TCP``
(``HOST:PORT``) adds the TCP listener, with its files from
``MT_ASYNCIO_CONTROL_TLS_CERT``, ``..._TLS_KEY``, ``..._CLIENT_CA``,
``..._TOKEN_FILE`` and ``..._READONLY_TOKEN_FILE``.
"""

import atexit
import errno
import os
import socket
import stat
import sys
import sysconfig
import threading

from . import _core

__all__ = ["serve", "ControlServer", "default_socket_path"]

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107

_ENV = "MT_ASYNCIO_CONTROL"

# A token shorter than this is refused: it could be guessed.
_MIN_TOKEN_BYTES = 16


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
    """Make (or check) a folder only this user can enter."""
    try:
        os.mkdir(path, 0o700)  # mkdir's mode is narrowed by the umask only.
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path} is not a folder")
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)


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


def _read_file(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot read the {what} {path}: {exc.strerror}") from None


def _read_secret(path, what):
    """A token or private key file: refused when other users can read it
    (as ssh refuses such keys)."""
    path = os.fspath(path)
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"the {what} {path} is not a regular file")
    if st.st_mode & 0o007:
        raise PermissionError(
            f"the {what} {path} is open to other users (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); make it 0600 or 0640")
    return _read_file(path, what)


def _read_token(path, what):
    token = _read_secret(path, what).strip()
    if len(token) < _MIN_TOKEN_BYTES:
        raise ValueError(f"the {what} {path} holds fewer than {_MIN_TOKEN_BYTES} bytes")
    if any(b < 0x21 or b > 0x7E for b in token):
        raise ValueError(f"the {what} {path} must be printable ASCII without spaces")
    return token.decode("ascii")


def _tcp_address(tcp):
    """"HOST:PORT", or (host, port) with an IPv6 host bracketed."""
    if isinstance(tcp, str):
        host, sep, port = tcp.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"tcp must be 'HOST:PORT' or (host, port), not {tcp!r}")
        return tcp
    host, port = tcp
    port = int(port)
    if not 0 <= port <= 65535:
        raise ValueError(f"tcp port out of range: {port}")
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
        "cert_chain_pem": _read_file(tls_cert, "TLS certificate").decode("ascii", "replace"),
        "private_key_pem": _read_secret(tls_key, "TLS key").decode("ascii", "replace"),
        "client_ca_pem": ("" if client_ca is None else
                          _read_file(client_ca, "client CA").decode("ascii", "replace")),
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
        self._lock = threading.Lock()

    def close(self, grace=1.0):
        """Stop serving (calls in progress get `grace` seconds) and remove
        the socket. Idempotent."""
        with self._lock:
            native, self._native = self._native, None
        if native is not None:
            native.stop(float(grace))

    stop = close  # The name earlier releases used.

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._native is None else "serving"
        tcp = "" if self.tcp_target is None else f" tls://{self.tcp_target}"
        return f"<ControlServer {state} {self.target}{tcp}>"


def serve(path=None, *, tcp=None, tls_cert=None, tls_key=None, client_ca=None,
          token_file=None, readonly_token_file=None):
    """Start the control service and return a ControlServer.

    ``path`` is the Unix socket (default: default_socket_path(), in a
    private folder made on demand). A given path's folder must exist; a
    stale socket there is replaced, a live one is an error. The socket is
    always served; only this process's user and root may connect.

    ``tcp`` (``"HOST:PORT"`` or ``(host, port)``; port 0 picks a free one,
    see ControlServer.tcp_port) adds a TCP listener, which serves only over
    TLS (``tls_cert`` and ``tls_key``: PEM files; ``client_ca``: also
    require client certificates signed by it) and only to calls carrying a
    bearer token: the one in ``token_file`` may call everything, the one in
    ``readonly_token_file`` (optional) only the methods that change
    nothing. Token and key files must not be open to other users.
    """
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
    _remove_stale_socket(path)
    try:
        from . import _control  # Loaded on demand: it links gRPC.
    except ImportError as exc:
        raise ImportError(
            "mt_asyncio's control extension is not available: " + str(exc)) from exc
    native = _control.serve(path, _core._admin_abi, _interpreter_info(), tcp_options)
    tcp_host = None
    if tcp_options is not None:
        tcp_host = tcp_options["address"].rpartition(":")[0]
    server = ControlServer(native, path, tcp_host)
    # Its threads attach to the interpreter for loop and task calls: they
    # must be gone before it finalizes (close() is idempotent).
    atexit.register(server.close)
    return server


_from_env = None


def _serve_from_env():
    """MT_ASYNCIO_CONTROL: serve when mt_asyncio is imported."""
    global _from_env
    value = os.environ.get(_ENV, "")
    if not value or value == "0" or _from_env is not None:
        return
    tcp = {}
    if os.environ.get(_ENV + "_TCP"):
        tcp = {"tcp": os.environ[_ENV + "_TCP"]}
        for key in ("tls_cert", "tls_key", "client_ca", "token_file", "readonly_token_file"):
            file = os.environ.get(f"{_ENV}_{key.upper()}")
            if file:
                tcp[key] = file
    try:
        _from_env = serve(None if value == "1" else value, **tcp)
    except Exception as exc:  # noqa: BLE001 - the service must still start.
        print(f"mt_asyncio: {_ENV}={value!r}: control plane not started: {exc}",
              file=sys.stderr)
