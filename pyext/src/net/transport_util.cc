#include "pyext/src/net/transport_util.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>

#include "pyext/src/loop/loop.h"

namespace mt::pyext::transport {

PyObject* transport_socket_type = nullptr;
PyObject* buffered_protocol_type = nullptr;
PyObject* socket_type = nullptr;
PyObject* logger = nullptr;

namespace {

PyObject* ImportAttr(const char* module, const char* name) {
  PyObject* m = PyImport_ImportModule(module);
  if (m == nullptr) return nullptr;
  PyObject* v = PyObject_GetAttrString(m, name);
  Py_DECREF(m);
  return v;
}

}  // namespace

int Init() {
  if (logger != nullptr) return 0;
  transport_socket_type = ImportAttr("asyncio.trsock", "TransportSocket");
  buffered_protocol_type = ImportAttr("asyncio.protocols", "BufferedProtocol");
  socket_type = ImportAttr("socket", "socket");
  logger = ImportAttr("asyncio.log", "logger");
  return transport_socket_type != nullptr && buffered_protocol_type != nullptr &&
                 socket_type != nullptr && logger != nullptr
             ? 0
             : -1;
}

void ReportToLoop(PyObject* loop, const char* message, PyObject* exc,
                  std::initializer_list<std::pair<const char*, PyObject*>> extra) {
  PyObject* saved = PyErr_GetRaisedException();
  PyObject* ctx = PyDict_New();
  if (ctx != nullptr) {
    PyObject* msg = PyUnicode_FromString(message);
    if (msg != nullptr) PyDict_SetItemString(ctx, "message", msg);
    Py_XDECREF(msg);
    if (exc != nullptr) PyDict_SetItemString(ctx, "exception", exc);
    for (const auto& [key, value] : extra) {
      if (value != nullptr) PyDict_SetItemString(ctx, key, value);
    }
    PyObject* res = PyObject_CallMethod(loop, "call_exception_handler", "O", ctx);
    if (res == nullptr) PyErr_WriteUnraisable(loop);
    Py_XDECREF(res);
    Py_DECREF(ctx);
  } else {
    PyErr_WriteUnraisable(loop);
  }
  Py_XDECREF(exc);
  PyErr_SetRaisedException(saved);
}

PyObject* OsErrorFromErrno(int err) {
  PyObject* args = Py_BuildValue("(is)", err, std::strerror(err));
  if (args == nullptr) return nullptr;
  PyObject* exc = PyObject_Call(PyExc_OSError, args, nullptr);
  Py_DECREF(args);
  return exc;
}

bool GetDebug(PyObject* loop) {
  PyObject* res = PyObject_CallMethod(loop, "get_debug", nullptr);
  if (res == nullptr) {
    PyErr_Clear();
    return false;
  }
  const int v = PyObject_IsTrue(res);
  Py_DECREF(res);
  return v > 0;
}

PyObject* CallMethod(PyObject* obj, const char* name, PyObject* arg) {
  PyObject* n = PyUnicode_InternFromString(name);
  if (n == nullptr) return nullptr;
  PyObject* res = arg == nullptr ? PyObject_CallMethodNoArgs(obj, n)
                                 : PyObject_CallMethodOneArg(obj, n, arg);
  Py_DECREF(n);
  return res;
}

PyObject* MakeExtra(PyObject* sock, PyObject* extra) {
  PyObject* d = extra != nullptr && extra != Py_None ? PyDict_Copy(extra) : PyDict_New();
  if (d == nullptr) return nullptr;
  PyObject* ts = PyObject_CallOneArg(transport_socket_type, sock);
  if (ts == nullptr || PyDict_SetItemString(d, "socket", ts) < 0) {
    Py_XDECREF(ts);
    Py_DECREF(d);
    return nullptr;
  }
  Py_DECREF(ts);
  for (const char* key : {"sockname", "peername"}) {
    PyObject* present;
    if (PyDict_GetItemStringRef(d, key, &present) != 0) {
      Py_XDECREF(present);
      continue;
    }
    PyObject* v = CallMethod(sock, key[0] == 's' ? "getsockname" : "getpeername");
    if (v == nullptr) {
      if (!PyErr_ExceptionMatches(PyExc_OSError)) {
        Py_DECREF(d);
        return nullptr;
      }
      PyErr_Clear();
      v = Py_NewRef(Py_None);
    }
    PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
  }
  return d;
}

int SocketFd(PyObject* sock) {
  PyObject* fileno = CallMethod(sock, "fileno");
  if (fileno == nullptr) return -1;
  const int fd = PyLong_AsInt(fileno);
  Py_DECREF(fileno);
  if (fd == -1 && PyErr_Occurred()) return -1;
  if (fd < 0) {
    PyErr_SetString(PyExc_ValueError, "the socket is closed");
    return -1;
  }
  return fd;
}

void SetNoDelay(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return;
  int type = 0;
  socklen_t tlen = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) != 0 || type != SOCK_STREAM) return;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int ParseWriteBufferLimits(PyObject* args, PyObject* kwds, std::size_t default_high,
                           std::size_t* high_out, std::size_t* low_out) {
  static const char* kwlist[] = {"high", "low", nullptr};
  PyObject* high_obj = Py_None;
  PyObject* low_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:set_write_buffer_limits",
                                   const_cast<char**>(kwlist), &high_obj, &low_obj)) {
    return -1;
  }
  long long high, low = 0;
  if (low_obj != Py_None) {
    low = PyLong_AsLongLong(low_obj);
    if (low == -1 && PyErr_Occurred()) return -1;
  }
  if (high_obj == Py_None) {
    high = low_obj == Py_None ? static_cast<long long>(default_high) : 4 * low;
  } else {
    high = PyLong_AsLongLong(high_obj);
    if (high == -1 && PyErr_Occurred()) return -1;
  }
  if (low_obj == Py_None) {
    low = high >= 0 ? high / 4 : -((3 - high) / 4);  // Python's floor division.
  }
  if (!(high >= low && low >= 0)) {
    PyErr_Format(PyExc_ValueError, "high (%lld) must be >= low (%lld) must be >= 0", high,
                 low);
    return -1;
  }
  *high_out = static_cast<std::size_t>(high);
  *low_out = static_cast<std::size_t>(low);
  return 0;
}

