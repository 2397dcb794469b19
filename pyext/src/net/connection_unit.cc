#include "pyext/src/net/connection_unit.h"

#include <sys/socket.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/net/transport_util.h"

namespace mt::pyext::transport {

using runtime::scheduler::Strand;

namespace {

// The rest of a scope runs inside `ctx`, when it can be entered (it
// cannot while another thread is in it; then the thread's own is used).
class EnteredContext {
 public:
  explicit EnteredContext(PyObject* ctx) {
    if (ctx == nullptr) return;
    if (PyContext_Enter(ctx) == 0) {
      ctx_ = ctx;
    } else {
      PyErr_Clear();
    }
  }
  ~EnteredContext() {
    if (ctx_ == nullptr) return;
    PyObject* pending = PyErr_GetRaisedException();
    if (PyContext_Exit(ctx_) < 0) PyErr_WriteUnraisable(ctx_);
    PyErr_SetRaisedException(pending);
  }
  EnteredContext(const EnteredContext&) = delete;
  EnteredContext& operator=(const EnteredContext&) = delete;

 private:
  PyObject* ctx_ = nullptr;
};

}  // namespace

namespace {

// Counted from the unit's making until it is lost (its socket closed): a
// relaxed add each way, once per connection.
std::atomic<std::int64_t> open_connections[2];

}  // namespace

std::int64_t OpenConnections(ConnectionKind kind) {
  return open_connections[static_cast<int>(kind)].load(std::memory_order_relaxed);
}

ConnectionUnit::ConnectionUnit(ConnectionKind kind, PyObject* loop, PyObject* sock, int fd,
                               PyObject* base_context)
    : Task(/*scheduled=*/false),
      kind_(kind),
      loop_(Py_NewRef(loop)),
      sock_(Py_NewRef(sock)),
      fd_(fd),
      context_(base_context != nullptr ? PyContext_Copy(base_context)
                                       : PyContext_CopyCurrent()) {
  if (context_ == nullptr) PyErr_Clear();  // Then the worker's own.
  ClaimForLoop(loop, this);
  open_connections[static_cast<int>(kind_)].fetch_add(1, std::memory_order_relaxed);
}

ConnectionUnit::~ConnectionUnit() {
  // Open until lost (DeliverLost counts it out), or until here for one
  // that never got that far.
  if (!lost_.load(std::memory_order_relaxed)) {
    open_connections[static_cast<int>(kind_)].fetch_sub(1, std::memory_order_relaxed);
  }
  DecRefAnyThread(context_);
  DecRefAnyThread(loop_);
  DecRefAnyThread(sock_);
  DecRefAnyThread(extra_);
  DecRefAnyThread(protocol_);
  DecRefAnyThread(waiter_);
  DecRefAnyThread(lost_exc_);
  DecRefAnyThread(lost_context_);
  DecRefAnyThread(released_);
}

bool ConnectionUnit::Poll() {
  if (LoopDeferIfStopped(loop_, this)) return false;
  if (LoopEnterOnWorker(loop_) < 0) PyErr_WriteUnraisable(loop_);
  EnteredContext entered(context_);
  if (!made_) {
    if (!MakeConnection()) {
      ForceClose(nullptr);
      DeliverLost();
      return true;
    }
    made_ = true;
    ResolveWaiter(&waiter_);
    // No data_received in the step that called connection_made: what it
    // started (a server's handler task, on this strand) takes its first
    // step before the first bytes arrive, as on stdlib's loop, where the
    // reader is registered a turn after connection_made.
    Wake(runtime::task::ScheduleKind::kYield);
    return false;
  }
  SyncPause();
  Serve();
  SyncPause();
  FinishCloseIfDrained();
  if (LostPending()) {
    DeliverLost();
    return true;
  }
  return false;
}

void ConnectionUnit::OnCancel() {
  if (lost_.load(std::memory_order_relaxed)) return;
  DropOnAnyThread(loop_, [this](PyObject*) {
    EnteredContext entered(context_);
    ForceClose(nullptr);
    DeliverLost();
  });
}

void ConnectionUnit::DeliverLost() {
  if (lost_.exchange(true)) return;
  open_connections[static_cast<int>(kind_)].fetch_sub(1, std::memory_order_relaxed);
  PyObject* exc;
  PyObject* protocol;
  PyObject* lost_context;
  std::vector<PyObject*> drop;
  {
    PyMutexGuard lock(mu_);
    exc = std::exchange(lost_exc_, nullptr);
    protocol = std::exchange(protocol_, nullptr);
    lost_context = std::exchange(lost_context_, nullptr);
    ClearBufferLocked(drop);
  }
  for (PyObject* o : drop) Py_XDECREF(o);
  if (io_ != nullptr) FdTableUnregisterTransport(loop_, fd_);
  // Closed before connection_lost (stdlib closes it just after): whoever
  // connection_lost wakes on another worker finds the descriptor gone
  // already, as a one-thread loop's caller would.
  PyObject* res = CallMethod(sock_, "close");
  if (res == nullptr) PyErr_WriteUnraisable(sock_);
  Py_XDECREF(res);
  PyObject* released;
  {
    PyMutexGuard lock(mu_);
    socket_released_ = true;
    released = std::exchange(released_, nullptr);
  }
  ResolveWaiter(&released);  // Consumes it; nothing when nobody asked.
  BeforeLost(exc);
  if (ProtocolMade() && protocol != nullptr) {
    // Lost by the connection itself (EOF, an error): the connection's own
    // context, which this poll entered.
    EnteredContext entered(lost_context);
    res = CallMethod(protocol, "connection_lost", exc != nullptr ? exc : Py_None);
    if (res == nullptr) {
      LoopReportException(loop_, "Exception in callback ", protocol, nullptr, nullptr);
    }
    Py_XDECREF(res);
  }
  if (waiter_ != nullptr) {
    // Never made: the waiter of create_connection learns why.
    PyObject* r = PyObject_CallMethod(waiter_, "cancel", nullptr);
    Py_XDECREF(r);
    PyErr_Clear();
    Py_CLEAR(waiter_);
  }
  AfterLost();
  Py_XDECREF(lost_context);
  Py_XDECREF(exc);
  Py_XDECREF(protocol);
  Py_CLEAR(transport_);  // The connection's hold on its Python object.
}

void ConnectionUnit::Close() {
  {
    PyMutexGuard lock(mu_);
    if (closing_) return;
    closing_ = true;
    if (!BufferEmptyLocked()) return;  // connection_lost once it is flushed.
    ++conn_lost_;
    lost_pending_ = true;
    SendFinLocked();
  }
  Wake();
}

// The socket itself is closed on the strand (DeliverLost), which may run
// after the caller's next step at several workers: a caller that then
// blocks its worker waiting for the peer to see the close (a thread
// serving the other end, joined) would wait for ever, where stdlib's loop
// has closed the socket before the caller's next step. Nothing more will be
// written, so the end of the stream goes to the peer now. Under mu_, while
// no close was requested before (conn_lost_ was 0): the socket is still
// open. Errors (not a connected socket: a datagram endpoint, a pipe) are of
// no consequence.
void ConnectionUnit::SendFinLocked() { (void)::shutdown(fd_, SHUT_WR); }

void ConnectionUnit::RememberLostContext() {
  {
    PyMutexGuard lock(mu_);
    if (closing_ || lost_context_ != nullptr) return;
  }
  PyObject* ctx = PyContext_CopyCurrent();
  if (ctx == nullptr) {
    PyErr_Clear();
    return;
  }
  {
    PyMutexGuard lock(mu_);
    if (!closing_ && lost_context_ == nullptr) ctx = std::exchange(lost_context_, ctx);
  }
  Py_XDECREF(ctx);  // A racing close() got there first (or nullptr).
}

PyObject* ConnectionUnit::Released() {
  PyObject* fut = CallMethod(loop_, "create_future");
  if (fut == nullptr) return nullptr;
  PyObject* unused = nullptr;
  bool done;
  {
    PyMutexGuard lock(mu_);
    done = socket_released_;
    if (!done && released_ != nullptr) {
      unused = std::exchange(fut, Py_NewRef(released_));  // One for every caller.
    } else if (!done) {
      released_ = Py_NewRef(fut);
    }
  }
  Py_XDECREF(unused);
  if (done) {
    PyObject* resolve = Py_NewRef(fut);
    ResolveWaiter(&resolve);
  }
  return fut;
}

void ConnectionUnit::ForceClose(PyObject* exc) {
  std::vector<PyObject*> drop;
  {
    PyMutexGuard lock(mu_);
    if (conn_lost_ == 0) {
      ClearBufferLocked(drop);
      closing_ = true;
      ++conn_lost_;
      lost_pending_ = true;
      lost_exc_ = std::exchange(exc, nullptr);
      SendFinLocked();
    }
  }
  for (PyObject* o : drop) Py_XDECREF(o);
  Py_XDECREF(exc);
  Wake();
}

void ConnectionUnit::Fatal(PyObject* exc, const char* message, PyObject* self) {
  if (self == nullptr) self = transport_;  // On the strand: ours to read.
  if (PyErr_GivenExceptionMatches(exc, PyExc_OSError)) {
    // Resets and broken pipes are a peer's business; stdlib only logs them
    // in debug mode.
    if (GetDebug(loop_) && self != nullptr) {
      PyObject* res = PyObject_CallMethod(logger, "debug", "sOs", "%r: %s", self, message);
      Py_XDECREF(res);
      PyErr_Clear();
    }
  } else {
    PyObject* protocol = Protocol();
    ReportToLoop(loop_, message, Py_NewRef(exc),
                 {{"transport", self}, {"protocol", protocol}});
    Py_XDECREF(protocol);
  }
  ForceClose(exc);
}

void ConnectionUnit::FinishCloseIfDrained() {
  PyMutexGuard lock(mu_);
  if (closing_ && conn_lost_ == 0 && BufferEmptyLocked() && !awaiting_peer_close_) {
    ++conn_lost_;
    lost_pending_ = true;
  }
}

void ConnectionUnit::SyncPause() {
  bool want;
  {
    PyMutexGuard lock(mu_);
    want = want_paused_;
  }
  if (want == paused_delivered_ || lost_.load(std::memory_order_relaxed)) return;
  paused_delivered_ = want;
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return;
  PyObject* res = CallMethod(protocol, want ? "pause_writing" : "resume_writing");
  if (res == nullptr) {
    PyObject* exc = PyErr_GetRaisedException();
    if (IsExitException(exc)) {
      LoopRaiseInRunner(loop_, exc);
    } else {
      ReportToLoop(loop_,
                   want ? "protocol.pause_writing() failed" : "protocol.resume_writing() failed",
                   exc, {{"transport", transport_}, {"protocol", protocol}});
    }
  }
  Py_XDECREF(res);
  Py_DECREF(protocol);
}

void ConnectionUnit::SetWriteLimits(std::size_t high, std::size_t low) {
  bool pause = false;
  {
    PyMutexGuard lock(mu_);
    high_water_ = high;
    low_water_ = low;
    if (!want_paused_ && BufferSizeLocked() > high_water_) {
      want_paused_ = true;
      pause = true;
    }
  }
  if (!pause) return;
  if (OnMyStrand()) {
    SyncPause();
  } else {
    Wake();  // The unit delivers it, in order with its callbacks.
  }
}

bool ConnectionUnit::OnMyStrand() const {
  Strand* current = Strand::Current();
  return current != nullptr && strand_ != nullptr && current->Excludes(strand_);
}

PyObject* ConnectionUnit::Protocol() {
  PyMutexGuard lock(mu_);
  return Py_XNewRef(protocol_);
}

PyObject* ConnectionUnit::GetProtocol() {
  PyObject* p = Protocol();
  return p != nullptr ? p : Py_NewRef(Py_None);
}

PyObject* ConnectionUnit::IsClosing() {
  PyMutexGuard lock(mu_);
  return PyBool_FromLong(closing_);
}

PyObject* ConnectionUnit::GetWriteBufferSize() {
  std::size_t size;
  {
    PyMutexGuard lock(mu_);
    size = BufferSizeLocked();
  }
  return PyLong_FromSize_t(size);
}

PyObject* ConnectionUnit::GetWriteBufferLimits() {
  std::size_t low, high;
  {
    PyMutexGuard lock(mu_);
    low = low_water_;
    high = high_water_;
  }
  return Py_BuildValue("(nn)", static_cast<Py_ssize_t>(low), static_cast<Py_ssize_t>(high));
}

int Unit_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(reinterpret_cast<UnitObject*>(self)->base_extra);
  if (ConnectionUnit* u = UnitOf(self)) Py_VISIT(u->extra_);
  return PyObject_VisitManagedDict(self, visit, arg);
}

