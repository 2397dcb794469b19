"""Server: what create_server() and create_unix_server() return.

stdlib's contract (asyncio.base_events.Server), for a loop whose
connections live on many workers: transports attach and detach from
whichever worker runs them, so the bookkeeping is under a lock.
"""

import os
import stat
import sys
import threading

from asyncio import events, exceptions, trsock

from .. import _core, _shutdown, tasks, tls

__all__ = ["Server"]

# Every Server not closed yet, for the runtime's coordinated shutdown.
# 3.14's asyncio closes the clients of a server whose serve_forever() is
# cancelled; 3.13's only closes the server.
_SERVE_FOREVER_CLOSES_CLIENTS = sys.version_info >= (3, 14)


class Server(events.AbstractServer):

    def __init__(self, loop, sockets, protocol_factory, ssl_context, backlog,
                 ssl_handshake_timeout=None, ssl_shutdown_timeout=None,
                 unix_paths=None):
        self._loop = loop
        self._sockets = sockets
        self._protocol_factory = protocol_factory
        self._ssl_context = ssl_context
        self._backlog = backlog
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        # Unix socket files to remove on close: {socket: inode when bound}.
        self._unix_paths = unix_paths or {}
        self._lock = threading.Lock()
        self._clients = set()     # Transports attached, under _lock.
        self._waiters = []        # wait_closed() futures; None once woken.
        self._listeners = []      # One _core._Listener per socket.
        self._serving = False
        self._serving_forever_fut = None
        _shutdown.add_server(self)

    def __repr__(self):
        return f"<{self.__class__.__name__} sockets={self.sockets!r}>"

    # Called by transports, from the worker that runs each one.
    def _attach(self, transport):
        with self._lock:
            self._clients.add(transport)

    def _detach(self, transport):
        with self._lock:
            self._clients.discard(transport)
            wake = not self._clients and self._sockets is None
        if wake:
            self._wakeup()

    def _wakeup(self):
        with self._lock:
            waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                try:
                    waiter.set_result(None)
                except exceptions.InvalidStateError:
                    pass  # Cancelled meanwhile on another worker.

    def _start_serving(self):
        with self._lock:
            if self._serving or self._sockets is None:
                return
            self._serving = True
            sockets = list(self._sockets)
        factory = self._protocol_factory
        spec = None
        if isinstance(self._ssl_context, tls.TLSContext):
            # The native engine: the listener's connections do their own
            # handshakes; the protocol is the application's.
            spec = self._ssl_context._mt_spec(
                True, None, self._ssl_handshake_timeout, self._ssl_shutdown_timeout)
        elif self._ssl_context is not None:
            factory = self._loop._tls_server_factory(
                factory, self._ssl_context, self._ssl_handshake_timeout,
                self._ssl_shutdown_timeout)
        for sock in sockets:
            sock.listen(self._backlog)
            self._listeners.append(_core._Listener(
                self._loop, sock, factory, self, self._backlog, spec))

    def get_loop(self):
        return self._loop

    def is_serving(self):
        return self._serving

    @property
    def sockets(self):
        sockets = self._sockets
        if sockets is None:
            return ()
        return tuple(trsock.TransportSocket(s) for s in sockets)

    def close(self):
        """Stop listening and close the listening sockets; connections
        already accepted stay open (close_clients() closes them)."""
        with self._lock:
            sockets, self._sockets = self._sockets, None
            if sockets is None:
                return
            listeners, self._listeners = self._listeners, []
            self._serving = False
        _shutdown.discard_server(self)
        # A listener's close waits for an accept in progress on another
        # worker to attach its connection, and first accepts what the
        # kernel holds already established (on a one-thread loop, the
        # accept of a connection whose peer has connected runs before the
        # step that closes): counted below, not missed or reset.
        accept_pending = not self._loop.is_closed()
        for listener in listeners:
            listener.close(accept_pending)
        with self._lock:
            no_clients = not self._clients
        for sock in sockets:
            self._close_socket(sock)
        fut = self._serving_forever_fut
        if fut is not None and not fut.done():
            fut.cancel()
            self._serving_forever_fut = None
        if no_clients:
            self._wakeup()

    def _close_socket(self, sock):
        inode = self._unix_paths.pop(sock, None)
        path = None
        if inode is not None:
            try:
                path = sock.getsockname()
            except OSError:
                path = None
        sock.close()
        if path:
            # Only the file we bound: another server may have replaced it.
            try:
                st = os.stat(path)
                if stat.S_ISSOCK(st.st_mode) and st.st_ino == inode:
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as err:
                from asyncio.log import logger
                logger.error("Unable to clean up listening UNIX socket %r: %r",
                             path, err)

    def close_clients(self):
        with self._lock:
            clients = list(self._clients)
        for transport in clients:
            transport.close()

    def abort_clients(self):
        with self._lock:
            clients = list(self._clients)
        for transport in clients:
            transport.abort()

    async def start_serving(self):
        self._start_serving()
        # Let the listeners' first look at their sockets happen, as stdlib
        # does with one loop iteration.
        await tasks.sleep(0)

    async def serve_forever(self):
        if self._serving_forever_fut is not None:
            raise RuntimeError(
                f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except exceptions.CancelledError:
            try:
                self.close()
                if _SERVE_FOREVER_CLOSES_CLIENTS:
                    # Cancelled (Ctrl-C): connections that would keep
                    # wait_closed() waiting are closed too (3.14's asyncio).
                    self.close_clients()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self):
        """Wait until the server is closed and every connection it accepted
        is gone (returns at once if that already happened)."""
        with self._lock:
            if self._waiters is None:
                return
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
        await waiter

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()
        await self.wait_closed()
