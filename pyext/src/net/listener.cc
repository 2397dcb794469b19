// mt_asyncio._core._Listener: the accept loop behind a server's listening
// socket. One Acceptor unit per socket polls the reactor, accepts up to a
// poll's worth of connections and starts each as a SocketTransport on a
// strand of its own (StartAcceptedTransport, transport.h); running out of
// descriptors backs off for a second, as stdlib's accept handler does.

#include "pyext/src/net/listener.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <utility>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/strands.h"
#include "pyext/src/net/transport.h"
#include "pyext/src/net/transport_util.h"
#include "runtime/io/driver.h"
#include "runtime/scheduler/strand.h"
#include "runtime/time/entry.h"

namespace mt::pyext {
namespace {

namespace io = runtime::io;
namespace rt_task = runtime::task;
using runtime::scheduler::Strand;
using namespace transport;  // NOLINT: the net package's own helpers.

// Connections a listener accepts per readiness before yielding its worker.
constexpr int kMaxAcceptsPerPoll = 128;

PyTypeObject* listener_type = nullptr;

struct ListenerObject;

class Acceptor final : public rt_task::Task {
 public:
  Acceptor(PyObject* loop, PyObject* sock, PyObject* factory, PyObject* server, int fd,
           int family, int type, int proto, int backlog)
      : Task(/*scheduled=*/false),
        loop_(Py_NewRef(loop)),
        sock_(Py_NewRef(sock)),
        factory_(Py_NewRef(factory)),
        server_(Py_NewRef(server)),
        fd_(fd),
        family_(family),
        type_(type),
        proto_(proto),
        backlog_(std::clamp(backlog, 1, kMaxAcceptsPerPoll)),
        context_(PyContext_CopyCurrent()) {
    if (context_ == nullptr) PyErr_Clear();
    ClaimForLoop(loop, this);
  }
  ~Acceptor() override {
    if (owner_ != nullptr) owner_->Unref();
    DecRefAnyThread(context_);
    DecRefAnyThread(loop_);
    DecRefAnyThread(sock_);
    DecRefAnyThread(factory_);
    DecRefAnyThread(server_);
    DecRefAnyThread(tls_);
  }
  bool Poll() override;

  // A TLS spec for connections on the native TLS engine, or nullptr.
  PyObject* tls_ = nullptr;

  PyObject* const loop_;
  PyObject* const sock_;
  PyObject* const factory_;
  PyObject* const server_;
  const int fd_;
  const int family_, type_, proto_;
  const int backlog_;
  // The context current when serving started: each connection's callbacks
  // run in a copy of it, as stdlib's accept handler (an add_reader made
  // then) passes its copy on to the connection's handles and tasks.
  PyObject* const context_;
  io::ScheduledIo* io_ = nullptr;
  // The strand of the task that started serving (one reference, or
  // nullptr): accepted connections are its children.
  Strand* owner_ = nullptr;
  std::atomic<bool> closed_{false};
  // Held from accept() until the connection is attached to its server,
  // and by close: once close has it, every connection accepted so far is
  // attached (so server.close() and wait_closed() count it) and no more
  // are accepted. A PyMutex: a thread that waits for it detaches from the
  // interpreter, so a stop-the-world pause cannot deadlock on it.
  PyMutex accept_mu_{};
  // Wakes the acceptor a second after accept() ran out of descriptors.
  runtime::time::TimerEntry retry_;
  std::chrono::steady_clock::time_point retry_at_{};  // Only the unit.

  // accept4() once; the connection it returns is attached and started.
  // Returns 0, or accept4()'s errno. Under accept_mu_.
  int AcceptOne();

