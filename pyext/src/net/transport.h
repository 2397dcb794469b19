#ifndef MT_PYEXT_SRC_NET_TRANSPORT_H_
#define MT_PYEXT_SRC_NET_TRANSPORT_H_

#include <Python.h>

namespace mt::pyext {

// mt_asyncio._core.SocketTransport and the accept loop behind servers.
//
// Execution model. Each connection is a runtime Strand (a serial executor,
// runtime/scheduler/strand.h) and one unit on it, the connection unit,
// which does everything the reactor asks of the connection: reading into a
// reused per-thread buffer and calling data_received/buffer_updated,
// flushing the write buffer when the socket is writable, eof_received,
// pause_writing/resume_writing, and finally connection_lost. So one
// connection's protocol callbacks never overlap and run in order, while
// different connections run on different workers at once. Tasks and
// callbacks that a connection's callbacks start are bound to the same
// strand (LoopExecutor), so a handler task and the parser feeding it see
// each other as on a one-thread loop. A client connection adopts the task
// that makes it onto its strand for the same reason.
//
// write() is safe from any thread: it sends at once when nothing is
// buffered and buffers only what the socket did not take; the connection
// unit flushes the rest. Accepted connections are spread over the workers
// by the scheduler (each starts as a new strand queued on the accepting
// worker, which idle workers steal from), so one listening socket serves
// every core.
//
// Adds SocketTransport, _make_socket_transport and _Listener. 0 or -1.
int RegisterTransportTypes(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_NET_TRANSPORT_H_
