"""Serve the gRPC control plane (``mt.control.v1``) inside this process.

The service runs on threads of its own, so it answers while every worker is
busy. It listens on a Unix socket created with mode 0600; connect with
``mtctl --target unix:///PATH info``.
"""

import os
import sys
import sysconfig

from . import _core

__all__ = ["serve", "ControlServer"]

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


def _interpreter_info():
    return {
        "implementation": sys.implementation.name,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable or "",
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": bool(getattr(sys, "_is_gil_enabled", lambda: True)()),
    }


class ControlServer:
    """A running control service. Use as a context manager or call stop()."""

    def __init__(self, native, target):
        self._native = native
        self.target = target

    def stop(self, grace=1.0):
        self._native.stop(float(grace))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


def serve(path):
    """Start the control service on the Unix socket at ``path``.

    The socket's folder must exist; a stale socket file at ``path`` is
    replaced. Returns a ControlServer.
    """
    path = os.fspath(path)
    if not path:
        raise ValueError("serve() needs a socket path")
    if len(os.fsencode(os.path.abspath(path))) > _MAX_SOCKET_PATH:
        raise ValueError(
            f"socket path longer than {_MAX_SOCKET_PATH} bytes: {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"socket folder does not exist: {folder}")
    try:
        from . import _control  # Loaded on demand: it links gRPC.
    except ImportError as exc:
        raise ImportError(
            "mt_asyncio's control extension is not available: " + str(exc)) from exc
    target = "unix://" + os.path.abspath(path)
    native = _control.serve(target, os.path.abspath(path), _core._admin_api,
                            _interpreter_info())
    return ControlServer(native, target)
