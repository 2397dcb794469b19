// mt_asyncio._core.DatagramTransport: UDP and Unix datagram endpoints.
//
// Same execution model as the stream transport (transport.h): one unit on
// the endpoint's strand receives datagrams, flushes what sendto() had to
// queue and delivers every protocol callback, in order, never two at once.
// Datagrams go through the Python socket's recvfrom/sendto/send, so
// addresses are parsed and reported exactly as the socket module does.

#include "pyext/src/net/datagram.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/strands.h"
#include "pyext/src/loop/task.h"
#include "pyext/src/net/connection_unit.h"
#include "pyext/src/net/transport_util.h"
#include "runtime/io/driver.h"
#include "runtime/scheduler/strand.h"

namespace mt::pyext {
namespace {

namespace io = runtime::io;
namespace rt_task = runtime::task;
using runtime::scheduler::Strand;
using namespace transport;  // NOLINT: the transports' shared helpers.

constexpr Py_ssize_t kMaxDatagram = 256 * 1024;
// stdlib counts each queued datagram as its size plus this much.
constexpr std::size_t kHeaderSize = 8;
constexpr int kLogConnLostWrites = 5;
// Datagrams received per run before others get the worker.
constexpr int kReadsPerPoll = 16;

PyTypeObject* datagram_type = nullptr;

bool IsWouldBlock(PyObject* exc) {
  return PyErr_GivenExceptionMatches(exc, PyExc_BlockingIOError) ||
         PyErr_GivenExceptionMatches(exc, PyExc_InterruptedError);
}

class Endpoint final : public ConnectionUnit {
 public:
  Endpoint(PyObject* loop, PyObject* sock, int fd)
      : ConnectionUnit(ConnectionKind::kDatagram, loop, sock, fd) {}
  ~Endpoint() override {
    for (auto& [data, addr] : queue_) {
      DecRefAnyThread(data);
      DecRefAnyThread(addr);
    }
    DecRefAnyThread(address_);
  }

  // Sends one datagram through the socket: 0, EAGAIN (nothing sent), or -1
  // with the Python error set.
  int SendNow(PyObject* data, PyObject* addr);

  PyObject* address_ = nullptr;  // The connected peer, or nullptr.
  bool connected_ = false;       // Has a peer: send(), not sendto().

  // Under mu_: (bytes, addr) pairs sendto() could not send yet, owned.
  std::deque<std::pair<PyObject*, PyObject*>> queue_;
  std::size_t queued_bytes_ = 0;

 protected:
  bool BufferEmptyLocked() const override { return queue_.empty(); }
  std::size_t BufferSizeLocked() const override { return queued_bytes_; }
  void ClearBufferLocked(std::vector<PyObject*>& drop) override {
    for (auto& [data, addr] : queue_) {
      drop.push_back(data);
      drop.push_back(addr);
    }
    queue_.clear();
    queued_bytes_ = 0;
  }

  bool MakeConnection() override {
    Deliver("connection_made", transport_);
    return true;
  }
  void Serve() override {
    Flush();
    ReadSome();
  }

