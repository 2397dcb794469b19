"""The loop's pipe transports: connect_read_pipe() and connect_write_pipe().

Each pipe transport is one strand, as a socket connection is
(``pyext/src/net/transport.h``): its fd watchers and the protocol callbacks
they schedule run one at a time, in order, on whichever worker is free,
and the code that made the transport (a task) excludes them while it runs,
so a protocol feeding a StreamReader and the task reading from it see each
other as on a one-thread loop. The transports of one child process share
one strand (_loop/processes.py).

write() is safe from any thread: the buffer and the closing state are under
the transport's lock; the fd is written at once when nothing waits, and the
rest is flushed by a writer watcher on the strand.
"""

import errno
import logging
import os
import stat
import threading
import warnings

from asyncio import transports

from .. import _core

__all__ = ["PipeMethods", "ReadPipeTransport", "WritePipeTransport"]

logger = logging.getLogger("asyncio")

# What one read takes from a pipe (stdlib's read pipes read 256 KiB).
_READ_SIZE = 256 * 1024
# write() after the pipe is gone logs a warning from this many calls on.
_WARN_AFTER_LOST_WRITES = 5


def _resolve(waiter):
    if waiter is not None and not waiter.cancelled():
        try:
            waiter.set_result(None)
        except Exception:  # noqa: BLE001 - done by another path meanwhile.
            pass


class _PipeTransport:
    """What both pipe directions share: the fd, the strand, closing."""

    # The file types a pipe transport accepts, and the error for others
    # (each direction has stdlib's own message).
    _kinds = (stat.S_ISFIFO, stat.S_ISSOCK, stat.S_ISCHR)
    _kind_error = ""

    def __init__(self, loop, pipe, protocol, extra, strand):
        if isinstance(self, transports._FlowControlMixin):
            super().__init__(extra, loop)  # The mixin wants the loop.
        else:
            super().__init__(extra)
        self._extra["pipe"] = pipe
        self._loop = loop
        self._pipe = pipe
        self._fileno = pipe.fileno()
        self._protocol = protocol
        self._strand = strand
        self._lock = threading.Lock()
        self._closing = False
        self._lost = False  # connection_lost() scheduled; under _lock.
        mode = os.fstat(self._fileno).st_mode
        if not any(test(mode) for test in self._kinds):
            self._pipe = None
            self._fileno = None
            self._protocol = None
            raise ValueError(self._kind_error)
        os.set_blocking(self._fileno, False)

    # Everything that runs protocol code goes through the strand.
    def _call_soon(self, callback, *args):
        return _core._on_strand(self._strand, self._loop.call_soon, callback, *args)

    def _watch(self, writing, callback):
        add = self._loop._add_writer if writing else self._loop._add_reader
        return _core._on_strand(self._strand, add, self._fileno, callback)

    def _unwatch(self, writing):
        if writing:
            self._loop._remove_writer(self._fileno)
        else:
            self._loop._remove_reader(self._fileno)

    def is_closing(self):
        return self._closing

    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol):
        self._protocol = protocol

    def __repr__(self):
        info = [self.__class__.__name__]
        if self._pipe is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._fileno}")
        return "<{}>".format(" ".join(info))

    def __del__(self, _warn=warnings.warn):
        if getattr(self, "_pipe", None) is not None:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self._pipe.close()

    # Errors not reported to the exception handler (only logged in debug
    # mode): how such a pipe ends rather than a fault. For a read pipe,
    # EIO: a pseudo-terminal whose other side closed.
    @staticmethod
    def _is_quiet_error(exc):
        return isinstance(exc, OSError) and exc.errno == errno.EIO

    def _fatal_error(self, exc, message):
        if self._is_quiet_error(exc):
            if self._loop.get_debug():
                logger.debug("%r: %s", self, message, exc_info=True)
        else:
            self._loop.call_exception_handler({
                "message": message,
                "exception": exc,
                "transport": self,
                "protocol": self._protocol,
            })
        self._close(exc)

    def _close(self, exc):
        """Ends the transport (once): no more reading or writing, and
        connection_lost(exc) on the strand."""
        with self._lock:
            self._closing = True
            if self._lost:
                return
            self._lost = True
            buffer = getattr(self, "_buffer", None)  # Write pipes only.
            if buffer is not None:
                buffer.clear()
        self._unwatch(True)
        self._unwatch(False)
        self._call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._pipe.close()
            self._pipe = None
            self._protocol = None
            self._loop = None


class ReadPipeTransport(_PipeTransport, transports.ReadTransport):
    """The read end of a pipe (or a socket or character device) as a
    transport: data_received() per read, eof_received() then
    connection_lost(None) when the writer closes."""

    _kind_error = "Pipe transport is for pipes/sockets only."

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None, strand=None):
        super().__init__(loop, pipe, protocol, extra, strand)
        self._paused = False
        self._call_soon(self._start, waiter)

    def _start(self, waiter):
        try:
            self._protocol.connection_made(self)
        finally:
            # As on stdlib's loop, where these are callbacks of their own:
            # a failing connection_made() is reported, the pipe still read.
            if not self._closing and not self._paused:
                self._watch(False, self._read_ready)
            _resolve(waiter)

    def _read_ready(self):
        if self._closing:
            return
        try:
            data = os.read(self._fileno, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if data:
            self._protocol.data_received(data)
            return
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        with self._lock:
            if self._lost:
                return
            self._closing = self._lost = True
        self._unwatch(False)
        self._call_soon(self._protocol.eof_received)
        self._call_soon(self._call_connection_lost, None)

    def pause_reading(self):
        if self._closing or self._paused:
            return
        self._paused = True
        self._unwatch(False)
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self):
        if self._closing or not self._paused:
            return
        self._paused = False
        self._watch(False, self._read_ready)
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def is_reading(self):
        return not self._paused and not self._closing

    def close(self):
        if not self._closing:
            self._close(None)


