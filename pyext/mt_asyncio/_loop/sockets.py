"""The loop's low-level socket API: add_reader/add_writer and sock_*.

Readers and writers are watched by the runtime's epoll reactor
(``pyext/src/loop/fd_watch.cc``); their callbacks run on a worker, never twice at
once for one fd and direction, and again while the fd stays ready, as a
selector loop's do. The ``sock_*`` coroutines try the operation at once and
wait for readiness only when the socket would block, with stdlib's
arguments, checks and errors.
"""

import errno
import functools
import os
import socket
import sys

from asyncio import exceptions
from contextvars import copy_context as _copy_context

from .. import _core

__all__ = ["SocketMethods"]

try:
    import ssl as _ssl
except ImportError:  # pragma: no cover - CPython built without ssl.
    _ssl = None

# Chunk size of sock_sendfile's read-and-send fallback.
_SENDFILE_FALLBACK_CHUNK = 256 * 1024
# Where native sendfile leaves the file when it sent nothing (the offset
# was at or past the end): 3.14's asyncio moves it to the offset, 3.13's
# leaves it where it was.
_SENDFILE_ALWAYS_SETS_POSITION = sys.version_info >= (3, 14)


def _fileobj_to_fd(fileobj):
    """An fd from an int or an object with fileno(), as selectors accept."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


def _check_ssl_socket(sock):
    if _ssl is not None and isinstance(sock, _ssl.SSLSocket):
        raise TypeError("Socket cannot be of type SSLSocket")


def _set_result(fut, result):
    # A watcher's callback runs on a worker while the awaiting task may be
    # cancelling the future on another: losing that race is not an error.
    if not fut.done():
        try:
            fut.set_result(result)
        except exceptions.InvalidStateError:
            pass


def _set_exception(fut, exc):
    if not fut.done():
        try:
            fut.set_exception(exc)
        except exceptions.InvalidStateError:
            pass


def _ipaddr_info(host, port, family, type, proto, flowinfo=0, scopeid=0):
    """The getaddrinfo() entry for a numeric host, or None if it needs a
    lookup (so connecting to an IP address never touches the resolver)."""
    if not hasattr(socket, "inet_pton"):
        return None
    if proto not in {0, socket.IPPROTO_TCP, socket.IPPROTO_UDP} or host is None:
        return None
    if type == socket.SOCK_STREAM:
        proto = socket.IPPROTO_TCP
    elif type == socket.SOCK_DGRAM:
        proto = socket.IPPROTO_UDP
    else:
        return None
    if port is None:
        port = 0
    elif isinstance(port, bytes) and port == b"":
        port = 0
    elif isinstance(port, str) and port == "":
        port = 0
    else:
        try:
            port = int(port)
        except (TypeError, ValueError):
            return None
    if family == socket.AF_UNSPEC:
        families = [socket.AF_INET, socket.AF_INET6]
    else:
        families = [family]
    if isinstance(host, bytes):
        host = host.decode("idna")
    if "%" in host:
        return None  # A scope id: let getaddrinfo parse it.
    for af in families:
        try:
            socket.inet_pton(af, host)
        except OSError:
            continue
        if af == socket.AF_INET6:
            return af, type, proto, "", (host, port, flowinfo, scopeid)
        return af, type, proto, "", (host, port)
    return None


class SocketMethods:
    """Mixed into mt_asyncio's EventLoop."""

    # --- readers and writers ---------------------------------------------

    def _ensure_fd_no_transport(self, fd):
        fileno = fd
        if not isinstance(fileno, int):
            try:
                fileno = int(fileno.fileno())
            except (AttributeError, TypeError, ValueError):
                raise ValueError(f"Invalid file object: {fd!r}") from None
        # A closed socket's fileno() is -1: no transport has that, and the
        # registration is then found by the object (_fd_lookup).
        transport = _core._fd_transport(self, fileno) if fileno >= 0 else None
        if transport is not None:
            raise RuntimeError(
                f"File descriptor {fd!r} is used by transport {transport!r}")

    def _fd_lookup(self, fileobj):
        """The fd of `fileobj`, or, as selectors do, of the registration
        made with that very object when it no longer has one (a socket
        closed before remove_reader)."""
        try:
            return _fileobj_to_fd(fileobj)
        except ValueError:
            for objects in self._fd_objects:
                for fd, obj in list(objects.items()):
                    if obj is fileobj:
                        return fd
            raise

    def _drop_stale(self, fd, fileobj):
        # A registration made with another object that no longer owns `fd`
        # (closed without remove_reader, the number reused since): its
        # reactor record would swallow the new object's readiness.
        for writing, objects in enumerate(self._fd_objects):
            old = objects.get(fd)
            if old is None or old is fileobj or isinstance(old, int):
                continue
            try:
                still_owns = old.fileno() == fd
            except (AttributeError, TypeError, ValueError, OSError):
                still_owns = False
            if not still_owns:
                _core._fd_unwatch(self, fd, bool(writing))
                objects.pop(fd, None)

    def _watch(self, fd, writing, callback, args):
        self._check_closed()
        fileno = _fileobj_to_fd(fd)
        self._drop_stale(fileno, fd)
        handle = _core._fd_watch(self, fileno, writing, callback, args,
                                 _copy_context())
        self._fd_objects[writing][fileno] = fd
        return handle

    def _unwatch(self, fd, writing):
        if self.is_closed():
            return False
        fileno = self._fd_lookup(fd)
        # Nothing stays watched in this direction either way.
        self._fd_objects[writing].pop(fileno, None)
        return _core._fd_unwatch(self, fileno, writing)

    def _add_reader(self, fd, callback, *args):
        return self._watch(fd, False, callback, args)

    def _add_writer(self, fd, callback, *args):
        return self._watch(fd, True, callback, args)

    def _remove_reader(self, fd):
        return self._unwatch(fd, False)

    def _remove_writer(self, fd):
        return self._unwatch(fd, True)

    def add_reader(self, fd, callback, *args):
        """Call callback(*args) whenever fd is readable."""
        self._ensure_fd_no_transport(fd)
        self._add_reader(fd, callback, *args)

    def remove_reader(self, fd):
        """Stop watching fd for reading; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_reader(fd)

    def add_writer(self, fd, callback, *args):
        """Call callback(*args) whenever fd is writable."""
        self._ensure_fd_no_transport(fd)
        self._add_writer(fd, callback, *args)

    def remove_writer(self, fd):
        """Stop watching fd for writing; True if it was watched."""
        self._ensure_fd_no_transport(fd)
        return self._remove_writer(fd)

    # --- waiting for one readiness ---------------------------------------

    def _check_sock(self, sock):
        _check_ssl_socket(sock)
        if self._debug and sock.gettimeout() != 0:
            raise ValueError("the socket must be non-blocking")

    async def _sock_wait(self, sock, writing, attempt):
        """Await ``attempt(fut)`` run each time sock is ready, until it
        completes fut. ``attempt`` returns without touching fut when the
        socket would block again."""
        fut = self.create_future()
        fd = sock.fileno()
        self._ensure_fd_no_transport(fd)
        if writing:
            handle = self._add_writer(fd, attempt, fut)
        else:
            handle = self._add_reader(fd, attempt, fut)
        try:
            return await fut
        finally:
            # Removed by the awaiting task before it goes on (a done
            # callback would run on another worker, possibly after the
            # task already handed the fd to a transport).
            self._sock_wait_done(fd, writing, handle)
            # The error raised keeps this frame in its traceback: without
            # this, the frame would keep the future, and the future the
            # error (a cycle asyncio avoids the same way); so would the
            # watcher's handle, which holds the future as an argument.
            fut = handle = None

    def _sock_wait_done(self, fd, writing, handle):
        # A later sock_* call on the same fd replaced (and cancelled) our
        # handle: its watcher is not ours to remove.
        if not handle.cancelled():
            if writing:
                self._remove_writer(fd)
            else:
                self._remove_reader(fd)

    @staticmethod
    def _sock_attempt(op, fut):
        """Runs op() for a watcher: completes fut with its result or error,
        or leaves it pending if the socket would still block."""
        if fut.done():
            return
        try:
            result = op()
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiter.
            _set_exception(fut, exc)
            fut = None  # Not kept by this frame, in the error's traceback.
        else:
            _set_result(fut, result)

    async def _sock_io(self, sock, writing, op):
        # `op` looks the socket's method up on each attempt, as asyncio's
        # callbacks do (a wrapper or mock may swap it between attempts).
        try:
            return op()
        except (BlockingIOError, InterruptedError):
            pass
        return await self._sock_wait(
            sock, writing, functools.partial(self._sock_attempt, op))

    # --- sock_* ------------------------------------------------------------

    async def sock_recv(self, sock, n):
        """Receive up to n bytes from sock (non-blocking)."""
        self._check_sock(sock)
        return await self._sock_io(sock, False, lambda: sock.recv(n))

    async def sock_recv_into(self, sock, buf):
        """Receive into buf; return the number of bytes received."""
        self._check_sock(sock)
        return await self._sock_io(sock, False,
                                   lambda: sock.recv_into(buf))

    async def sock_recvfrom(self, sock, bufsize):
        """Receive a datagram of up to bufsize bytes: (data, address)."""
        self._check_sock(sock)
        return await self._sock_io(sock, False,
                                   lambda: sock.recvfrom(bufsize))

    async def sock_recvfrom_into(self, sock, buf, nbytes=0):
        """Receive a datagram into buf: (nbytes, address)."""
        self._check_sock(sock)
        if not nbytes:
            nbytes = len(buf)
        return await self._sock_io(
            sock, False, lambda: sock.recvfrom_into(buf, nbytes))

    async def sock_sendto(self, sock, data, address):
        """Send a datagram to address; return the number of bytes sent."""
        self._check_sock(sock)
        return await self._sock_io(
            sock, True, lambda: sock.sendto(data, address))

    async def sock_sendall(self, sock, data):
        """Send all of data, waiting for room as often as needed."""
        self._check_sock(sock)
        try:
            n = sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        if n == len(data):
            return
        view = memoryview(data)
        pos = [n]

        def attempt(fut):
            if fut.done():
                return
            try:
                sent = sock.send(view[pos[0]:])
            except (BlockingIOError, InterruptedError):
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - to the awaiter.
                _set_exception(fut, exc)
                return
            pos[0] += sent
            if pos[0] == len(view):
                _set_result(fut, None)

        await self._sock_wait(sock, True, attempt)

    async def sock_connect(self, sock, address):
        """Connect sock to address (resolved first for IP sockets)."""
        self._check_sock(sock)
        if sock.family == socket.AF_INET or (
                socket.has_ipv6 and sock.family == socket.AF_INET6):
            resolved = await self._ensure_resolved(
                address, family=sock.family, type=sock.type, proto=sock.proto)
            _, _, _, _, address = resolved[0]
        try:
            sock.connect(address)
            return
        except (BlockingIOError, InterruptedError):
            pass

        def attempt(fut):
            if fut.done():
                return
            try:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err != 0:
                    raise OSError(err, f"Connect call failed {address}")
            except (BlockingIOError, InterruptedError):
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - to the awaiter.
                _set_exception(fut, exc)
                # This frame is in the error's traceback: it must not keep
                # the future holding the error (a reference cycle).
                fut = None
            else:
                _set_result(fut, None)

        await self._sock_wait(sock, True, attempt)

    async def sock_accept(self, sock):
        """Accept a connection: (conn, address), conn non-blocking."""
        self._check_sock(sock)

        def accept():
            conn, address = sock.accept()
            conn.setblocking(False)
            return conn, address

        return await self._sock_io(sock, False, accept)

    async def sock_sendfile(self, sock, file, offset=0, count=None, *,
                            fallback=True):
        """Send a file over sock with os.sendfile, or by reading and sending
        chunks when that is not possible and fallback is true."""
        self._check_sock(sock)
        self._check_sendfile_params(sock, file, offset, count)
        try:
            return await self._sock_sendfile_native(sock, file, offset, count)
        except exceptions.SendfileNotAvailableError:
            if not fallback:
                raise
        return await self._sock_sendfile_fallback(sock, file, offset, count)

    @staticmethod
    def _check_sendfile_params(sock, file, offset, count):
        if "b" not in getattr(file, "mode", "b"):
            raise ValueError("file should be opened in binary mode")
        if not sock.type == socket.SOCK_STREAM:
            raise ValueError("only SOCK_STREAM type sockets are supported")
        if count is not None:
            if not isinstance(count, int):
                raise TypeError(
                    f"count must be a positive integer (got {count!r})")
            if count <= 0:
                raise ValueError(
                    f"count must be a positive integer (got {count!r})")
        if not isinstance(offset, int):
            raise TypeError(
                f"offset must be a non-negative integer (got {offset!r})")
        if offset < 0:
            raise ValueError(
                f"offset must be a non-negative integer (got {offset!r})")

    async def _sock_sendfile_native(self, sock, file, offset, count):
        if not hasattr(os, "sendfile"):
            raise exceptions.SendfileNotAvailableError(
                "os.sendfile() is not available")
        try:
            fileno = file.fileno()
        except (AttributeError, OSError) as err:
            raise exceptions.SendfileNotAvailableError(
                "not a regular file") from err
        try:
            fsize = os.fstat(fileno).st_size
        except OSError:
            raise exceptions.SendfileNotAvailableError(
                "not a regular file") from None
        blocksize = count if count else fsize
        if not blocksize:
            return 0  # Empty file.
        blocksize = min(blocksize, 0xffff_ffff)
        end = offset + count if count else fsize
        pos = [offset]
        total = [0]

        def send_some():
            """Returns True when done; raises BlockingIOError to wait."""
            size = min(end - pos[0], blocksize)
            if size <= 0:
                return True
            try:
                sent = os.sendfile(sock.fileno(), fileno, pos[0], size)
            except OSError as exc:
                if exc.errno == errno.ENOTSOCK or (
                        exc.errno == errno.EINVAL and total[0] == 0):
                    # Not a socket, or a file os.sendfile cannot read: the
                    # caller falls back (nothing was sent yet).
                    raise exceptions.SendfileNotAvailableError(
                        "os.sendfile call failed") from exc
                raise
            if sent == 0:
                return True  # EOF.
            pos[0] += sent
            total[0] += sent
            if pos[0] >= end:
                return True
            raise BlockingIOError

        def attempt(fut):
            if fut.done():
                return
            try:
                while not send_some():
                    pass
            except (BlockingIOError, InterruptedError):
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:  # noqa: BLE001 - to the awaiter.
                _set_exception(fut, exc)
            else:
                _set_result(fut, None)

        try:
            try:
                done = send_some()
            except (BlockingIOError, InterruptedError):
                done = False
            if not done:
                await self._sock_wait(sock, True, attempt)
            return total[0]
        finally:
            if total[0] > 0 or _SENDFILE_ALWAYS_SETS_POSITION:
                file.seek(offset + total[0])

    async def _sock_sendfile_fallback(self, sock, file, offset, count):
        # From `offset` (0 included), not from wherever the file stands.
        if hasattr(file, "seek"):
            file.seek(offset)
        blocksize = (min(count, _SENDFILE_FALLBACK_CHUNK) if count
                     else _SENDFILE_FALLBACK_CHUNK)
        buf = bytearray(blocksize)
        total_sent = 0
        try:
            while True:
                if count:
                    blocksize = min(count - total_sent, blocksize)
                    if blocksize <= 0:
                        break
                view = memoryview(buf)[:blocksize]
                read = await self.run_in_executor(None, file.readinto, view)
                if not read:
                    break  # EOF.
                await self.sock_sendall(sock, view[:read])
                total_sent += read
            return total_sent
        finally:
            if total_sent > 0 and hasattr(file, "seek"):
                file.seek(offset + total_sent)

    # --- name resolution (on the blocking pool) ------------------------------

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0,
                          flags=0):
        """socket.getaddrinfo() on a blocking-pool thread."""
        return await self.run_in_executor(
            None, socket.getaddrinfo, host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        """socket.getnameinfo() on a blocking-pool thread."""
        return await self.run_in_executor(
            None, socket.getnameinfo, sockaddr, flags)

    async def _ensure_resolved(self, address, *, family=0,
                               type=socket.SOCK_STREAM, proto=0, flags=0):
        host, port = address[:2]
        info = _ipaddr_info(host, port, family, type, proto, *address[2:])
        if info is not None:
            return [info]
        return await self.getaddrinfo(host, port, family=family, type=type,
                                      proto=proto, flags=flags)