 private:
  void ReadSome();
  void Flush();
  void Deliver(const char* method, PyObject* arg1, PyObject* arg2 = nullptr);
};

int Endpoint::SendNow(PyObject* data, PyObject* addr) {
  PyObject* res = connected_ ? CallMethod(sock_, "send", data)
                             : PyObject_CallMethod(sock_, "sendto", "OO", data, addr);
  if (res != nullptr) {
    Py_DECREF(res);
    return 0;
  }
  if (PyErr_ExceptionMatches(PyExc_BlockingIOError) ||
      PyErr_ExceptionMatches(PyExc_InterruptedError)) {
    PyErr_Clear();
    return EAGAIN;
  }
  return -1;
}




// Calls protocol.method(arg1[, arg2]); a failure is reported as stdlib
// reports a failed callback.
void Endpoint::Deliver(const char* method, PyObject* arg1, PyObject* arg2) {
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return;
  PyObject* res = arg2 == nullptr ? CallMethod(protocol, method, arg1)
                                  : PyObject_CallMethod(protocol, method, "OO", arg1, arg2);
  if (res == nullptr) {
    LoopReportException(loop_, "Exception in callback ", protocol, nullptr, nullptr);
  }
  Py_XDECREF(res);
  Py_DECREF(protocol);
}



void Endpoint::Flush() {
  {
    PyMutexGuard lock(mu_);
    if (queue_.empty() || lost_pending_) return;
  }
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kWrite, this);
  if (!ready) return;
  for (;;) {
    std::pair<PyObject*, PyObject*> item;
    {
      PyMutexGuard lock(mu_);
      if (queue_.empty() || lost_pending_) break;
      item = queue_.front();
      queue_.pop_front();
      queued_bytes_ -= static_cast<std::size_t>(PyBytes_GET_SIZE(item.first)) + kHeaderSize;
    }
    const int rc = SendNow(item.first, item.second);
    if (rc == EAGAIN) {
      {
        PyMutexGuard lock(mu_);
        queue_.emplace_front(item);
        queued_bytes_ += static_cast<std::size_t>(PyBytes_GET_SIZE(item.first)) + kHeaderSize;
      }
      driver.ClearReadiness(io_, io::Direction::kWrite, *ready);
      if (driver.PollReady(io_, io::Direction::kWrite, this)) {
        Wake(rt_task::ScheduleKind::kYield);
      }
      return;
    }
    Py_DECREF(item.first);
    Py_XDECREF(item.second);
    if (rc < 0) {
      PyObject* exc = PyErr_GetRaisedException();
      if (PyErr_GivenExceptionMatches(exc, PyExc_OSError)) {
        Deliver("error_received", exc);
        Py_DECREF(exc);
        return;
      }
      Fatal(exc, "Fatal write error on datagram transport");
      return;
    }
  }
  PyMutexGuard lock(mu_);
  if (want_paused_ && queued_bytes_ <= low_water_) want_paused_ = false;
  if (queue_.empty() && closing_ && conn_lost_ == 0) {
    ++conn_lost_;
    lost_pending_ = true;
  }
}

void Endpoint::ReadSome() {
  {
    PyMutexGuard lock(mu_);
    if (closing_ || lost_pending_) return;
  }
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  for (int i = 0; i < kReadsPerPoll; ++i) {
    std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kRead, this);
    if (!ready) return;
    PyObject* size = PyLong_FromSsize_t(kMaxDatagram);
    PyObject* res = size != nullptr ? CallMethod(sock_, "recvfrom", size) : nullptr;
    Py_XDECREF(size);
    if (res == nullptr) {
      PyObject* exc = PyErr_GetRaisedException();
      if (IsWouldBlock(exc)) {
        Py_DECREF(exc);
        driver.ClearReadiness(io_, io::Direction::kRead, *ready);
        if (driver.PollReady(io_, io::Direction::kRead, this)) {
          Wake(rt_task::ScheduleKind::kYield);
        }
        return;
      }
      if (PyErr_GivenExceptionMatches(exc, PyExc_OSError)) {
        // ICMP errors (a refused port) and the like: the endpoint lives on.
        Deliver("error_received", exc);
        Py_DECREF(exc);
        continue;
      }
      if (IsExitException(exc)) {
        LoopRaiseInRunner(loop_, exc);
        return;
      }
      Fatal(exc, "Fatal read error on datagram transport");
      return;
    }
    if (PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2) {
      Deliver("datagram_received", PyTuple_GET_ITEM(res, 0), PyTuple_GET_ITEM(res, 1));
    }
    Py_DECREF(res);
    {
      PyMutexGuard lock(mu_);
      if (closing_ || lost_pending_) return;
    }
  }
  Wake(rt_task::ScheduleKind::kYield);  // More may wait; others go first.
}


// --- the Python type ---------------------------------------------------------------

Endpoint* EndpointOf(PyObject* self) { return static_cast<Endpoint*>(UnitOf(self)); }

