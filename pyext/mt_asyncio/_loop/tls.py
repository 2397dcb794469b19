"""TLS over mt_asyncio's transports with the ssl module.

The TLS state machine is stdlib's own ``asyncio.sslproto.SSLProtocol``
(memory BIOs per connection, handshake and shutdown timeouts,
close_notify), run as the protocol of a C++ SocketTransport. It runs on the
connection's strand like every protocol callback, and so do the handshake
and shutdown timers it starts. The application's transport is stdlib's,
with one change: a call from outside the connection's strand (another
task, a plain thread) is handed to the strand instead of touching the
SSLObject on two threads at once (``SocketTransport._call_serialized``).
"""

from asyncio import sslproto

__all__ = ["TLSProtocol"]


def _raw(app_transport):
    protocol = app_transport._ssl_protocol
    return protocol._transport if protocol is not None else None


class _AppTransport(sslproto._SSLProtocolTransport):
    """stdlib's TLS application transport, safe from any thread."""

    def _serialized(self, method, *args):
        raw = _raw(self)
        if raw is None:
            return method(*args)
        return raw._call_serialized(method, *args)

    # What start_tls() calls to switch protocols on the connection's strand:
    # TLS over this TLS connection runs on the raw connection's strand too.
    _call_serialized = _serialized

    def write(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, "
                            f"got {type(data).__name__}")
        if not data:
            return
        if not isinstance(data, bytes):
            data = bytes(data)  # The caller may reuse its buffer at once.
        self._serialized(super().write, data)

    def writelines(self, list_of_data):
        self._serialized(super().writelines,
                         [bytes(d) if not isinstance(d, bytes) else d
                          for d in list_of_data])

    def close(self):
        self._serialized(super().close)

    def abort(self):
        self._serialized(super().abort)

    def pause_reading(self):
        self._serialized(super().pause_reading)

    def resume_reading(self):
        self._serialized(super().resume_reading)

    def set_write_buffer_limits(self, high=None, low=None):
        self._serialized(super().set_write_buffer_limits, high, low)

    def set_read_buffer_limits(self, high=None, low=None):
        self._serialized(super().set_read_buffer_limits, high, low)


class TLSProtocol(sslproto.SSLProtocol):
    """stdlib's SSLProtocol, handing the application _AppTransport."""

    def _get_app_transport(self):
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError("Creating _SSLProtocolTransport twice")
            self._app_transport = _AppTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport
