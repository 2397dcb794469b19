"""Hostile clients of the control plane, in raw HTTP/2 (the h2 package):
what the hostile suites send, where a real gRPC client would refuse to.

Each connects to a TLS port (`port`, trusting `ca`) or, with `unix=PATH`,
to the Unix socket, where HTTP/2 travels in the clear."""

import socket
import ssl
import time

WAIT = 30

GRPC_OK = 0
RESOURCE_EXHAUSTED = 8
UNAUTHENTICATED = 16


def frame(kind, flags, stream, payload=b""):
    """One HTTP/2 frame, built by hand."""
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) +
            (stream & 0x7FFFFFFF).to_bytes(4, "big") + payload)


def list_tasks_request(page_size):
    """ListTasksRequest{page_size} in protobuf's wire format (field 4)."""
    out, value = bytearray([0x20]), page_size
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def watch_request(interval_seconds, include_loops=False):
    """WatchRequest{interval_seconds, include_loops} in the wire format."""
    import struct
    return (b"\x09" + struct.pack("<d", interval_seconds) +
            (b"\x10\x01" if include_loops else b""))


def grpc_message(body=b""):
    """A gRPC length-prefixed, uncompressed message."""
    return b"\x00" + len(body).to_bytes(4, "big") + body


def connect(port=None, ca=None, unix=None, source=None, plain=None):
    """A connected socket: TLS with ALPN h2 to 127.0.0.1:port, plaintext
    TCP to 127.0.0.1:plain, or the Unix socket `unix`. `source` binds a
    TCP connection's local address."""
    if plain is not None:
        return socket.create_connection(("127.0.0.1", plain), timeout=WAIT)
    if unix is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(WAIT)
        sock.connect(unix)
        return sock
    context = ssl.create_default_context(cafile=ca)
    # The test CA (openssl req -x509) has no key-usage extension, which
    # Python's strict default refuses; gRPC's clients accept it.
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT,
                                   source_address=(source, 0) if source else None)
    return context.wrap_socket(raw, server_hostname="localhost")


def _headers(path, authorization, scheme):
    headers = [(":method", "POST"), (":scheme", scheme), (":path", path),
               (":authority", "localhost"), ("content-type", "application/grpc"),
               ("te", "trailers")]
    if authorization:
        headers.append(("authorization", authorization))
    return headers


def grpc_calls(path, count, authorization=None, body=b"", at_once=8, until=None, **where):
    """`count` unary calls of `path` with the request `body` on one
    connection, `at_once` streams at a time, reading every answer (with
    `until`, a time.monotonic() value: no new batch after it); returns
    their grpc-status values (-1 for a stream the server reset)."""
    import h2.config
    import h2.connection
    import h2.events
    sock = connect(**where)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    headers = _headers(path, authorization,
                       "http" if "unix" in where or "plain" in where else "https")
    statuses = []
    try:
        while len(statuses) < count and (until is None or time.monotonic() < until):
            batch = {}
            for _ in range(min(at_once, count - len(statuses))):
                stream = conn.get_next_available_stream_id()
                conn.send_headers(stream, headers)
                conn.send_data(stream, grpc_message(body), end_stream=True)
                batch[stream] = None
            sock.sendall(conn.data_to_send())
            while any(v is None for v in batch.values()):
                data = sock.recv(65536)
                assert data, "the server closed the connection"
                for event in conn.receive_data(data):
                    if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                        found = dict((k.decode() if isinstance(k, bytes) else k,
                                      v.decode() if isinstance(v, bytes) else v)
                                     for k, v in event.headers)
                        if "grpc-status" in found and event.stream_id in batch:
                            batch[event.stream_id] = int(found["grpc-status"])
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, h2.events.StreamReset) and event.stream_id in batch:
                        batch[event.stream_id] = -1
                pending = conn.data_to_send()
                if pending:
                    sock.sendall(pending)
            statuses.extend(batch.values())
    finally:
        sock.close()
    return statuses