PyObject* Datagram_sendto(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "sendto(data, addr=None)");
    return nullptr;
  }
  PyObject* data = args[0];
  PyObject* addr = nargs == 2 ? args[1] : Py_None;
  if (!PyBytes_Check(data) && !PyByteArray_Check(data) && !PyMemoryView_Check(data)) {
    PyErr_Format(PyExc_TypeError, "data argument must be a bytes-like object, not '%s'",
                 Py_TYPE(data)->tp_name);
    return nullptr;
  }
  Endpoint* e = EndpointOf(self);
  if (e->address_ != nullptr) {
    if (addr != Py_None) {
      const int same = PyObject_RichCompareBool(addr, e->address_, Py_EQ);
      if (same < 0) return nullptr;
      if (!same) {
        PyErr_Format(PyExc_ValueError, "Invalid address: must be None or %S", e->address_);
        return nullptr;
      }
    }
    addr = e->address_;
  }
  bool warn = false;
  bool lost = false;
  bool try_now = false;
  {
    PyMutexGuard lock(e->mu_);
    if (e->conn_lost_ > 0 && e->address_ != nullptr) {
      warn = e->conn_lost_ >= kLogConnLostWrites;
      ++e->conn_lost_;
      lost = true;
    } else {
      try_now = e->queue_.empty();
    }
  }
  if (warn) {
    PyObject* r = PyObject_CallMethod(logger, "warning", "s", "socket.send() raised exception.");
    Py_XDECREF(r);
    PyErr_Clear();
  }
  if (lost) Py_RETURN_NONE;
  if (try_now) {
    const int rc = e->SendNow(data, addr);
    if (rc == 0) Py_RETURN_NONE;
    if (rc < 0) {
      PyObject* exc = PyErr_GetRaisedException();
      if (PyErr_GivenExceptionMatches(exc, PyExc_OSError)) {
        PyObject* protocol = e->Protocol();
        if (protocol != nullptr) {
          PyObject* r = CallMethod(protocol, "error_received", exc);
          if (r == nullptr) {
            LoopReportException(e->loop_, "Exception in callback ", protocol, nullptr,
                                nullptr);
          }
          Py_XDECREF(r);
          Py_DECREF(protocol);
        }
        Py_DECREF(exc);
        Py_RETURN_NONE;
      }
      if (IsExitException(exc)) {
        PyErr_SetRaisedException(exc);
        return nullptr;
      }
      e->Fatal(exc, "Fatal write error on datagram transport", self);
      Py_RETURN_NONE;
    }
  }
  // Queued: an immutable copy, flushed by the unit when writable.
  PyObject* copy = PyBytes_FromObject(data);
  if (copy == nullptr) return nullptr;
  Py_XINCREF(addr);
  bool pause = false;
  {
    PyMutexGuard lock(e->mu_);
    e->queue_.emplace_back(copy, addr);
    e->queued_bytes_ += static_cast<std::size_t>(PyBytes_GET_SIZE(copy)) + kHeaderSize;
    if (!e->want_paused_ && e->queued_bytes_ > e->high_water_) {
      e->want_paused_ = true;
      pause = true;
    }
  }
  e->Wake();
  if (pause && e->OnMyStrand()) e->SyncPause();
  Py_RETURN_NONE;
}





PyObject* Datagram_set_protocol(PyObject* self, PyObject* protocol) {
  Endpoint* e = EndpointOf(self);
  PyObject* old;
  {
    PyMutexGuard lock(e->mu_);
    old = std::exchange(e->protocol_, Py_NewRef(protocol));
  }
  Py_XDECREF(old);
  Py_RETURN_NONE;
}





PyObject* Datagram_repr(PyObject* self) {
  Endpoint* e = EndpointOf(self);
  bool closing;
  std::size_t size;
  {
    PyMutexGuard lock(e->mu_);
    closing = e->closing_;
    size = e->queued_bytes_;
  }
  return PyUnicode_FromFormat("<%s%s fd=%d bufsize=%zu>", Py_TYPE(self)->tp_name,
                              closing ? " closing" : "", e->fd_, size);
}

