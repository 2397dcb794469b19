#ifndef MT_PYEXT_SRC_NET_LISTENER_H_
#define MT_PYEXT_SRC_NET_LISTENER_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core._Listener(loop, sock, protocol_factory, server,
// backlog): accepts on a listening socket and starts each connection as a
// SocketTransport (transport.h) attached to `server` (servers.py's
// Server). close(accept_pending=False) stops accepting (the socket stays
// open); resume() looks for connections again after a pause.
//
// Adds _Listener. 0, or -1 with an error set.
int RegisterListenerType(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_NET_LISTENER_H_