int Unit_clear(PyObject* self) {
  PyObject_ClearManagedDict(self);
  return 0;
}

void Unit_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  auto* o = reinterpret_cast<UnitObject*>(self);
  if (o->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  PyObject_ClearManagedDict(self);
  Py_CLEAR(o->base_extra);
  if (o->unit != nullptr) std::exchange(o->unit, nullptr)->Unref();
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

namespace {

PyObject* Unit_close(PyObject* self, PyObject*) {
  UnitOf(self)->RememberLostContext();
  UnitOf(self)->Close();
  Py_RETURN_NONE;
}

PyObject* Unit_abort(PyObject* self, PyObject*) {
  UnitOf(self)->RememberLostContext();
  UnitOf(self)->ForceClose(nullptr);
  Py_RETURN_NONE;
}

// stdlib transports' private _force_close(exc), which sslproto calls on
// its transport after a fatal TLS error.
PyObject* Unit_force_close(PyObject* self, PyObject* exc) {
  UnitOf(self)->RememberLostContext();
  UnitOf(self)->ForceClose(exc == Py_None ? nullptr : Py_NewRef(exc));
  Py_RETURN_NONE;
}

PyObject* Unit_is_closing(PyObject* self, PyObject*) { return UnitOf(self)->IsClosing(); }

PyObject* Unit_get_extra_info(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return GetExtraInfo(UnitOf(self)->extra_, args, nargs);
}

PyObject* Unit_get_protocol(PyObject* self, PyObject*) { return UnitOf(self)->GetProtocol(); }

PyObject* Unit_released(PyObject* self, PyObject*) { return UnitOf(self)->Released(); }

PyObject* Unit_get_write_buffer_size(PyObject* self, PyObject*) {
  return UnitOf(self)->GetWriteBufferSize();
}

PyObject* Unit_get_write_buffer_limits(PyObject* self, PyObject*) {
  return UnitOf(self)->GetWriteBufferLimits();
}

PyObject* Unit_set_write_buffer_limits(PyObject* self, PyObject* args, PyObject* kwds) {
  std::size_t high, low;
  if (ParseWriteBufferLimits(args, kwds, ConnectionUnit::kDefaultHighWater, &high, &low) <
      0) {
    return nullptr;
  }
  UnitOf(self)->SetWriteLimits(high, low);
  Py_RETURN_NONE;
}

}  // namespace

namespace {
const PyMethodDef unit_methods[] = {
    {"close", Unit_close, METH_NOARGS,
     "Close after flushing; connection_lost(None) follows. Any thread."},
    {"abort", Unit_abort, METH_NOARGS, "Close at once, dropping the buffer. Any thread."},
    {"_force_close", Unit_force_close, METH_O,
     "Close at once; connection_lost(exc) follows."},
    {"is_closing", Unit_is_closing, METH_NOARGS, nullptr},
    {"get_extra_info",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Unit_get_extra_info)),
     METH_FASTCALL, nullptr},
    {"get_protocol", Unit_get_protocol, METH_NOARGS, nullptr},
    {"_released", Unit_released, METH_NOARGS,
     "A future done once the socket is off the reactor and closed."},
    {"get_write_buffer_size", Unit_get_write_buffer_size, METH_NOARGS, nullptr},
    {"get_write_buffer_limits", Unit_get_write_buffer_limits, METH_NOARGS, nullptr},
    {"set_write_buffer_limits",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(Unit_set_write_buffer_limits)),
     METH_VARARGS | METH_KEYWORDS, nullptr},
};
}  // namespace