PyMethodDef datagram_methods[] = {
    {"sendto",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Datagram_sendto)),
     METH_FASTCALL, "Send a datagram to addr (the peer if connected); any thread."},
    {"set_protocol", Datagram_set_protocol, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr},
};


PyObject* Datagram_new_refused(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "DatagramTransport objects are made by create_datagram_endpoint()");
  return nullptr;
}

PyType_Slot datagram_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Unit_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Unit_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Unit_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Datagram_repr)},
    {Py_tp_methods, nullptr},  // WithUnitMethods(datagram_methods), at registration.
    {Py_tp_members, unit_members},
    {Py_tp_getset, unit_getset},
    {Py_tp_new, reinterpret_cast<void*>(Datagram_new_refused)},
    {0, nullptr},
};

PyType_Spec datagram_spec = {
    "mt_asyncio._core.DatagramTransport",
    sizeof(UnitObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_MANAGED_DICT,
    datagram_slots,
};

// _make_datagram_transport(loop, sock, protocol, address, waiter)
PyObject* MakeDatagramTransport(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5 || !IsLoop(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "_make_datagram_transport(loop, sock, protocol, address, waiter)");
    return nullptr;
  }
  PyObject* loop = args[0];
  PyObject* sock = args[1];
  const int fd = SocketFd(sock);
  if (fd < 0) return nullptr;
  PyObject* extra = MakeExtra(sock, nullptr);
  if (extra == nullptr) return nullptr;
  auto* d = PyObject_GC_New(UnitObject, datagram_type);
  if (d == nullptr) {
    Py_DECREF(extra);
    return nullptr;
  }
  d->base_extra = nullptr;
  d->weakreflist = nullptr;
  auto* e = new Endpoint(loop, sock, fd);
  d->unit = e;
  PyObject* self = reinterpret_cast<PyObject*>(d);
  PyObject_GC_Track(d);
  e->extra_ = extra;
  e->protocol_ = Py_NewRef(args[2]);
  if (args[3] != Py_None) e->address_ = Py_NewRef(args[3]);
  if (args[4] != Py_None) e->waiter_ = Py_NewRef(args[4]);
  PyObject* peer;
  if (PyDict_GetItemStringRef(extra, "peername", &peer) < 0) {
    Py_DECREF(self);
    return nullptr;
  }
  e->connected_ = peer != nullptr && peer != Py_None;
  Py_XDECREF(peer);
  e->io_ = FdTableRegisterTransport(loop, fd, self, e);
  if (e->io_ == nullptr) {
    e->lost_.store(true);
    Py_DECREF(self);
    return nullptr;
  }
  e->transport_ = Py_NewRef(self);
  // Like a client connection: a strand of its own under the caller's.
  Strand* strand = NewConnectionStrand(loop);
  e->set_executor(strand);
  e->strand_ = strand;
  strand->Unref();  // The unit holds it.
  e->Ref();
  LoopWake(loop, e);
  e->Unref();
  return self;
}

PyMethodDef module_methods[] = {
    {"_make_datagram_transport",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(MakeDatagramTransport)),
     METH_FASTCALL, "A transport for a datagram socket."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterDatagramType(PyObject* module) {
  if (transport::Init() < 0) return -1;
  for (PyType_Slot& slot : datagram_slots) {
    if (slot.slot == Py_tp_methods) slot.pfunc = WithUnitMethods(datagram_methods);
  }
  datagram_type = MakeUnitType(module, &datagram_spec, {"Transport", "DatagramTransport"});
  if (datagram_type == nullptr ||
      PyModule_AddObjectRef(module, "DatagramTransport",
                            reinterpret_cast<PyObject*>(datagram_type)) < 0) {
    return -1;
  }
  return PyModule_AddFunctions(module, module_methods);
}

}  // namespace mt::pyext