PyObject* GetExtraInfo(PyObject* extra, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "get_extra_info(name, default=None)");
    return nullptr;
  }
  PyObject* dflt = nargs == 2 ? args[1] : Py_None;
  if (extra == nullptr) return Py_NewRef(dflt);
  PyObject* value;
  const int found = PyDict_GetItemRef(extra, args[0], &value);
  if (found < 0) return nullptr;
  if (found) return value;
  // A native TLS connection decodes its peer's certificate into the ssl
  // module's dict when first asked: most connections never ask.
  if (PyUnicode_Check(args[0]) && PyUnicode_CompareWithASCIIString(args[0], "peercert") == 0) {
    PyObject* ssl_object;
    if (PyDict_GetItemStringRef(extra, "ssl_object", &ssl_object) > 0) {
      PyObject* cert = PyObject_CallMethod(ssl_object, "getpeercert", nullptr);
      Py_DECREF(ssl_object);
      if (cert == nullptr) return nullptr;
      PyObject* kept;
      if (PyDict_SetDefaultRef(extra, args[0], cert, &kept) < 0) {
        Py_DECREF(cert);
        return nullptr;
      }
      Py_DECREF(cert);
      return kept;
    }
    PyErr_Clear();
  }
  return Py_NewRef(dflt);
}

void ResolveWaiter(PyObject** waiter, PyObject* exc) {
  PyObject* w = *waiter;
  *waiter = nullptr;
  if (w == nullptr) return;
  PyObject* cancelled = CallMethod(w, "cancelled");
  if (cancelled == Py_False) {
    PyObject* r = exc == nullptr ? PyObject_CallMethod(w, "set_result", "O", Py_None)
                                 : PyObject_CallMethod(w, "set_exception", "O", exc);
    if (r == nullptr) PyErr_WriteUnraisable(w);
    Py_XDECREF(r);
  } else if (cancelled == nullptr) {
    PyErr_WriteUnraisable(w);
  }
  Py_XDECREF(cancelled);
  Py_DECREF(w);
}

}  // namespace mt::pyext::transport