PyTypeObject* MakeUnitType(PyObject* module, PyType_Spec* spec,
                           std::initializer_list<const char*> base_names) {
  PyObject* transports = PyImport_ImportModule("asyncio.transports");
  if (transports == nullptr) return nullptr;
  PyObject* bases = PyTuple_New(static_cast<Py_ssize_t>(base_names.size()));
  if (bases == nullptr) {
    Py_DECREF(transports);
    return nullptr;
  }
  bool fit = true;
  Py_ssize_t i = 0;
  for (const char* name : base_names) {
    PyObject* base = PyObject_GetAttrString(transports, name);
    if (base == nullptr) {
      Py_DECREF(bases);
      Py_DECREF(transports);
      return nullptr;
    }
    // Each must be a plain class whose instances are BaseTransport's:
    // __slots__ = ('_extra',) over object, no dict, no weak references,
    // nothing variable-sized.
    auto* type = reinterpret_cast<PyTypeObject*>(base);
    fit = fit && PyType_Check(base) &&
          type->tp_basicsize == offsetof(UnitObject, unit) && type->tp_itemsize == 0 &&
          type->tp_dictoffset == 0 && type->tp_weaklistoffset == 0 &&
          (type->tp_flags & (Py_TPFLAGS_MANAGED_DICT | Py_TPFLAGS_MANAGED_WEAKREF)) == 0;
    PyTuple_SET_ITEM(bases, i++, base);
  }
  Py_DECREF(transports);
  PyObject* type = PyType_FromModuleAndSpec(module, spec, fit ? bases : nullptr);
  Py_DECREF(bases);
  return reinterpret_cast<PyTypeObject*>(type);
}

PyMethodDef* WithUnitMethods(const PyMethodDef* own) {
  auto* all = new std::vector<PyMethodDef>();  // Never freed: see header.
  for (; own->ml_name != nullptr; ++own) all->push_back(*own);
  for (const PyMethodDef& m : unit_methods) all->push_back(m);
  all->push_back({nullptr, nullptr, 0, nullptr});
  return all->data();
}

PyGetSetDef unit_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef unit_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(UnitObject, weakreflist), Py_READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

bool ConnectionUnit::LostPending() {
  PyMutexGuard lock(mu_);
  return lost_pending_;
}

}  // namespace mt::pyext::transport