 private:
  void StartConnection(int fd);
};

int Acceptor::AcceptOne() {
  const int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return errno;
  StartConnection(fd);
  return 0;
}

void Acceptor::StartConnection(int fd) {
  PyObject* sock = PyObject_CallFunction(socket_type, "iiii", family_, type_ | SOCK_NONBLOCK,
                                         proto_, fd);
  if (sock == nullptr) {
    close(fd);
    ReportToLoop(loop_, "Error on transport creation for incoming connection",
                 PyErr_GetRaisedException(), {});
    return;
  }
  SetNoDelay(fd);
  if (StartAcceptedTransport(loop_, sock, factory_, server_, context_, owner_, tls_) < 0) {
    PyObject* exc = PyErr_GetRaisedException();
    PyObject* r = CallMethod(sock, "close");
    Py_XDECREF(r);
    Py_DECREF(sock);
    ReportToLoop(loop_, "Error on transport creation for incoming connection", exc, {});
    return;
  }
  Py_DECREF(sock);  // The transport holds it.
}

bool Acceptor::Poll() {
  if (closed_.load(std::memory_order_acquire)) return true;
  if (LoopDeferIfStopped(loop_, this)) return false;
  // Backing off after running out of descriptors: the retry timer wakes us.
  if (std::chrono::steady_clock::now() < retry_at_) return false;
  if (LoopEnterOnWorker(loop_) < 0) PyErr_WriteUnraisable(loop_);
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kRead, this);
  if (!ready) return false;
  for (int i = 0; i < backlog_; ++i) {
    int err;
    {
      PyMutexGuard lock(accept_mu_);
      if (closed_.load(std::memory_order_acquire)) return true;
      err = AcceptOne();
    }
    if (err == 0) continue;
    if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      driver.ClearReadiness(io_, io::Direction::kRead, *ready);
      if (driver.PollReady(io_, io::Direction::kRead, this)) Wake(rt_task::ScheduleKind::kYield);
      return false;
    }
    PyObject* exc = OsErrorFromErrno(err);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    PyObject* ts = PyObject_CallOneArg(transport_socket_type, sock_);
    if (ts == nullptr) PyErr_Clear();
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      // Out of descriptors or memory: report, and try again in a second
      // (stdlib's ACCEPT_RETRY_DELAY) rather than spin.
      ReportToLoop(loop_, "socket.accept() out of system resource", exc, {{"socket", ts}});
      Py_XDECREF(ts);
      retry_at_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      LoopRuntime(loop_).driver().timers().Arm(&retry_, retry_at_, this);
      return false;
    }
    ReportToLoop(loop_, "Error on accepting a connection", exc, {{"socket", ts}});
    Py_XDECREF(ts);
    return false;
  }
  Wake(rt_task::ScheduleKind::kYield);  // More may wait; others go first.
  return false;
}

struct ListenerObject {
  PyObject_HEAD
  Acceptor* acceptor;  // One reference; nullptr once closed.
};

int Listener_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  return 0;
}

// `accept_pending`: if the reactor has told the acceptor that connections
// wait and it has not taken them yet, take them first (up to a poll's
// worth). A one-thread loop runs its accept callback in the iteration that
// learns of the connection, before the steps that follow (the peer's own,
// when it is a client on the same loop, which may have connected, written
// and closed by now): here the acceptor may still wait for a busy worker,
// and closing the socket under those connections would reset them. What
// the loop has not been told of yet is left to the close, as on stdlib's.
void CloseAcceptor(ListenerObject* l, bool accept_pending = false) {
  Acceptor* a = std::exchange(l->acceptor, nullptr);
  if (a == nullptr) return;
  {
    PyMutexGuard lock(a->accept_mu_);  // Lets an accept in progress attach first.
    accept_pending = accept_pending && a->io_ != nullptr &&
                     (a->io_->readiness() & io::kReadable) != 0;
    for (int i = 0; accept_pending && i < a->backlog_; ++i) {
      const int err = a->AcceptOne();
      if (err != 0 && err != EINTR && err != ECONNABORTED && err != EPROTO) {
        break;  // Nothing more waits (EAGAIN), or accept() fails: close as is.
      }
    }
    a->closed_.store(true, std::memory_order_release);
  }
  if (a->io_ != nullptr) FdTableUnregisterTransport(a->loop_, a->fd_);
  LoopRuntime(a->loop_).driver().timers().Cancel(&a->retry_);
  a->Cancel();
  a->Unref();
}

