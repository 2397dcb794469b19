"""The loop's connection API: create_connection, create_server, their Unix
variants and connect_accepted_socket, with stdlib's signatures, checks and
errors. The transports themselves are C++ (``pyext/src/net/transport.cc``).
"""

import collections.abc
import errno
import functools
import itertools
import os
import socket
import stat
import sys

import threading
from asyncio import streams
from asyncio.exceptions import InvalidStateError
from asyncio.log import logger

from .. import _core, locks, tasks, timeouts
from .servers import Server
from .sockets import _check_ssl_socket, _ssl
from .tls import TLSProtocol
from .. import tls

__all__ = ["ConnectionMethods"]


def _interleave_addrinfos(addrinfos, first_address_family_count=1):
    """Reorder addresses to alternate families (RFC 8305 Happy Eyeballs):
    the first `first_address_family_count` of the first family, then one
    of each family in turn."""
    by_family = collections.OrderedDict()
    for info in addrinfos:
        by_family.setdefault(info[0], []).append(info)
    lists = list(by_family.values())
    reordered = []
    if first_address_family_count > 1:
        reordered.extend(lists[0][:first_address_family_count - 1])
        del lists[0][:first_address_family_count - 1]
    reordered.extend(
        a for a in itertools.chain.from_iterable(
            itertools.zip_longest(*lists)) if a is not None)
    return reordered


def _set_reuseport(sock):
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError("reuse_port not supported by socket module, "
                         "SO_REUSEPORT defined but not implemented.") from None


def _remove_stale_unix_socket(path):
    """A socket file left by an earlier run is removed before binding;
    abstract names (a leading NUL) have no file."""
    if path[0] in (0, "\x00"):
        return
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as err:
        logger.error("Unable to check or remove stale UNIX socket %r: %r",
                     path, err)


def _check_tls_timeouts(tls, handshake_timeout, shutdown_timeout):
    """stdlib's rule: TLS timeouts are refused without TLS."""
    if handshake_timeout is not None and not tls:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if shutdown_timeout is not None and not tls:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")


def _ssl_context(ssl, server_side):
    """stdlib's rule for ssl=True: a default context (clients only)."""
    if isinstance(ssl, _ssl.SSLContext):
        return ssl
    if server_side:
        raise ValueError("Server side SSL needs a valid SSLContext")
    return _ssl.create_default_context()


def _held_handshake_bytes(protocol, server_side):
    """What a server's stream reader already read of the peer's first TLS
    flight (start_tls() after a plain exchange): it belongs to the
    handshake, and leaves the reader."""
    reader = getattr(protocol, "_stream_reader", None)
    if not (server_side and isinstance(protocol, streams.StreamReaderProtocol)
            and reader is not None and reader._buffer):
        return b""
    held = bytes(reader._buffer)
    reader._buffer.clear()
    return held


async def _switch_on_strand(transport, waiter, install):
    """start_tls()'s switch: `install()` runs on the connection's strand, in
    one go (nothing of the connection runs in between, so no byte reaches
    the old protocol after its buffer moved, and the TLS layer is in place
    before its first data; stdlib gets the same from call_soon's order on
    one thread); then the handshake's waiter is awaited."""
    abandoned = False

    def switch():
        if abandoned:
            return  # start_tls() was cancelled first: leave it closed.
        try:
            install()
        except BaseException as exc:
            if not waiter.done():
                waiter.set_exception(exc)
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                raise

    transport._call_serialized(switch)
    try:
        await waiter
    except BaseException:
        # As asyncio cancels its pending connection_made/resume_reading
        # callbacks: a switch not made yet is not made at all.
        abandoned = True
        transport.close()
        raise


