#ifndef MT_PYEXT_SRC_NET_TRANSPORT_UTIL_H_
#define MT_PYEXT_SRC_NET_TRANSPORT_UTIL_H_

#include <Python.h>

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "pyext/src/common/py_mutex.h"

// What the stream and datagram transports share: how they report errors to
// the loop, stdlib's extra info, the write-buffer limits.

namespace mt::pyext::transport {

// Imported once by Init(): asyncio.trsock.TransportSocket,
// asyncio.BufferedProtocol, socket.socket, asyncio's logger.
extern PyObject* transport_socket_type;
extern PyObject* buffered_protocol_type;
extern PyObject* socket_type;
extern PyObject* logger;
int Init();

// Calls loop.call_exception_handler({message, exception, extra...}) and
// clears any error it raises. Consumes `exc` (may be nullptr).
void ReportToLoop(PyObject* loop, const char* message, PyObject* exc,
                  std::initializer_list<std::pair<const char*, PyObject*>> extra);
// An OSError for `err` (new reference), or nullptr with an error set.
PyObject* OsErrorFromErrno(int err);
// loop.get_debug(), false if it fails.
bool GetDebug(PyObject* loop);
// obj.name() or obj.name(arg): new reference, or nullptr with an error.
PyObject* CallMethod(PyObject* obj, const char* name, PyObject* arg = nullptr);
// Stdlib's extra info for `sock`: a copy of `extra` (None or nullptr: empty)
// with socket (a TransportSocket), sockname and peername (None when the
// socket cannot say). New reference or nullptr.
PyObject* MakeExtra(PyObject* sock, PyObject* extra);
// The fd of a Python socket object, or -1 with an error.
int SocketFd(PyObject* sock);
// TCP_NODELAY on a TCP stream socket, as stdlib sets it on every
// transport's socket; other sockets are left as they are.
void SetNoDelay(int fd);

// set_write_buffer_limits(high=None, low=None) by stdlib's rules: high
// defaults to `default_high` (or 4 * low), low to high // 4, and
// high >= low >= 0 or ValueError. 0, or -1 with an error.
int ParseWriteBufferLimits(PyObject* args, PyObject* kwds, std::size_t default_high,
                           std::size_t* high, std::size_t* low);
// get_extra_info(name, default=None) over `extra` (a dict, or nullptr).
PyObject* GetExtraInfo(PyObject* extra, PyObject* const* args, Py_ssize_t nargs);
// Resolves *waiter (a future; cleared) with None unless it was cancelled,
// or fails it with `exc` (borrowed) when given.
void ResolveWaiter(PyObject** waiter, PyObject* exc = nullptr);

}  // namespace mt::pyext::transport

#endif  // MT_PYEXT_SRC_NET_TRANSPORT_UTIL_H_