void Listener_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  CloseAcceptor(reinterpret_cast<ListenerObject*>(self));
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// _Listener(loop, sock, protocol_factory, server, backlog, tls=None):
// accepts on `sock` (listening, non-blocking) until close(); each
// connection gets protocol_factory() and a transport, and
// server._attach/_detach; with `tls` (a TLS spec tuple), its handshake on
// the native TLS engine first.
PyObject* Listener_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  PyObject *loop, *sock, *factory, *server, *tls = Py_None;
  int backlog;
  if (!PyArg_ParseTuple(args, "OOOOi|O:_Listener", &loop, &sock, &factory, &server, &backlog,
                        &tls)) {
    return nullptr;
  }
  if (!IsLoop(loop)) {
    PyErr_SetString(PyExc_TypeError, "_Listener needs an mt_asyncio loop");
    return nullptr;
  }
  int values[4];
  const char* names[] = {"fileno", "family", "type", "proto"};
  for (int i = 0; i < 4; ++i) {
    PyObject* v = i == 0 ? CallMethod(sock, names[i]) : PyObject_GetAttrString(sock, names[i]);
    if (v == nullptr) return nullptr;
    values[i] = PyLong_AsInt(v);
    Py_DECREF(v);
    if (values[i] == -1 && PyErr_Occurred()) return nullptr;
  }
  auto* self = reinterpret_cast<ListenerObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  auto* a = new Acceptor(loop, sock, factory, server, values[0], values[1], values[2],
                         values[3], backlog);
  if (tls != Py_None) a->tls_ = Py_NewRef(tls);
  a->io_ = FdTableRegisterTransport(loop, values[0], server, a);
  if (a->io_ == nullptr) {
    a->Unref();
    Py_DECREF(self);
    return nullptr;
  }
  a->owner_ = OwnerStrand(loop);
  a->set_executor(LoopRuntime(loop).executor());
  self->acceptor = a;
  a->Ref();
  LoopWake(loop, a);
  a->Unref();
  return reinterpret_cast<PyObject*>(self);
}

// close(accept_pending=False): stop accepting; see CloseAcceptor.
PyObject* Listener_close(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "close(accept_pending=False)");
    return nullptr;
  }
  const int accept_pending = nargs == 1 ? PyObject_IsTrue(args[0]) : 0;
  if (accept_pending < 0) return nullptr;
  CloseAcceptor(reinterpret_cast<ListenerObject*>(self), accept_pending > 0);
  Py_RETURN_NONE;
}

// After a pause for resources: look at the socket again.
PyObject* Listener_resume(PyObject* self, PyObject*) {
  Acceptor* a = reinterpret_cast<ListenerObject*>(self)->acceptor;
  if (a != nullptr) a->Wake();
  Py_RETURN_NONE;
}

PyMethodDef listener_methods[] = {
    {"close", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Listener_close)),
     METH_FASTCALL,
     "Stop accepting (the socket stays open); accept_pending: first take the "
     "connections already established."},
    {"resume", Listener_resume, METH_NOARGS, "Look for connections again."},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot listener_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Listener_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Listener_traverse)},
    {Py_tp_new, reinterpret_cast<void*>(Listener_new)},
    {Py_tp_methods, listener_methods},
    {0, nullptr},
};

PyType_Spec listener_spec = {
    "mt_asyncio._core._Listener",
    sizeof(ListenerObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    listener_slots,
};

}  // namespace

int RegisterListenerType(PyObject* module) {
  if (Init() < 0) return -1;
  listener_type = reinterpret_cast<PyTypeObject*>(
      PyType_FromModuleAndSpec(module, &listener_spec, nullptr));
  if (listener_type == nullptr) return -1;
  return PyModule_AddObjectRef(module, "_Listener",
                               reinterpret_cast<PyObject*>(listener_type));
}

}  // namespace mt::pyext