class WritePipeTransport(_PipeTransport, transports._FlowControlMixin,
                         transports.WriteTransport):
    """The write end of a pipe (or a socket or character device) as a
    transport, with the write buffer limits and pause_writing/
    resume_writing of asyncio's transports. A pipe whose reader closes
    ends the transport: connection_lost(None), or BrokenPipeError when
    data was still buffered."""

    _kind_error = "Pipe transport is only for pipes, sockets and character devices"

    # A pipe's reader going away (EPIPE) or any other OSError ends a write
    # pipe quietly, as stdlib's does: the protocol learns of it from
    # connection_lost(exc).
    @staticmethod
    def _is_quiet_error(exc):
        return isinstance(exc, OSError)

    def __init__(self, loop, pipe, protocol, waiter=None, extra=None, strand=None):
        super().__init__(loop, pipe, protocol, extra, strand)
        self._buffer = bytearray()
        self._lost_writes = 0
        mode = os.fstat(self._fileno).st_mode
        # The read end going away makes a pipe's (or socket's) write end
        # readable: that is how the transport learns of it. A character
        # device has no such signal.
        self._watch_peer = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
        self._call_soon(self._start, waiter)

    def _start(self, waiter):
        try:
            self._protocol.connection_made(self)
        finally:
            if self._watch_peer and not self._closing:
                self._watch(False, self._peer_closed)
            _resolve(waiter)

    def get_write_buffer_size(self):
        with self._lock:
            return len(self._buffer)

    def _peer_closed(self):
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        if self._buffer:
            self._close(BrokenPipeError())
        else:
            self._close(None)

    def write(self, data):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data argument must be a bytes-like object, "
                            f"not {type(data).__name__!r}")
        if isinstance(data, bytearray):
            data = memoryview(data)
        if not data:
            return
        error = None
        with self._lock:
            if self._lost_writes or self._closing:
                self._lost_writes += 1
                warn = self._lost_writes >= _WARN_AFTER_LOST_WRITES
            else:
                warn = False
                if not self._buffer:
                    try:
                        n = os.write(self._fileno, data)
                    except (BlockingIOError, InterruptedError):
                        n = 0
                    except BaseException as exc:  # noqa: BLE001
                        self._lost_writes += 1
                        error = exc
                        n = None
                    if n is not None:
                        if n == len(data):
                            return
                        if n > 0:
                            data = memoryview(data)[n:]
                        self._watch(True, self._write_ready)
                if error is None:
                    self._buffer += data
        if warn:
            logger.warning("pipe closed by peer or "
                           "os.write(pipe, data) raised exception.")
            return
        if error is not None:
            if isinstance(error, (SystemExit, KeyboardInterrupt)):
                raise error
            self._fatal_error(error, "Fatal write error on pipe transport")
            return
        self._maybe_pause_protocol()

    def _write_ready(self):
        error = None
        drained = False
        with self._lock:
            if not self._buffer:
                return
            try:
                n = os.write(self._fileno, self._buffer)
            except (BlockingIOError, InterruptedError):
                return
            except BaseException as exc:  # noqa: BLE001
                self._buffer.clear()
                self._lost_writes += 1
                error = exc
            else:
                if n == len(self._buffer):
                    self._buffer.clear()
                    drained = True
                elif n > 0:
                    del self._buffer[:n]
        if error is not None:
            self._unwatch(True)
            if isinstance(error, (SystemExit, KeyboardInterrupt)):
                raise error
            self._fatal_error(error, "Fatal write error on pipe transport")
            return
        if drained:
            self._unwatch(True)
            self._maybe_resume_protocol()
            if self._closing:  # write_eof() waited for the buffer.
                self._close(None)

    def can_write_eof(self):
        return True

    def write_eof(self):
        with self._lock:
            if self._closing:
                return
            self._closing = True
            pending = bool(self._buffer)
        if not pending:
            self._close(None)

    def close(self):
        if self._pipe is not None and not self._closing:
            self.write_eof()

    def abort(self):
        self._close(None)


class PipeMethods:
    """Mixed into mt_asyncio's EventLoop."""

    async def connect_read_pipe(self, protocol_factory, pipe):
        """Make a ReadPipeTransport for the read end `pipe`."""
        return await self._connect_pipe(ReadPipeTransport, protocol_factory, pipe)

    async def connect_write_pipe(self, protocol_factory, pipe):
        """Make a WritePipeTransport for the write end `pipe`."""
        return await self._connect_pipe(WritePipeTransport, protocol_factory, pipe)

    async def _connect_pipe(self, transport_class, protocol_factory, pipe):
        protocol = protocol_factory()
        waiter = self.create_future()
        strand = _core._connection_strand(self)
        transport = transport_class(self, pipe, protocol, waiter, strand=strand)
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol
