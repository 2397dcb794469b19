#ifndef MT_PYEXT_SRC_NET_TRANSPORT_H_
#define MT_PYEXT_SRC_NET_TRANSPORT_H_

#include <Python.h>

#include "runtime/scheduler/strand.h"

namespace mt::pyext {

// mt_asyncio._core.SocketTransport: a stream socket's transport.
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
// unit flushes the rest.
//
// Adds SocketTransport and _make_socket_transport. 0 or -1.
int RegisterTransportTypes(PyObject* module);

// For the listener (listener.h): a transport around the accepted `sock`
// (borrowed; the transport owns the socket from here on), whose protocol
// `factory` makes when it starts, attached to `server` (server._attach)
// and started on a new strand, a child of `owner` (or none), its callbacks
// in a copy of `context`; with `tls_spec` (a TLS spec tuple, or nullptr
// or None), on the native TLS engine. Connections spread over the workers this way:
// each starts as a new strand queued on the accepting worker, which idle
// workers steal from, so one listening socket serves every core.
// 0, or -1 with an error set and nothing made (the caller closes `sock`).
int StartAcceptedTransport(PyObject* loop, PyObject* sock, PyObject* factory,
                           PyObject* server, PyObject* context,
                           runtime::scheduler::Strand* owner, PyObject* tls_spec = nullptr);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_NET_TRANSPORT_H_
