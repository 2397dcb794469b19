"""The loop's child processes: subprocess_exec() and subprocess_shell().

A child is started with subprocess.Popen on the calling worker; its exit is
watched on the reactor through a pidfd (Linux 5.3+), which is readable once
the child has exited: no thread per child, and no SIGCHLD handler that could
reap other code's children. The watcher reaps only its own pid.

The transport, its pipe transports and its pidfd watcher are one strand
(pipes.py), a child of the code that started the process: the protocol's
callbacks (pipe_data_received, pipe_connection_lost, process_exited,
connection_lost) never overlap and come in asyncio's order, and the task
that started the child reads its streams as on a one-thread loop, while
many children, started from tasks on every worker, run in parallel.

Where os.pidfd_open is missing (not Linux), the exit is awaited by a
blocking waitpid on the loop's blocking pool instead.
"""

import logging
import os
import signal
import subprocess
import threading
import warnings

from asyncio import transports

from .. import _core
from .pipes import ReadPipeTransport, WritePipeTransport

__all__ = ["SubprocessMethods", "SubprocessTransport"]

logger = logging.getLogger("asyncio")

_HAS_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")


class _PipeProtocol:
    """What a child's pipe transport reports to the child's transport."""

    def __init__(self, process, fd):
        self.process = process
        self.fd = fd
        self.pipe = None

    def connection_made(self, transport):
        self.pipe = transport
        self.process._pipe_connected(self.fd, self)

    def data_received(self, data):
        self.process._pipe_data_received(self.fd, data)

    def eof_received(self):
        return None

    def connection_lost(self, exc):
        self.process._pipe_connection_lost(self.fd, exc)
        self.process = None

    def pause_writing(self):
        self.process._protocol.pause_writing()

    def resume_writing(self):
        self.process._protocol.resume_writing()

    def __repr__(self):
        return f"<{self.__class__.__name__} fd={self.fd} pipe={self.pipe!r}>"