class Channel:
    """One HTTP/2 connection that makes unary calls one at a time, as a
    monitoring agent does: it keeps its connection, so it needs no new
    descriptor in the service to be answered. Reconnects after a failure."""

    def __init__(self, authorization=None, **where):
        self.authorization = authorization
        self.where = where
        self.sock = None
        self.conn = None

    def _open(self):
        import h2.config
        import h2.connection
        self.sock = connect(**self.where)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.sock = self.conn = None

    def call(self, path, body=b"", timeout=5.0):
        """The call's grpc-status; raises OSError (and closes) when the
        connection fails or the answer takes longer than `timeout`."""
        import h2.events
        if self.sock is None:
            self._open()
        try:
            self.sock.settimeout(timeout)
            stream = self.conn.get_next_available_stream_id()
            self.conn.send_headers(stream, _headers(path, self.authorization,
                                                    "http" if "unix" in self.where else "https"))
            self.conn.send_data(stream, grpc_message(body), end_stream=True)
            self.sock.sendall(self.conn.data_to_send())
            while True:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the server closed the connection")
                for event in self.conn.receive_data(data):
                    if isinstance(event, h2.events.DataReceived):
                        self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                            event.stream_id)
                    elif (isinstance(event, (h2.events.ResponseReceived,
                                             h2.events.TrailersReceived))
                          and event.stream_id == stream):
                        found = dict((k.decode() if isinstance(k, bytes) else k,
                                      v.decode() if isinstance(v, bytes) else v)
                                     for k, v in event.headers)
                        if "grpc-status" in found:
                            self.sock.sendall(self.conn.data_to_send())
                            return int(found["grpc-status"])
                    elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream:
                        return -1
                pending = self.conn.data_to_send()
                if pending:
                    self.sock.sendall(pending)
        except Exception:
            self.close()
            raise


def zero_window_calls(path, streams, authorization, body=b"", **where):
    """A connection that opens `streams` calls of `path` and never lets the
    server send a byte of any answer (stream windows of 0, never raised).
    Returns the socket: the calls last until it is closed."""
    import h2.config
    import h2.connection
    import h2.settings
    sock = connect(**where)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.local_settings = h2.settings.Settings(
        client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
    conn.initiate_connection()
    headers = _headers(path, authorization,
                       "http" if "unix" in where or "plain" in where else "https")
    for _ in range(streams):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, headers)
        conn.send_data(stream, grpc_message(body), end_stream=True)
    sock.sendall(conn.data_to_send())
    return sock


def silent_peers(port, count, addresses):
    """`count` plain TCP connections to `port` from `addresses` sources of
    127.0.1.0/24, round robin, that never send a byte."""
    socks = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((f"127.0.1.{i % addresses + 1}", 0))
        s.settimeout(WAIT)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def h2_socket(**where):
    """A connection that has sent the HTTP/2 preface and an empty SETTINGS."""
    sock = connect(**where)
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0))
    return sock


def flood_until_closed(sock, frames, limit_bytes):
    """Sends `frames` (bytes, repeated) until the server closes the
    connection, stops taking bytes for 5 s, or `limit_bytes` are sent;
    returns the bytes sent. Never reads what the server sends."""
    sent = 0
    sock.settimeout(5)
    try:
        while sent < limit_bytes:
            sock.sendall(frames)
            sent += len(frames)
    except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError, socket.timeout):
        pass
    return sent


# The floods of HTTP/2 frames a peer can send without making a call:
# name -> (what opens it, the frames repeated, the words of the line that
# names the limit when the listener cuts it).
FLOODS = {
    # A header block that never ends: HEADERS, then CONTINUATIONs.
    "continuation": (frame(0x1, 0, 1, b"\x00" * 16384),
                     frame(0x9, 0, 1, b"\x00" * 16384) * 64,
                     r"a header block of more than 32768 bytes"),
    # PINGs whose answers are never read.
    "ping": (b"", frame(0x6, 0, 0, b"\x00" * 8) * 1000,
             r"PING, SETTINGS, RST_STREAM, PRIORITY, WINDOW_UPDATE or empty DATA frames"),
    # SETTINGS, each owed an acknowledgement.
    "settings": (b"", frame(0x4, 0, 0) * 1000, r"PING, SETTINGS"),
    # Streams opened and reset at once (the "rapid reset").
    "rapid reset": (b"", b"".join(frame(0x1, 0x4, s, b"\x82\x87\x84") +
                                  frame(0x3, 0, s, b"\x00\x00\x00\x08")
                                  for s in range(1, 2000, 2)),
                    r"PING, SETTINGS"),
}
