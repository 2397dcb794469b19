"""asyncio.subprocess on the parallel loop: Process and
create_subprocess_exec()/create_subprocess_shell().

A Process's streams are asyncio's StreamReader/StreamWriter, fed by the
child's pipe transports on the child's strand (_loop/processes.py); the task
that started the child, and the tasks it starts (communicate()'s readers),
exclude that strand while they run, so they see the streams as on a
one-thread loop.
"""

import subprocess as _subprocess

from asyncio import events, protocols, streams

from .tasks import gather

__all__ = ["create_subprocess_exec", "create_subprocess_shell"]

PIPE = _subprocess.PIPE
STDOUT = _subprocess.STDOUT
DEVNULL = _subprocess.DEVNULL


class SubprocessStreamProtocol(streams.FlowControlMixin,
                               protocols.SubprocessProtocol):
    """Turns a child's pipes into streams: stdout and stderr into
    StreamReaders, stdin into a StreamWriter (with drain())."""

    def __init__(self, limit, loop):
        super().__init__(loop=loop)
        self._limit = limit
        self.stdin = self.stdout = self.stderr = None
        self._transport = None
        self._exited = False
        self._open_readers = []  # fds of stdout/stderr not at EOF yet.
        self._stdin_closed = self._loop.create_future()

    def __repr__(self):
        parts = [self.__class__.__name__]
        for name in ("stdin", "stdout", "stderr"):
            stream = getattr(self, name)
            if stream is not None:
                parts.append(f"{name}={stream!r}")
        return "<{}>".format(" ".join(parts))

    def _reader_for(self, fd):
        return {1: self.stdout, 2: self.stderr}.get(fd)

    def connection_made(self, transport):
        self._transport = transport
        for fd, name in ((1, "stdout"), (2, "stderr")):
            pipe = transport.get_pipe_transport(fd)
            if pipe is None:
                continue
            reader = streams.StreamReader(limit=self._limit, loop=self._loop)
            reader.set_transport(pipe)
            setattr(self, name, reader)
            self._open_readers.append(fd)
        stdin_pipe = transport.get_pipe_transport(0)
        if stdin_pipe is not None:
            self.stdin = streams.StreamWriter(stdin_pipe, protocol=self,
                                              reader=None, loop=self._loop)

    def pipe_data_received(self, fd, data):
        reader = self._reader_for(fd)
        if reader is not None:
            reader.feed_data(data)

    def pipe_connection_lost(self, fd, exc):
        if fd == 0:
            if self.stdin is not None:
                self.stdin.close()
            self.connection_lost(exc)  # Wakes drain() waiters.
            if exc is None:
                self._stdin_closed.set_result(None)
            else:
                self._stdin_closed.set_exception(exc)
                # wait_closed() need not be called: no "never retrieved".
                self._stdin_closed.exception()
            # The writer points back at this protocol (for drain() and
            # wait_closed()); dropping this side of that cycle lets the
            # child's streams and transports go by reference counting
            # once the Process is gone, not at the next cycle collection.
            self.stdin = None
            return
        reader = self._reader_for(fd)
        if reader is not None:
            if exc is None:
                reader.feed_eof()
            else:
                reader.set_exception(exc)
        if fd in self._open_readers:
            self._open_readers.remove(fd)
        self._close_transport_when_done()

    def process_exited(self):
        self._exited = True
        self._close_transport_when_done()

    def _close_transport_when_done(self):
        if self._exited and not self._open_readers and self._transport is not None:
            self._transport.close()
            self._transport = None

    def _get_close_waiter(self, stream):
        # Only the stdin writer asks (readers have no close waiter); it may
        # be gone from self.stdin by now.
        return self._stdin_closed


class Process:
    """A child process started by create_subprocess_exec()/_shell()."""

    def __init__(self, transport, protocol, loop):
        self._transport = transport
        self._protocol = protocol
        self._loop = loop
        self.stdin = protocol.stdin
        self.stdout = protocol.stdout
        self.stderr = protocol.stderr
        self.pid = transport.get_pid()

    def __repr__(self):
        return f"<{self.__class__.__name__} {self.pid}>"

    @property
    def returncode(self):
        return self._transport.get_returncode()

    async def wait(self):
        """Wait for the child to exit; its return code."""
        return await self._transport._wait()

    def send_signal(self, signal):
        self._transport.send_signal(signal)

    def terminate(self):
        self._transport.terminate()

    def kill(self):
        self._transport.kill()

    async def _write_input(self, data):
        try:
            if data is not None:
                self.stdin.write(data)
            await self.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # The child stopped reading: communicate() goes on.
        self.stdin.close()

    async def _read_all(self, fd):
        stream = self.stdout if fd == 1 else self.stderr
        output = await stream.read()
        self._transport.get_pipe_transport(fd).close()
        return output

    async def _nothing(self):
        return None

    async def communicate(self, input=None):
        """Send input to stdin, read stdout and stderr to their ends and
        wait for the child to exit: (stdout_data, stderr_data)."""
        stdin = (self._write_input(input) if self.stdin is not None
                 else self._nothing())
        stdout = self._read_all(1) if self.stdout is not None else self._nothing()
        stderr = self._read_all(2) if self.stderr is not None else self._nothing()
        _, out, err = await gather(stdin, stdout, stderr)
        await self.wait()
        return out, err


async def create_subprocess_shell(cmd, stdin=None, stdout=None, stderr=None,
                                  limit=streams._DEFAULT_LIMIT, **kwds):
    """Run cmd through the shell; a Process."""
    loop = events.get_running_loop()
    transport, protocol = await loop.subprocess_shell(
        lambda: SubprocessStreamProtocol(limit=limit, loop=loop),
        cmd, stdin=stdin, stdout=stdout, stderr=stderr, **kwds)
    return Process(transport, protocol, loop)


async def create_subprocess_exec(program, *args, stdin=None, stdout=None,
                                 stderr=None, limit=streams._DEFAULT_LIMIT,
                                 **kwds):
    """Run program with args (no shell); a Process."""
    loop = events.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: SubprocessStreamProtocol(limit=limit, loop=loop),
        program, *args, stdin=stdin, stdout=stdout, stderr=stderr, **kwds)
    return Process(transport, protocol, loop)
