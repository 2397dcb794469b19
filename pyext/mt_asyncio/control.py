"""Serve the gRPC control plane (``mt.control.v1``) inside this process.

The service runs on threads of its own: runtime and worker calls answer
while every worker is busy. By default it listens on a Unix socket in a
private folder, ``$XDG_RUNTIME_DIR/mt_asyncio/<pid>.sock`` (or
``/tmp/mt_asyncio-<uid>/<pid>.sock`` without XDG_RUNTIME_DIR): the folder
is 0700, the socket 0600, and every connection's peer credentials are
checked, so only this process's user (and root) get in. ``mtctl`` finds
processes there (``mtctl list``, ``mtctl --target PID ...``).

Setting ``MT_ASYNCIO_CONTROL=1`` in a service's environment serves the
default socket as soon as ``mt_asyncio`` is imported; any other non-empty
value except ``0`` is taken as the socket's path.
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


class ControlServer:
    """A running control service. Use as a context manager or call close()."""

    def __init__(self, native, path):
        self._native = native
        self.path = path
        self.target = "unix://" + path
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
        return f"<ControlServer {state} {self.target}>"


def serve(path=None, *, tcp=None, tls_cert=None, tls_key=None, client_ca=None,
          token_file=None, readonly_token_file=None):
    """Start the control service and return a ControlServer.

    ``path`` is the Unix socket (default: default_socket_path(), in a
    private folder made on demand). A given path's folder must exist; a
    stale socket there is replaced, a live one is an error.

    ``tcp`` and the TLS/token options are reserved for serving over TCP
    (only with TLS and a bearer token); that is not implemented yet and
    raises NotImplementedError.
    """
    if tcp is not None or any(v is not None for v in (
            tls_cert, tls_key, client_ca, token_file, readonly_token_file)):
        raise NotImplementedError(
            "serving the control plane over TCP (TLS + token) is not "
            "implemented yet; use the Unix socket")
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
    native = _control.serve(path, _core._admin_abi, _interpreter_info())
    server = ControlServer(native, path)
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
    try:
        _from_env = serve(None if value == "1" else value)
    except Exception as exc:  # noqa: BLE001 - the service must still start.
        print(f"mt_asyncio: {_ENV}={value!r}: control plane not started: {exc}",
              file=sys.stderr)