class SubprocessTransport(transports.SubprocessTransport):
    """asyncio's SubprocessTransport for one child process."""

    def __init__(self, loop, protocol, args, shell, stdin, stdout, stderr,
                 bufsize, waiter, strand, extra=None, **kwargs):
        super().__init__(extra)
        self._loop = loop
        self._protocol = protocol
        self._strand = strand
        self._lock = threading.Lock()
        self._closed = False
        self._proc = None
        self._pid = None
        self._pidfd = None
        self._returncode = None
        self._exit_waiters = set()
        self._pending_calls = []  # Until connection_made() ran.
        self._finished = False
        self._pipes = {}  # fd -> _PipeProtocol (None until connected)
        self._pipes_lost = set()  # fds whose pipe_connection_lost ran.
        for fd, spec in ((0, stdin), (1, stdout), (2, stderr)):
            if spec == subprocess.PIPE:
                self._pipes[fd] = None
        try:
            self._proc = subprocess.Popen(
                args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr,
                universal_newlines=False, bufsize=bufsize, **kwargs)
        except BaseException:
            self._closed = True
            raise
        self._pid = self._proc.pid
        self._extra["subprocess"] = self._proc
        if loop.get_debug():
            logger.debug("process %r created: pid %s", args, self._pid)
        if _HAS_PIDFD:
            self._pidfd = os.pidfd_open(self._pid)
        loop._track_subprocess(self)
        # The exit is watched from the start (so a failed start can kill
        # and wait); process_exited() still comes after connection_made().
        self._watch_exit()
        # Through the loop's own connect_*_pipe (code may wrap them), from
        # a task on the child's strand: each pipe is a strand below it.
        _core._on_strand(strand, loop.create_task, self._connect_pipes(waiter))

    def _call_soon(self, callback, *args):
        return _core._on_strand(self._strand, self._loop.call_soon, callback, *args)

    def __repr__(self):
        info = [self.__class__.__name__]
        if self._closed:
            info.append("closed")
        if self._pid is not None:
            info.append(f"pid={self._pid}")
        if self._returncode is not None:
            info.append(f"returncode={self._returncode}")
        elif self._pid is not None:
            info.append("running")
        else:
            info.append("not started")
        for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
            proto = self._pipes.get(fd)
            if proto is not None and proto.pipe is not None:
                info.append(f"{name}={proto.pipe}")
        return "<{}>".format(" ".join(info))

    # --- starting ------------------------------------------------------------

    async def _connect_pipes(self, waiter):
        proc = self._proc
        loop = self._loop
        try:
            if proc.stdin is not None:
                await loop.connect_write_pipe(lambda: _PipeProtocol(self, 0), proc.stdin)
            if proc.stdout is not None:
                await loop.connect_read_pipe(lambda: _PipeProtocol(self, 1), proc.stdout)
            if proc.stderr is not None:
                await loop.connect_read_pipe(lambda: _PipeProtocol(self, 2), proc.stderr)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the waiter.
            # The pipes connected so far are closed, and the rest too.
            for proto in list(self._pipes.values()):
                if proto is not None and proto.pipe is not None:
                    proto.pipe.close()
            for raw in (proc.stdin, proc.stdout, proc.stderr):
                if raw is not None:
                    raw.close()
            if waiter is not None and not waiter.cancelled():
                waiter.set_exception(exc)
            return
        self._call_soon(self._connected, waiter)

    def _connected(self, waiter):
        try:
            self._protocol.connection_made(self)
        finally:
            # What the pipes and the exit reported meanwhile, in order; a
            # report racing with this waits for the lock and goes after.
            with self._lock:
                pending, self._pending_calls = self._pending_calls, None
                for callback, args in pending:
                    self._call_soon(callback, *args)
            if waiter is not None and not waiter.cancelled():
                waiter.set_result(None)

    def _watch_exit(self):
        if self._pidfd is not None:
            _core._on_strand(self._strand, self._loop._add_reader,
                             self._pidfd, self._child_exited)
        else:
            # Waits without reaping (WNOWAIT): the pid stays the child's
            # until _reap() publishes the exit, so send_signal() can never
            # reach another process that got the pid meanwhile.
            future = self._loop.run_in_executor(
                None, os.waitid, os.P_PID, self._pid, os.WEXITED | os.WNOWAIT)
            future.add_done_callback(
                lambda _: self._call_soon(self._reap_and_publish))

    # --- the child's exit ------------------------------------------------------

    def _child_exited(self):
        self._reap_and_publish()

    def _reap_and_publish(self):
        # Reaping and recording the return code are one step under the
        # lock send_signal() takes: it sees either a live (or zombie)
        # child or the exit, never a reaped pid without a return code.
        with self._lock:
            if self._returncode is not None:
                return
            try:
                pid, status = os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = self._pid, None
            if pid == 0:
                return  # Not exited after all: the watcher stays.
            returncode = self._exit_code(status)
            self._returncode = returncode
            waiters, self._exit_waiters = self._exit_waiters, None
            pidfd, self._pidfd = self._pidfd, None
        if pidfd is not None:
            self._loop._remove_reader(pidfd)
            os.close(pidfd)
        self._process_exited(returncode, waiters)

    def _exit_code(self, status):
        if status is not None:
            return os.waitstatus_to_exitcode(status)
        # Reaped by someone else (SIGCHLD set to SIG_IGN, or code calling
        # os.wait()): the status is gone.
        if self._proc.returncode is not None:
            return self._proc.returncode
        logger.warning("Unknown child process pid %d, will report returncode 255",
                       self._pid)
        return 255

    def _process_exited(self, returncode, waiters):
        if self._loop.get_debug():
            logger.info("%r exited with return code %r", self, returncode)
        if self._proc.returncode is None:
            # Popen must not wait for (or warn about) a child we reaped.
            self._proc.returncode = returncode
        self._loop._untrack_subprocess(self)
        self._call(self._protocol.process_exited)
        self._try_finish()
        # Waiters go on once the child exited, not once its pipes closed
        # (as asyncio's do since 3.13).
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(returncode)

    async def _wait(self):
        """The child's return code, once it exited."""
        with self._lock:
            if self._returncode is not None:
                return self._returncode
            waiter = self._loop.create_future()
            self._exit_waiters.add(waiter)
        try:
            return await waiter
        finally:
            with self._lock:
                if self._exit_waiters is not None:
                    self._exit_waiters.discard(waiter)

    # --- the protocol's calls, in order, on the strand -----------------------

    # The pipes report from their own strands (below the child's); what
    # they report is handed to the child's strand, in order per pipe.

    def _call(self, callback, *args):
        with self._lock:
            if self._pending_calls is not None:
                self._pending_calls.append((callback, args))
                return
        self._call_soon(callback, *args)

    def _pipe_connected(self, fd, proto):
        self._pipes[fd] = proto

    def _pipe_data_received(self, fd, data):
        self._call(self._protocol.pipe_data_received, fd, data)

    def _pipe_connection_lost(self, fd, exc):
        self._call(self._pipe_lost, fd, exc)

    def _pipe_lost(self, fd, exc):
        self._pipes_lost.add(fd)
        try:
            self._protocol.pipe_connection_lost(fd, exc)
        finally:
            self._try_finish()

    def _try_finish(self):
        if self._finished or self._returncode is None:
            return
        # Counted here, on the child's strand, not from the pipes' own
        # flags: connection_lost() comes after every pipe_connection_lost().
        if all(fd in self._pipes_lost for fd in self._pipes):
            self._finished = True
            self._call(self._call_connection_lost, None)

    def _call_connection_lost(self, exc):
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._loop = None
            self._proc = None
            self._protocol = None

    # --- SubprocessTransport ---------------------------------------------------

    def get_pid(self):
        return self._pid

    def get_returncode(self):
        return self._returncode

    def get_pipe_transport(self, fd):
        proto = self._pipes.get(fd)
        return None if proto is None else proto.pipe

    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol):
        self._protocol = protocol

    def is_closing(self):
        return self._closed

    def _check_proc(self):
        if self._proc is None:
            raise ProcessLookupError()

    def send_signal(self, signal_number):
        self._check_proc()
        with self._lock:
            if self._returncode is not None:
                return  # Reaped: the pid may be another process's by now.
            if self._pidfd is not None:
                # Through the pidfd: it names this child and no other.
                signal.pidfd_send_signal(self._pidfd, signal_number)
            else:
                os.kill(self._pid, signal_number)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def close(self):
        if self._closed:
            return
        self._closed = True
        for proto in self._pipes.values():
            if proto is None or proto.pipe is None:
                continue
            pipe = proto.pipe
            if not pipe.is_closing():
                pipe.close()
        with self._lock:
            # A child still running when its transport closes is killed, as
            # asyncio does, through Popen (code may wrap its kill()). Its
            # poll() reaps a child that already exited instead, and our
            # watcher then takes the status Popen recorded; under the lock
            # the watcher is not reaping at the same time.
            if (self._proc is not None and self._returncode is None
                    and self._proc.poll() is None):
                if self._loop.get_debug():
                    logger.warning("Close running child process: kill %r", self)
                try:
                    self._proc.kill()
                except ProcessLookupError:
                    pass

    def __del__(self, _warn=warnings.warn):
        if not self._closed:
            _warn(f"unclosed transport {self!r}", ResourceWarning, source=self)
            self.close()

    def _reap_at_loop_close(self):
        """The loop closes while the child is not reaped, and its exit
        watcher goes with the loop. A child that exited (or that close()
        killed) is reaped now, so none is left a zombie; one still running
        is left running, as on stdlib's loop (its Popen reaps it later)."""
        with self._lock:
            pidfd, self._pidfd = self._pidfd, None
            if self._returncode is None and self._pid is not None:
                flags = 0 if self._closed else os.WNOHANG
                try:
                    pid, status = os.waitpid(self._pid, flags)
                except ChildProcessError:
                    pid = 0
                if pid != 0:
                    self._returncode = os.waitstatus_to_exitcode(status)
                    if self._proc is not None and self._proc.returncode is None:
                        self._proc.returncode = self._returncode
        if pidfd is not None:
            os.close(pidfd)


