"""loop.sendfile(transport, file, ...): a file sent over a transport.

A plain stream transport of ours sends it with os.sendfile from the file
to the socket: the transport flushes what it had buffered, holds write()
off meanwhile, and wakes the sender each time the socket takes more.
Otherwise (TLS; a file os.sendfile cannot read, with fallback=True) the
file is read in chunks on the blocking pool and written with flow control.
Both hold the connection's reading with a stand-in protocol that waits out
pause_writing and passes connection_lost on.
"""

import errno
import os

from asyncio import constants, exceptions, protocols

from .. import _core
from . import sockets

__all__ = ["SendfileMethods"]

_CHUNK = 64 * 1024


class _FlowProtocol(protocols.Protocol):
    """Stands in for a transport's protocol while a file is written:
    reading is paused, pause_writing/resume_writing gate the writer, and
    connection_lost reaches the real protocol."""

    def __init__(self, loop, transport):
        self._loop = loop
        self._transport = transport
        self._proto = transport.get_protocol()
        self._resume_reading = transport.is_reading()
        self._was_paused = bool(getattr(transport, "_protocol_paused", False))
        transport.pause_reading()
        transport.set_protocol(self)
        self._ready = loop.create_future() if self._was_paused else None

    async def drain(self):
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        ready = self._ready
        if ready is not None:
            await ready

    def pause_writing(self):
        if self._ready is None:
            self._ready = self._loop.create_future()

    def resume_writing(self):
        ready, self._ready = self._ready, None
        if ready is not None and not ready.done():
            ready.set_result(None)

    def connection_lost(self, exc):
        ready = self._ready
        if ready is not None and not ready.done():
            ready.set_exception(exc if exc is not None else
                                ConnectionError("Connection is closed by peer"))
        self._proto.connection_lost(exc)

    def data_received(self, data):
        raise RuntimeError("Invalid state: reading should be paused")

    def eof_received(self):
        raise RuntimeError("Invalid state: reading should be paused")

    def restore(self):
        self._transport.set_protocol(self._proto)
        if self._resume_reading:
            self._transport.resume_reading()
        ready, self._ready = self._ready, None
        if ready is not None:
            ready.cancel()
        if self._was_paused:
            self._proto.resume_writing()


class SendfileMethods:
    """Mixed into mt_asyncio's EventLoop."""

    async def sendfile(self, transport, file, offset=0, count=None, *,
                       fallback=True):
        """Send file over transport; return the number of bytes sent. The
        file position is left after what was sent, also on error."""
        if transport.is_closing():
            raise RuntimeError("Transport is closing")
        mode = getattr(transport, "_sendfile_compatible",
                       constants._SendfileMode.UNSUPPORTED)
        if mode is constants._SendfileMode.UNSUPPORTED:
            raise RuntimeError(
                f"sendfile is not supported for transport {transport!r}")
        if mode is constants._SendfileMode.TRY_NATIVE:
            try:
                return await self._sendfile_native(transport, file, offset, count)
            except exceptions.SendfileNotAvailableError:
                if not fallback:
                    raise
        if not fallback:
            raise RuntimeError(
                f"fallback is disabled and native sendfile is not "
                f"supported for transport {transport!r}")
        return await self._sendfile_fallback(transport, file, offset, count)

    async def _sendfile_native(self, transport, file, offset, count):
        if not isinstance(transport, _core.SocketTransport) or \
                transport._is_tls or not hasattr(os, "sendfile"):
            raise exceptions.SendfileNotAvailableError(
                "sendfile syscall is not supported")
        try:
            fileno = file.fileno()
            fsize = os.fstat(fileno).st_size
        except (AttributeError, OSError, ValueError) as err:
            raise exceptions.SendfileNotAvailableError(
                "not a regular file") from err
        blocksize = count if count else fsize
        if not blocksize:
            return 0  # Empty file.
        end = offset + count if count else fsize
        sock_fd = transport.get_extra_info("socket").fileno()
        transport._sendfile_begin()
        proto = _FlowProtocol(self, transport)
        sent = 0
        try:
            while offset + sent < end:
                await transport._wait_writable()
                size = min(end - offset - sent, 0x7fff_f000)
                try:
                    n = os.sendfile(sock_fd, fileno, offset + sent, size)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    if sent == 0 and exc.errno in (errno.EINVAL, errno.ENOTSOCK,
                                                   errno.ENOSYS):
                        raise exceptions.SendfileNotAvailableError(
                            "os.sendfile call failed") from exc
                    if isinstance(exc, ConnectionError):
                        # The connection is gone: the transport closes now,
                        # with this error, as stdlib's does once its read
                        # side meets the reset. Here the read side runs on
                        # the connection's strand, possibly on another
                        # worker and later, and the caller that catches
                        # this expects is_closing() already.
                        transport._force_close(exc)
                    raise
                if n == 0:
                    break  # The file ended early.
                sent += n
            return sent
        finally:
            if (sent > 0 or sockets._SENDFILE_ALWAYS_SETS_POSITION) and \
                    hasattr(file, "seek"):
                file.seek(offset + sent)
            transport._sendfile_end()
            proto.restore()

    async def _sendfile_fallback(self, transport, file, offset, count):
        if hasattr(file, "seek"):
            file.seek(offset)
        blocksize = min(count, _CHUNK) if count else _CHUNK
        buf = bytearray(blocksize)
        sent = 0
        proto = _FlowProtocol(self, transport)
        try:
            while True:
                if count:
                    blocksize = min(count - sent, blocksize)
                    if blocksize <= 0:
                        return sent
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    return sent
                transport.write(view[:read])
                await proto.drain()
                sent += read
        finally:
            if sent > 0 and hasattr(file, "seek"):
                file.seek(offset + sent)
            proto.restore()


# What loop.sendfile() does with a stream transport of ours: a TLS one has
# to encrypt what it sends, so reads and writes it (stdlib's TLS transports
# say the same).
_core.SocketTransport._sendfile_compatible = property(
    lambda transport: constants._SendfileMode.FALLBACK if transport._is_tls
    else constants._SendfileMode.TRY_NATIVE)
