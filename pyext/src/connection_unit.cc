#include "pyext/src/connection_unit.h"

#include <utility>

#include "pyext/src/py_ref.h"
#include "pyext/src/transport_util.h"

namespace mt::pyext::transport {

using runtime::scheduler::Strand;

ConnectionUnit::ConnectionUnit(PyObject* loop, PyObject* sock, int fd)
    : Task(/*scheduled=*/false), loop_(Py_NewRef(loop)), sock_(Py_NewRef(sock)), fd_(fd) {}

ConnectionUnit::~ConnectionUnit() {
  DecRefAnyThread(loop_);
  DecRefAnyThread(sock_);
  DecRefAnyThread(extra_);
  DecRefAnyThread(protocol_);
  DecRefAnyThread(waiter_);
  DecRefAnyThread(lost_exc_);
}

void ConnectionUnit::Close() {
  {
    Locked lock(mu_);
    if (closing_) return;
    closing_ = true;
    if (!BufferEmptyLocked()) return;  // connection_lost once it is flushed.
    ++conn_lost_;
    lost_pending_ = true;
  }
  Wake();
}

void ConnectionUnit::ForceClose(PyObject* exc) {
  std::vector<PyObject*> drop;
  {
    Locked lock(mu_);
    if (conn_lost_ == 0) {
      ClearBufferLocked(drop);
      closing_ = true;
      ++conn_lost_;
      lost_pending_ = true;
      lost_exc_ = std::exchange(exc, nullptr);
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

void ConnectionUnit::SyncPause() {
  bool want;
  {
    Locked lock(mu_);
    want = want_paused_;
  }
  if (want == paused_delivered_ || lost_.load(std::memory_order_relaxed)) return;
  paused_delivered_ = want;
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return;
  PyObject* res = CallMethod(protocol, want ? "pause_writing" : "resume_writing");
  if (res == nullptr) {
    PyObject* exc = PyErr_GetRaisedException();
    if (IsFatalPyError(exc)) {
      PyErr_SetRaisedException(exc);
      PyErr_WriteUnraisable(protocol);
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
    Locked lock(mu_);
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
  Locked lock(mu_);
  return Py_XNewRef(protocol_);
}

PyObject* ConnectionUnit::GetProtocol() {
  PyObject* p = Protocol();
  return p != nullptr ? p : Py_NewRef(Py_None);
}

PyObject* ConnectionUnit::IsClosing() {
  Locked lock(mu_);
  return PyBool_FromLong(closing_);
}

PyObject* ConnectionUnit::GetWriteBufferSize() {
  std::size_t size;
  {
    Locked lock(mu_);
    size = BufferSizeLocked();
  }
  return PyLong_FromSize_t(size);
}

PyObject* ConnectionUnit::GetWriteBufferLimits() {
  std::size_t low, high;
  {
    Locked lock(mu_);
    low = low_water_;
    high = high_water_;
  }
  return Py_BuildValue("(nn)", static_cast<Py_ssize_t>(low), static_cast<Py_ssize_t>(high));
}

bool ConnectionUnit::LostPending() {
  Locked lock(mu_);
  return lost_pending_;
}

}  // namespace mt::pyext::transport