class SubprocessMethods:
    """Mixed into mt_asyncio's EventLoop."""

    # The loop's children not reaped yet (EventLoop.__init__ makes the set
    # and its lock; close() calls _reap_subprocesses).

    def _track_subprocess(self, transport):
        with self._subprocesses_lock:
            self._subprocesses.add(transport)

    def _untrack_subprocess(self, transport):
        with self._subprocesses_lock:
            self._subprocesses.discard(transport)

    def _reap_subprocesses(self):
        with self._subprocesses_lock:
            live = list(self._subprocesses)
            self._subprocesses.clear()
        for transport in live:
            transport._reap_at_loop_close()

    async def _make_subprocess_transport(self, protocol, args, shell, stdin,
                                         stdout, stderr, bufsize, extra=None,
                                         **kwargs):
        strand = _core._connection_strand(self)
        waiter = self.create_future()
        transport = SubprocessTransport(self, protocol, args, shell, stdin,
                                        stdout, stderr, bufsize, waiter,
                                        strand, extra=extra, **kwargs)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transport.close()
            await transport._wait()
            raise
        return transport

    @staticmethod
    def _check_subprocess_args(universal_newlines, bufsize, text, encoding,
                               errors):
        if universal_newlines:
            raise ValueError("universal_newlines must be False")
        if bufsize != 0:
            raise ValueError("bufsize must be 0")
        if text:
            raise ValueError("text must be False")
        if encoding is not None:
            raise ValueError("encoding must be None")
        if errors is not None:
            raise ValueError("errors must be None")

    async def subprocess_shell(self, protocol_factory, cmd, *,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=False,
                               shell=True, bufsize=0, encoding=None,
                               errors=None, text=None, **kwargs):
        """Run cmd through the shell; (transport, protocol)."""
        if not isinstance(cmd, (bytes, str)):
            raise ValueError("cmd must be a string")
        if not shell:
            raise ValueError("shell must be True")
        self._check_subprocess_args(universal_newlines, bufsize, text,
                                    encoding, errors)
        protocol = protocol_factory()
        if self.get_debug():
            logger.debug("run shell command %r", cmd)
        transport = await self._make_subprocess_transport(
            protocol, cmd, True, stdin, stdout, stderr, bufsize, **kwargs)
        return transport, protocol

    async def subprocess_exec(self, protocol_factory, program, *args,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=False,
                              shell=False, bufsize=0, encoding=None,
                              errors=None, text=None, **kwargs):
        """Run program with args (no shell); (transport, protocol)."""
        if shell:
            raise ValueError("shell must be False")
        self._check_subprocess_args(universal_newlines, bufsize, text,
                                    encoding, errors)
        popen_args = (program,) + args
        protocol = protocol_factory()
        if self.get_debug():
            logger.debug("execute program %r", program)
        transport = await self._make_subprocess_transport(
            protocol, popen_args, False, stdin, stdout, stderr, bufsize,
            **kwargs)
        return transport, protocol