class ConnectionMethods:
    """Mixed into mt_asyncio's EventLoop."""

    def _make_socket_transport(self, sock, protocol, waiter=None, *,
                               extra=None, server=None):
        return _core._make_socket_transport(self, sock, protocol, waiter,
                                            extra, server)

    def _make_ssl_transport(self, rawsock, protocol, sslcontext, waiter=None,
                            *, server_side=False, server_hostname=None,
                            extra=None, server=None,
                            ssl_handshake_timeout=None,
                            ssl_shutdown_timeout=None):
        return self._make_ssl_transports(
            rawsock, protocol, sslcontext, waiter, server_side=server_side,
            server_hostname=server_hostname, extra=extra, server=server,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)[0]

    def _make_ssl_transports(self, rawsock, protocol, sslcontext, waiter, *,
                             server_side, server_hostname, extra=None,
                             server=None, ssl_handshake_timeout=None,
                             ssl_shutdown_timeout=None):
        """The TLS transport the application gets, and the socket
        transport under it: the same one on the native engine."""
        if isinstance(sslcontext, tls.TLSContext):
            spec = sslcontext._mt_spec(server_side, server_hostname,
                                       ssl_handshake_timeout, ssl_shutdown_timeout)
            raw = _core._make_socket_transport(self, rawsock, protocol, waiter,
                                               extra, server, spec)
            return raw, raw
        ssl_protocol = TLSProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)
        raw = _core._make_socket_transport(self, rawsock, ssl_protocol, None,
                                           extra, server)
        return ssl_protocol._app_transport, raw

    def _tls_server_factory(self, protocol_factory, sslcontext,
                            ssl_handshake_timeout, ssl_shutdown_timeout):
        """What a TLS server's listener makes per connection: stdlib's TLS
        protocol around the application's."""
        def factory():
            return TLSProtocol(
                self, protocol_factory(), sslcontext, None, server_side=True,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout)
        return factory

    async def _create_connection_transport(
            self, sock, protocol_factory, ssl, server_hostname,
            server_side=False, ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None):
        sock.setblocking(False)
        protocol = protocol_factory()
        waiter = self.create_future()
        if ssl:
            sslcontext = _ssl_context(ssl, server_side)
            transport, raw = self._make_ssl_transports(
                sock, protocol, sslcontext, waiter, server_side=server_side,
                server_hostname=server_hostname,
                ssl_handshake_timeout=ssl_handshake_timeout,
                ssl_shutdown_timeout=ssl_shutdown_timeout)
        else:
            transport = raw = self._make_socket_transport(sock, protocol, waiter)
        try:
            await waiter
        except BaseException:
            transport.close()
            released = getattr(raw, "_released", None)
            if ((raw is not transport or getattr(raw, "_is_tls", False))
                    and waiter.done() and not waiter.cancelled()
                    and waiter.exception() is None):
                # The handshake was done: closing shuts TLS down first, and
                # that keeps the socket for a while, as on stdlib.
                released = None
            if released is not None:
                # stdlib's close() takes the socket off its selector at
                # once; ours lets go of it on the connection's strand. Wait
                # for that, so that a caller who closes `sock` when this
                # raises can reuse its number for the next connection.
                try:
                    await released()
                except BaseException:  # noqa: BLE001 - the first error wins.
                    pass
            raise
        return transport, protocol

    async def start_tls(self, transport, protocol, sslcontext, *,
                        server_side=False, server_hostname=None,
                        ssl_handshake_timeout=None,
                        ssl_shutdown_timeout=None):
        """Upgrade a connection to TLS; return the new transport, which
        protocol should use from now on."""
        if _ssl is None:
            raise RuntimeError("Python ssl module is not available")
        if not isinstance(sslcontext, _ssl.SSLContext):
            raise TypeError(
                f"sslcontext is expected to be an instance of "
                f"ssl.SSLContext, got {sslcontext!r}")
        if not getattr(transport, "_start_tls_compatible", False):
            raise TypeError(
                f"transport {transport!r} is not supported by start_tls()")
        waiter = self.create_future()
        if (isinstance(sslcontext, tls.TLSContext)
                and getattr(transport, "_is_tls", None) is False):
            # The native engine: the same transport turns into a TLS one
            # on its strand; the protocol hears nothing more of the plain
            # stream.
            spec = sslcontext._mt_spec(server_side, server_hostname,
                                       ssl_handshake_timeout, ssl_shutdown_timeout)

            def install():
                transport._start_tls(spec, protocol, waiter,
                                     _held_handshake_bytes(protocol, server_side))

            await _switch_on_strand(transport, waiter, install)
            return transport
        ssl_protocol = TLSProtocol(
            self, protocol, sslcontext, waiter, server_side, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            call_connection_made=False)

        def install():
            transport.pause_reading()
            ssl_protocol._incoming.write(_held_handshake_bytes(protocol, server_side))
            transport.set_protocol(ssl_protocol)
            ssl_protocol.connection_made(transport)
            transport.resume_reading()

        await _switch_on_strand(transport, waiter, install)
        return ssl_protocol._app_transport

    async def _connect_sock(self, exceptions, addr_info, local_addr_infos=None):
        """One connection attempt; its errors are collected in a list that
        is appended to `exceptions`."""
        my_exceptions = []
        exceptions.append(my_exceptions)
        family, type_, proto, _, address = addr_info
        sock = None
        try:
            try:
                sock = socket.socket(family=family, type=type_, proto=proto)
                sock.setblocking(False)
                if local_addr_infos is not None:
                    for lfamily, _, _, _, laddr in local_addr_infos:
                        if lfamily != family:
                            continue
                        try:
                            sock.bind(laddr)
                            break
                        except OSError as exc:
                            msg = (f"error while attempting to bind on "
                                   f"address {laddr!r}: {str(exc).lower()}")
                            my_exceptions.append(OSError(exc.errno, msg))
                    else:
                        if my_exceptions:
                            raise my_exceptions.pop()
                        raise OSError(
                            f"no matching local address with {family=} found")
                await self.sock_connect(sock, address)
                return sock
            except OSError as exc:
                my_exceptions.append(exc)
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
                raise
            except:
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
                raise
        finally:
            exceptions = my_exceptions = None

    async def create_connection(
            self, protocol_factory, host=None, port=None, *, ssl=None,
            family=0, proto=0, flags=0, sock=None, local_addr=None,
            server_hostname=None, ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None, happy_eyeballs_delay=None,
            interleave=None, all_errors=False):
        """Connect to host:port (or use sock) and return (transport,
        protocol)."""
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            if not host:
                raise ValueError("You must set server_hostname "
                                 "when using ssl without a host")
            server_hostname = host
        _check_tls_timeouts(bool(ssl), ssl_handshake_timeout,
                            ssl_shutdown_timeout)
        if sock is not None:
            _check_ssl_socket(sock)
        if happy_eyeballs_delay is not None and interleave is None:
            interleave = 1  # RFC 8305's recommendation.

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError(
                    "host/port and sock can not be specified at the same time")
            infos = await self._ensure_resolved(
                (host, port), family=family, type=socket.SOCK_STREAM,
                proto=proto, flags=flags)
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            if local_addr is not None:
                laddr_infos = await self._ensure_resolved(
                    local_addr, family=family, type=socket.SOCK_STREAM,
                    proto=proto, flags=flags)
                if not laddr_infos:
                    raise OSError("getaddrinfo() returned empty list")
            else:
                laddr_infos = None
            if interleave:
                infos = _interleave_addrinfos(infos, interleave)

            exceptions = []
            if happy_eyeballs_delay is None:
                for addrinfo in infos:
                    try:
                        sock = await self._connect_sock(
                            exceptions, addrinfo, laddr_infos)
                        break
                    except OSError:
                        continue
            else:
                sock = await self._staggered_connect(
                    [functools.partial(self._connect_sock, exceptions,
                                       addrinfo, laddr_infos)
                     for addrinfo in infos],
                    happy_eyeballs_delay)

            if sock is None:
                flat = [exc for sub in exceptions for exc in sub]
                # The per-attempt lists may outlive this call (the attempts'
                # partials, their finished tasks): emptied, they do not keep
                # the errors alive once the caller is done with them.
                for sub in exceptions:
                    sub.clear()
                exceptions.clear()
                exceptions, flat = flat, None
                try:
                    if all_errors:
                        raise ExceptionGroup("create_connection failed",
                                             exceptions)
                    if len(exceptions) == 1:
                        raise exceptions[0]
                    if exceptions:
                        model = str(exceptions[0])
                        if all(str(exc) == model for exc in exceptions):
                            raise exceptions[0]
                        raise OSError("Multiple exceptions: {}".format(
                            ", ".join(str(exc) for exc in exceptions)))
                    raise OSError("create_connection failed")
                finally:
                    exceptions = None
        else:
            if sock is None:
                raise ValueError(
                    "host and port was not specified and no sock specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")

        transport, protocol = await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)
        if self._debug:
            sock = transport.get_extra_info("socket")
            logger.debug("%r connected to %s:%r: (%r, %r)",
                         sock, host, port, transport, protocol)
        return transport, protocol

    async def _staggered_connect(self, attempts, delay):
        """Happy Eyeballs (RFC 8305): start the attempts one after another,
        each when the previous one failed or `delay` seconds passed; the
        first to connect wins and the others are cancelled (a socket one of
        them connects anyway is closed). Returns the winner's socket, or
        None when every attempt failed."""
        lock = threading.Lock()
        winner = []
        running = []
        all_done = self.create_future()
        left = [len(attempts)]

        def settle():
            with lock:
                left[0] -= 1
                finished = left[0] == 0 or bool(winner)
            if finished and not all_done.done():
                try:
                    all_done.set_result(None)
                except InvalidStateError:
                    pass

        async def run(i, previous_failed):
            if previous_failed is not None:
                try:
                    await timeouts.wait_for(previous_failed.wait(), delay)
                except TimeoutError:
                    pass
            with lock:
                if winner:
                    left[0] -= 1
                    return
            failed = locks.Event()
            if i + 1 < len(attempts):
                running.append(self.create_task(run(i + 1, failed)))
            try:
                sock = await attempts[i]()
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:  # noqa: BLE001 - gathered by _connect_sock.
                failed.set()
                settle()
                return
            with lock:
                won = not winner
                if won:
                    winner.append(sock)
            if not won:
                sock.close()
            settle()

        first = self.create_task(run(0, None))
        running.append(first)
        try:
            await all_done
        finally:
            for task in list(running):
                if not task.done():
                    task.cancel()
            await tasks.gather(*running, return_exceptions=True)
        return winner[0] if winner else None

    async def _create_server_getaddrinfo(self, host, port, family, flags):
        infos = await self._ensure_resolved((host, port), family=family,
                                            type=socket.SOCK_STREAM,
                                            flags=flags)
        if not infos:
            raise OSError(f"getaddrinfo({host!r}) returned empty list")
        return infos

    async def create_server(
            self, protocol_factory, host=None, port=None, *,
            family=socket.AF_UNSPEC, flags=socket.AI_PASSIVE, sock=None,
            backlog=100, ssl=None, reuse_address=None, reuse_port=None,
            keep_alive=None, ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None, start_serving=True):
        """Listen on host:port (every address it resolves to) or on sock;
        return a Server."""
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        _check_tls_timeouts(ssl is not None, ssl_handshake_timeout,
                            ssl_shutdown_timeout)
        if sock is not None:
            _check_ssl_socket(sock)

        if host is not None or port is not None:
            if sock is not None:
                raise ValueError(
                    "host/port and sock can not be specified at the same time")
            if reuse_address is None:
                reuse_address = os.name == "posix" and sys.platform != "cygwin"
            sockets = []
            if host == "":
                hosts = [None]
            elif (isinstance(host, str) or
                  not isinstance(host, collections.abc.Iterable)):
                hosts = [host]
            else:
                hosts = host
            fs = [self._create_server_getaddrinfo(h, port, family, flags)
                  for h in hosts]
            infos = await tasks.gather(*fs)
            infos = set(itertools.chain.from_iterable(infos))
            completed = False
            try:
                for res in infos:
                    af, socktype, proto, _, sa = res
                    try:
                        sock = socket.socket(af, socktype, proto)
                    except OSError:
                        if self._debug:
                            logger.warning("create_server() failed to create "
                                           "socket.socket(%r, %r, %r)",
                                           af, socktype, proto, exc_info=True)
                        continue
                    sockets.append(sock)
                    if reuse_address:
                        sock.setsockopt(socket.SOL_SOCKET,
                                        socket.SO_REUSEADDR, True)
                    if reuse_port:
                        _set_reuseport(sock)
                    if keep_alive:
                        sock.setsockopt(socket.SOL_SOCKET,
                                        socket.SO_KEEPALIVE, True)
                    # Without this a dual-stack IPv6 socket would also take
                    # the IPv4 port, and the IPv4 bind would fail.
                    if (socket.has_ipv6 and af == socket.AF_INET6 and
                            hasattr(socket, "IPPROTO_IPV6")):
                        sock.setsockopt(socket.IPPROTO_IPV6,
                                        socket.IPV6_V6ONLY, True)
                    try:
                        sock.bind(sa)
                    except OSError as err:
                        msg = ("error while attempting to bind on address "
                               f"{sa!r}: {str(err).lower()}")
                        if err.errno == errno.EADDRNOTAVAIL:
                            # An address this host does not have (an IPv6
                            # one without IPv6 configured): skip it.
                            sockets.pop()
                            sock.close()
                            if self._debug:
                                logger.warning(msg)
                            continue
                        raise OSError(err.errno, msg) from None
                if not sockets:
                    raise OSError("could not bind on any address out of "
                                  f"{[info[4] for info in infos]!r}")
                completed = True
            finally:
                if not completed:
                    for s in sockets:
                        s.close()
        else:
            if sock is None:
                raise ValueError("Neither host/port nor sock were specified")
            if sock.type != socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            sockets = [sock]

        for s in sockets:
            s.setblocking(False)
        server = Server(self, sockets, protocol_factory, ssl, backlog,
                        ssl_handshake_timeout, ssl_shutdown_timeout)
        if start_serving:
            await server.start_serving()
        if self._debug:
            logger.info("%r is serving", server)
        return server

    async def create_unix_connection(
            self, protocol_factory, path=None, *, ssl=None, sock=None,
            server_hostname=None, ssl_handshake_timeout=None,
            ssl_shutdown_timeout=None):
        """Connect to a Unix stream socket at path (or use sock)."""
        if ssl:
            if server_hostname is None:
                raise ValueError(
                    "you have to pass server_hostname when using ssl")
        else:
            if server_hostname is not None:
                raise ValueError("server_hostname is only meaningful with ssl")
            _check_tls_timeouts(False, ssl_handshake_timeout,
                                ssl_shutdown_timeout)
        if path is not None:
            if sock is not None:
                raise ValueError(
                    "path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
            try:
                sock.setblocking(False)
                await self.sock_connect(sock, path)
            except:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError("no path and sock were specified")
            if (sock.family != socket.AF_UNIX or
                    sock.type != socket.SOCK_STREAM):
                raise ValueError(
                    f"A UNIX Domain Stream Socket was expected, got {sock!r}")
            sock.setblocking(False)
        return await self._create_connection_transport(
            sock, protocol_factory, ssl, server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)

    async def create_unix_server(
            self, protocol_factory, path=None, *, sock=None, backlog=100,
            ssl=None, ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
            start_serving=True, cleanup_socket=True):
        """Listen on a Unix stream socket at path (or sock); return a
        Server. With cleanup_socket, closing the server removes the socket
        file it bound."""
        if isinstance(ssl, bool):
            raise TypeError("ssl argument must be an SSLContext or None")
        _check_tls_timeouts(bool(ssl), ssl_handshake_timeout,
                            ssl_shutdown_timeout)
        if path is not None:
            if sock is not None:
                raise ValueError(
                    "path and sock can not be specified at the same time")
            path = os.fspath(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            _remove_stale_unix_socket(path)
            try:
                sock.bind(path)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    raise OSError(errno.EADDRINUSE,
                                  f"Address {path!r} is already in use") \
                        from None
                raise
            except:
                sock.close()
                raise
        else:
            if sock is None:
                raise ValueError(
                    "path was not specified, and no sock specified")
            if (sock.family != socket.AF_UNIX or
                    sock.type != socket.SOCK_STREAM):
                raise ValueError(
                    f"A UNIX Domain Stream Socket was expected, got {sock!r}")
        unix_paths = {}
        if cleanup_socket:
            bound = sock.getsockname()
            if bound and bound[0] not in (0, "\x00"):
                try:
                    unix_paths[sock] = os.stat(bound).st_ino
                except FileNotFoundError:
                    pass
        sock.setblocking(False)
        server = Server(self, [sock], protocol_factory, ssl, backlog,
                        ssl_handshake_timeout, ssl_shutdown_timeout,
                        unix_paths=unix_paths)
        if start_serving:
            await server.start_serving()
        return server

    async def create_datagram_endpoint(
            self, protocol_factory, local_addr=None, remote_addr=None, *,
            family=0, proto=0, flags=0, reuse_port=None, allow_broadcast=None,
            sock=None):
        """A datagram endpoint (UDP, or Unix datagram with family=AF_UNIX):
        bound to local_addr, connected to remote_addr, or on sock."""
        if sock is not None:
            if sock.type == socket.SOCK_STREAM:
                raise ValueError(
                    f"A datagram socket was expected, got {sock!r}")
            if (local_addr or remote_addr or family or proto or flags or
                    reuse_port or allow_broadcast):
                opts = dict(local_addr=local_addr, remote_addr=remote_addr,
                            family=family, proto=proto, flags=flags,
                            reuse_port=reuse_port,
                            allow_broadcast=allow_broadcast)
                problems = ", ".join(f"{k}={v}" for k, v in opts.items() if v)
                raise ValueError(
                    "socket modifier keyword arguments can not be used "
                    f"when sock is specified. ({problems})")
            sock.setblocking(False)
            r_addr = None
        else:
            sock, r_addr = await self._datagram_socket(
                local_addr, remote_addr, family, proto, flags, reuse_port,
                allow_broadcast)
        protocol = protocol_factory()
        waiter = self.create_future()
        transport = _core._make_datagram_transport(self, sock, protocol,
                                                   r_addr, waiter)
        if self._debug:
            logger.debug("Datagram endpoint local_addr=%r remote_addr=%r "
                         "created: (%r, %r)", local_addr, remote_addr,
                         transport, protocol)
        try:
            await waiter
        except:
            transport.close()
            raise
        return transport, protocol

    async def _datagram_socket(self, local_addr, remote_addr, family, proto,
                               flags, reuse_port, allow_broadcast):
        """The first socket that binds and connects as asked: (sock,
        remote address or None)."""
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            candidates = [((family, proto), (None, None))]
        elif hasattr(socket, "AF_UNIX") and family == socket.AF_UNIX:
            for addr in (local_addr, remote_addr):
                if addr is not None and not isinstance(addr, str):
                    raise TypeError("string is expected")
            if local_addr:
                _remove_stale_unix_socket(local_addr)
            candidates = [((family, proto), (local_addr, remote_addr))]
        else:
            # Local and remote addresses paired by (family, protocol).
            by_key = {}
            for idx, addr in ((0, local_addr), (1, remote_addr)):
                if addr is None:
                    continue
                if not (isinstance(addr, tuple) and len(addr) == 2):
                    raise TypeError("2-tuple is expected")
                infos = await self._ensure_resolved(
                    addr, family=family, type=socket.SOCK_DGRAM, proto=proto,
                    flags=flags)
                if not infos:
                    raise OSError("getaddrinfo() returned empty list")
                for fam, _, pro, _, address in infos:
                    by_key.setdefault((fam, pro), [None, None])[idx] = address
            candidates = [
                (key, pair) for key, pair in by_key.items()
                if not ((local_addr and pair[0] is None) or
                        (remote_addr and pair[1] is None))]
            if not candidates:
                raise ValueError("can not get address information")

        errors = []
        for (fam, pro), (local_address, remote_address) in candidates:
            sock = None
            try:
                sock = socket.socket(family=fam, type=socket.SOCK_DGRAM,
                                     proto=pro)
                if reuse_port:
                    _set_reuseport(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(local_address)
                r_addr = None
                if remote_addr:
                    if not allow_broadcast:
                        await self.sock_connect(sock, remote_address)
                    r_addr = remote_address
                return sock, r_addr
            except OSError as exc:
                if sock is not None:
                    sock.close()
                errors.append(exc)
            except:
                if sock is not None:
                    sock.close()
                raise
        raise errors[0]

    async def connect_accepted_socket(
            self, protocol_factory, sock, *, ssl=None,
            ssl_handshake_timeout=None, ssl_shutdown_timeout=None):
        """Wrap an already accepted connection in a transport and
        protocol."""
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        _check_tls_timeouts(bool(ssl), ssl_handshake_timeout,
                            ssl_shutdown_timeout)
        _check_ssl_socket(sock)
        return await self._create_connection_transport(
            sock, protocol_factory, ssl, "", server_side=True,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout)
