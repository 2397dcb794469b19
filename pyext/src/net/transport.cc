#include "pyext/src/net/transport.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/fd_watch.h"
#include "pyext/src/loop/loop.h"
#include "pyext/src/loop/strands.h"
#include "pyext/src/loop/task.h"
#include "pyext/src/net/connection_unit.h"
#include "pyext/src/net/tls_context.h"
#include "pyext/src/net/tls_engine.h"
#include "pyext/src/net/tls_session.h"
#include "pyext/src/net/transport_util.h"
#include "runtime/io/driver.h"
#include "runtime/scheduler/strand.h"
#include "runtime/time/entry.h"

namespace mt::pyext {
namespace {

namespace io = runtime::io;
namespace rt_task = runtime::task;
using runtime::scheduler::Strand;
using tls::TlsSession;
using tls::TlsState;

// stdlib's read size (selector_events max_size) and default write limits.
constexpr std::size_t kReadSize = 256 * 1024;
// After this many writes to a lost connection, each one logs a warning
// (asyncio.constants.LOG_THRESHOLD_FOR_CONNLOST_WRITES).
constexpr int kLogConnLostWrites = 5;
// Coalesce small writes into the buffer's last chunk up to this size.
constexpr std::size_t kChunkSize = 64 * 1024;

using namespace transport;  // NOLINT: this file's own helpers.

PyTypeObject* transport_type = nullptr;

// Bytes that write() could not send yet, in order. Only touched under the
// connection's lock.
class WriteBuffer {
 public:
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  void Append(const char* data, std::size_t n) {
    if (n == 0) return;
    if (!chunks_.empty() && chunks_.back().size() + n <= kChunkSize) {
      chunks_.back().append(data, n);
    } else {
      chunks_.emplace_back(data, n);
    }
    size_ += n;
  }
  // Up to `max` iovecs over the front of the buffer.
  int Gather(iovec* iov, int max) {
    int n = 0;
    std::size_t offset = front_offset_;
    for (auto it = chunks_.begin(); it != chunks_.end() && n < max; ++it) {
      iov[n].iov_base = it->data() + offset;
      iov[n].iov_len = it->size() - offset;
      offset = 0;
      ++n;
    }
    return n;
  }
  void Consume(std::size_t n) {
    size_ -= n;
    while (n > 0) {
      std::string& front = chunks_.front();
      const std::size_t left = front.size() - front_offset_;
      if (n < left) {
        front_offset_ += n;
        return;
      }
      n -= left;
      chunks_.pop_front();
      front_offset_ = 0;
    }
  }
  void Clear() {
    chunks_.clear();
    front_offset_ = 0;
    size_ = 0;
  }

 private:
  std::deque<std::string> chunks_;
  std::size_t front_offset_ = 0;
  std::size_t size_ = 0;
};

// --- the connection unit ------------------------------------------------------

class Conn final : public ConnectionUnit {
 public:
  Conn(PyObject* loop, PyObject* sock, int fd, PyObject* base_context)
      : ConnectionUnit(ConnectionKind::kStream, loop, sock, fd, base_context) {}
  ~Conn() override {
    DecRefAnyThread(factory_);
    DecRefAnyThread(server_);
    DecRefAnyThread(writable_waiter_);
  }

  // --- set up before the first wake (one thread) ---
  PyObject* factory_ = nullptr;  // Accepted connections: protocol factory.
  PyObject* server_ = nullptr;

  // --- any thread, under mu_ ---
  bool buffered_ = false;  // protocol_ is a BufferedProtocol.
  WriteBuffer wbuf_;
  bool eof_requested_ = false;  // write_eof() called.
  bool reading_paused_ = false;
  // loop.sendfile()'s native path: write() refuses while it runs, and the
  // unit resolves writable_waiter_ once the buffer is flushed and the
  // socket takes more.
  bool sendfile_active_ = false;
  PyObject* writable_waiter_ = nullptr;

  // --- any thread ---
  // _call_serialized() calls queued for the strand and not begun yet. A
  // call made while any is pending queues behind it, even from a unit
  // that could run it now: a step of an ancestor strand's task must not
  // overtake a write a plain thread queued before starting that step.
  std::atomic<int> serialized_pending_{0};

  // The native TLS engine's side of a TLS connection (ssl= a
  // mt_asyncio.tls.TLSContext); nullptr for plain TCP. Set before the
  // first wake, or by start_tls() on the strand under mu_ (never unset):
  // off the strand it is read under mu_. The session's own state is
  // guarded as tls_session.h says.
  std::unique_ptr<TlsSession> tls_;

  // --- the unit's own (on the strand) ---
  bool attached_ = false;  // server_._attach() was called (an accepted
                           // connection: by the acceptor, before the first wake).
  bool eof_seen_ = false;

  // Sends from the buffer until it is empty or the socket is full. Under
  // mu_. Returns 0, EAGAIN, or another errno.
  int FlushLocked();

  // TLS: close_notify first, then the socket once the peer's arrives
  // (or ssl_shutdown_timeout passes).
  void Close() override;
  // Moves what the engine wrote (records, alerts) to the socket, or into
  // the buffer behind what waits there; *buffered when the buffer grew.
  // Under mu_. 0 or an errno.
  int MoveCiphertextLocked(bool* buffered);
  // _tls_timeout(): the handshake's or the shutdown's time is up.
  void TlsTimeout();
  // _start_tls(spec, protocol, waiter, initial): see the definition.
  PyObject* StartTls(PyObject* spec, PyObject* protocol, PyObject* waiter, PyObject* initial);

 protected:
  bool BufferEmptyLocked() const override { return wbuf_.empty(); }
  std::size_t BufferSizeLocked() const override { return wbuf_.size(); }
  void ClearBufferLocked(std::vector<PyObject*>&) override { wbuf_.Clear(); }

  bool MakeConnection() override;
  void Serve() override {
    FlushIfWritable();
    ServeWritableWaiter();
    if (tls_ != nullptr) {
      TlsServe();
    } else {
      ReadOnce();
    }
  }
  void AfterLost() override;
  bool ProtocolMade() const override { return tls_ != nullptr ? tls_->app_made : made_; }
  void BeforeLost(PyObject* exc) override;

 private:
  bool Start();
  void ReadOnce();
  // After recv(): `err` failed it (EAGAIN: arm for the next edge; else
  // fatal); `n` of `wanted` bytes came (short: arm; full: come back);
  // the peer's end of the stream came.
  void ReadFailed(int err, const runtime::io::ReadyEvent& ready);
  void ReadDone(std::size_t n, std::size_t wanted, const runtime::io::ReadyEvent& ready);
  void NoteEof();
  void FlushIfWritable();
  void ServeWritableWaiter();

  // --- TLS, on the strand ---
  void TlsServe();
  // Steps the session with what it was fed: the handshake, the records,
  // the shutdown.
  void TlsAdvance();
  void TlsHandshakeStep();
  void TlsHandshakeDone();
  // Fails the handshake with `exc` (consumed).
  void TlsHandshakeFailed(PyObject* exc);
  // Decrypts what the engine holds and hands it to the protocol.
  void TlsDeliver();
  // Hands `n` bytes of plaintext to the protocol; false once the
  // connection failed or is lost.
  bool TlsHandOver(const char* data, std::size_t n);
  // The peer ended the stream: close_notify (`clean`) or a bare EOF.
  void TlsPeerEnded(bool clean);
  // eof_received() once, as sslproto calls it: when the peer ends the
  // stream, and when our own shutdown completes. false if it failed the
  // connection.
  bool TlsDeliverEof();
  void TlsArmTimer(double seconds);
  void TlsCancelTimer();
  // Moves engine output and, when the buffer grew, wakes the unit to
  // flush; a send error fails the connection.
  void TlsSendAfter(int send_err, bool buffered);
};

// Sends as much of the buffer as the socket takes.
int Conn::FlushLocked() {
  while (!wbuf_.empty()) {
    iovec iov[64];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(wbuf_.Gather(iov, 64));
    const ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EWOULDBLOCK ? EAGAIN : errno;
    }
    wbuf_.Consume(static_cast<std::size_t>(n));
  }
  return 0;
}





bool Conn::Start() {
  // An accepted connection makes its protocol here, on its own strand, so
  // a server's protocol factories run in parallel too.
  if (factory_ != nullptr) {
    PyObject* protocol = PyObject_CallNoArgs(factory_);
    if (protocol == nullptr) {
      ReportToLoop(loop_, "Error on transport creation for incoming connection",
                   PyErr_GetRaisedException(), {});
      return false;
    }
    const int buffered = PyObject_IsInstance(protocol, buffered_protocol_type);
    if (buffered < 0) PyErr_Clear();
    PyMutexGuard lock(mu_);
    protocol_ = protocol;
    buffered_ = buffered > 0;
  }
  if (io_ == nullptr) {
    io_ = FdTableRegisterTransport(loop_, fd_, transport_, this);
    if (io_ == nullptr) {
      ReportToLoop(loop_, "Error on transport creation for incoming connection",
                   PyErr_GetRaisedException(), {});
      return false;
    }
  }
  if (server_ != nullptr && !attached_) {
    PyObject* res = CallMethod(server_, "_attach", transport_);
    if (res == nullptr) PyErr_WriteUnraisable(server_);
    Py_XDECREF(res);
    attached_ = true;
  }
  return true;
}

bool Conn::MakeConnection() {
  if (!Start()) return false;
  if (tls_ != nullptr) {
    // The protocol hears connection_made after the handshake, and
    // create_connection's waiter resolves then (or fails with why).
    tls_->waiter = std::exchange(waiter_, nullptr);
    MtTlsError err{};
    if (!tls_->Start(&err)) {
      TlsHandshakeFailed(tls::MakeError(err));
      return true;
    }
    TlsArmTimer(tls_->handshake_timeout);
    TlsHandshakeStep();  // A client's ClientHello goes out now.
    return true;
  }
  PyObject* protocol = Protocol();
  PyObject* res = CallMethod(protocol, "connection_made", transport_);
  if (res == nullptr) {
    LoopReportException(loop_, "Exception in callback ", protocol, nullptr, nullptr);
  }
  Py_XDECREF(res);
  Py_DECREF(protocol);
  return true;
}


void Conn::FlushIfWritable() {
  {
    PyMutexGuard lock(mu_);
    if (wbuf_.empty() || lost_pending_) return;
  }
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kWrite, this);
  if (!ready) return;  // Armed.
  int err;
  bool shut_wr = false;
  {
    PyMutexGuard lock(mu_);
    err = FlushLocked();
    if (err == 0) {
      if (closing_ && !awaiting_peer_close_) {
        // close() waited for the buffer: connection_lost(None) is due —
        // unless a paused protocol is about to hear resume_writing(),
        // which may still write (TLS's close_notify does): as stdlib,
        // that comes first, and FinishCloseIfDrained() decides after it.
        if (!paused_delivered_) {
          if (conn_lost_ == 0) ++conn_lost_;
          lost_pending_ = true;
        }
      } else if (eof_requested_) {
        shut_wr = true;
      }
    }
    if (want_paused_ && wbuf_.size() <= low_water_) want_paused_ = false;
  }
  if (shut_wr) shutdown(fd_, SHUT_WR);
  if (err == EAGAIN) {
    driver.ClearReadiness(io_, io::Direction::kWrite, *ready);
    if (driver.PollReady(io_, io::Direction::kWrite, this)) Wake(rt_task::ScheduleKind::kYield);
  } else if (err != 0) {
    PyObject* exc = OsErrorFromErrno(err);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    Fatal(exc, "Fatal write error on socket transport");
  }
}

void Conn::ServeWritableWaiter() {
  {
    PyMutexGuard lock(mu_);
    if (writable_waiter_ == nullptr || !wbuf_.empty() || lost_pending_) return;
  }
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kWrite, this);
  if (!ready) return;  // Armed.
  // The cached readiness may be older than the EAGAIN that sent the waiter
  // here: ask the socket, and wait for the next edge if it is full.
  pollfd p{};
  p.fd = fd_;
  p.events = POLLOUT;
  if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLOUT | POLLERR | POLLHUP))) {
    driver.ClearReadiness(io_, io::Direction::kWrite, *ready);
    if (driver.PollReady(io_, io::Direction::kWrite, this)) Wake(rt_task::ScheduleKind::kYield);
    return;
  }
  PyObject* waiter;
  {
    PyMutexGuard lock(mu_);
    waiter = std::exchange(writable_waiter_, nullptr);
  }
  ResolveWaiter(&waiter);
}

void Conn::ReadOnce() {
  bool buffered;
  {
    PyMutexGuard lock(mu_);
    if (reading_paused_ || closing_ || lost_pending_) return;
    buffered = buffered_;
  }
  if (eof_seen_) return;
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kRead, this);
  if (!ready) return;  // Armed.
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return;
  ssize_t n;
  std::size_t wanted;
  PyObject* res = nullptr;
  const char* failure = nullptr;
  if (buffered) {
    PyObject* size = PyLong_FromLong(-1);
    PyObject* buf = size != nullptr ? CallMethod(protocol, "get_buffer", size) : nullptr;
    Py_XDECREF(size);
    if (buf == nullptr) {
      Py_DECREF(protocol);
      Fatal(PyErr_GetRaisedException(), "Fatal error: protocol.get_buffer() call failed.");
      return;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0) {
      Py_DECREF(buf);
      Py_DECREF(protocol);
      Fatal(PyErr_GetRaisedException(), "Fatal error: protocol.get_buffer() call failed.");
      return;
    }
    if (view.len == 0) {
      PyBuffer_Release(&view);
      Py_DECREF(buf);
      Py_DECREF(protocol);
      PyErr_SetString(PyExc_RuntimeError, "get_buffer() returned an empty buffer");
      Fatal(PyErr_GetRaisedException(), "Fatal error: protocol.get_buffer() call failed.");
      return;
    }
    wanted = static_cast<std::size_t>(view.len);
    do {
      n = recv(fd_, view.buf, wanted, 0);
    } while (n < 0 && errno == EINTR);
    const int err = errno;
    PyBuffer_Release(&view);
    Py_DECREF(buf);
    errno = err;
    if (n > 0) {
      PyObject* nbytes = PyLong_FromSsize_t(n);
      res = nbytes != nullptr ? CallMethod(protocol, "buffer_updated", nbytes) : nullptr;
      Py_XDECREF(nbytes);
      failure = "Fatal error: protocol.buffer_updated() call failed.";
    }
  } else {
    // One reused buffer per worker: data_received gets a bytes copy of
    // just what arrived.
    thread_local std::unique_ptr<char[]> buffer(new char[kReadSize]);
    wanted = kReadSize;
    do {
      n = recv(fd_, buffer.get(), wanted, 0);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
      PyObject* data = PyBytes_FromStringAndSize(buffer.get(), n);
      res = data != nullptr ? CallMethod(protocol, "data_received", data) : nullptr;
      Py_XDECREF(data);
      failure = "Fatal error: protocol.data_received() call failed.";
    }
  }
  if (n < 0) {
    const int err = errno;
    Py_DECREF(protocol);
    ReadFailed(err, *ready);
    return;
  }
  if (n == 0) {
    NoteEof();
    PyObject* keep_open = CallMethod(protocol, "eof_received");
    Py_DECREF(protocol);
    if (keep_open == nullptr) {
      Fatal(PyErr_GetRaisedException(), "Fatal error: protocol.eof_received() call failed.");
      return;
    }
    const int keep = PyObject_IsTrue(keep_open);
    Py_DECREF(keep_open);
    if (keep < 0) PyErr_Clear();
    if (keep <= 0) Close();
    return;
  }
  Py_DECREF(protocol);
  if (res == nullptr) {
    PyObject* exc = PyErr_GetRaisedException();
    if (IsExitException(exc)) {
      LoopRaiseInRunner(loop_, exc);
      return;
    }
    Fatal(exc, failure);
    return;
  }
  Py_DECREF(res);
  ReadDone(static_cast<std::size_t>(n), wanted, *ready);
}

void Conn::ReadFailed(int err, const io::ReadyEvent& ready) {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    io::IoDriver& driver = LoopRuntime(loop_).driver().io();
    driver.ClearReadiness(io_, io::Direction::kRead, ready);
    if (driver.PollReady(io_, io::Direction::kRead, this)) Wake(rt_task::ScheduleKind::kYield);
    return;
  }
  PyObject* exc = OsErrorFromErrno(err);
  if (exc == nullptr) exc = PyErr_GetRaisedException();
  Fatal(exc, "Fatal read error on socket transport");
}

void Conn::ReadDone(std::size_t n, std::size_t wanted, const io::ReadyEvent& ready) {
  if (n < wanted) {
    // A short read drained the socket: forget the readiness we saw (a newer
    // event keeps it) and arm.
    io::IoDriver& driver = LoopRuntime(loop_).driver().io();
    driver.ClearReadiness(io_, io::Direction::kRead, ready);
    if (driver.PollReady(io_, io::Direction::kRead, this)) Wake(rt_task::ScheduleKind::kYield);
  } else {
    Wake(rt_task::ScheduleKind::kYield);  // More may wait; others go first.
  }
}

void Conn::NoteEof() {
  eof_seen_ = true;
  if (GetDebug(loop_)) {
    PyObject* r = PyObject_CallMethod(logger, "debug", "sO", "%r received EOF", transport_);
    Py_XDECREF(r);
    PyErr_Clear();
  }
}

void Conn::AfterLost() {
  if (attached_) {
    PyObject* r = CallMethod(server_, "_detach", transport_);
    if (r == nullptr) PyErr_WriteUnraisable(server_);
    Py_XDECREF(r);
  }
  PyObject* writable;
  {
    PyMutexGuard lock(mu_);
    writable = std::exchange(writable_waiter_, nullptr);
  }
  if (writable != nullptr) {
    PyObject* closed = PyObject_CallFunction(PyExc_ConnectionError, "s",
                                             "Connection closed by peer");
    if (closed == nullptr) PyErr_Clear();
    ResolveWaiter(&writable, closed);
    Py_XDECREF(closed);
  }
  Py_CLEAR(server_);
  Py_CLEAR(factory_);
}

// --- TLS on the native engine ---------------------------------------------------
//
// The engine's connection lives beside the socket: what recv() returns is
// fed to it and stepped on the strand (handshake, records, shutdown);
// plaintext goes to the protocol; what it writes (records, alerts,
// close_notify) is sent at once when nothing waits, else buffered behind
// what does. Every engine call is under mu_, so write() encrypts on the
// caller's thread while the strand decrypts, one at a time per
// connection and in parallel across connections.

int Conn::MoveCiphertextLocked(bool* buffered) {
  const MtTlsEngine* e = tls_->engine();
  std::size_t n = 0;
  const char* data = e->conn_out_peek(tls_->conn, &n);
  if (n == 0) return 0;
  std::size_t sent = 0;
  int err = 0;
  if (wbuf_.empty() && !lost_pending_) {
    ssize_t r;
    do {
      r = send(fd_, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r >= 0) {
      sent = static_cast<std::size_t>(r);
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      err = errno;
    }
  }
  if (err == 0 && sent < n) {
    wbuf_.Append(data + sent, n - sent);
    *buffered = true;
  }
  e->conn_out_consume(tls_->conn, n);
  return err;
}

void Conn::TlsSendAfter(int send_err, bool buffered) {
  if (send_err != 0) {
    PyObject* exc = OsErrorFromErrno(send_err);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    Fatal(exc, "Fatal write error on socket transport");
    return;
  }
  if (buffered) Wake();  // FlushIfWritable sends the rest.
}

void Conn::TlsArmTimer(double seconds) {
  TlsCancelTimer();
  PyObject* callback = PyObject_GetAttrString(transport_, "_tls_timeout");
  PyObject* handle = callback != nullptr
                         ? PyObject_CallMethod(loop_, "call_later", "dO", seconds, callback)
                         : nullptr;
  Py_XDECREF(callback);
  if (handle == nullptr) {
    PyErr_WriteUnraisable(transport_);
    return;
  }
  tls_->timer = handle;
}

void Conn::TlsCancelTimer() {
  PyObject* timer = std::exchange(tls_->timer, nullptr);
  if (timer == nullptr) return;
  PyObject* r = PyObject_CallMethod(timer, "cancel", nullptr);
  if (r == nullptr) PyErr_Clear();
  Py_XDECREF(r);
  Py_DECREF(timer);
}

void Conn::TlsTimeout() {
  Py_CLEAR(tls_->timer);
  TlsState state;
  {
    PyMutexGuard lock(mu_);
    state = tls_->state;
  }
  if (state == TlsState::kHandshake) {
    PyObject* exc = PyObject_CallFunction(
        PyExc_ConnectionAbortedError, "s",
        ("SSL handshake is taking longer than " + std::to_string(tls_->handshake_timeout) +
         " seconds: aborting the connection")
            .c_str());
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    TlsHandshakeFailed(exc);
  } else if (state == TlsState::kShutdown) {
    PyObject* exc = PyObject_CallFunction(PyExc_TimeoutError, "s", "SSL shutdown timed out");
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    ForceClose(exc);
  }
}

void Conn::TlsHandshakeStep() {
  const MtTlsEngine* e = tls_->engine();
  MtTlsError err{};
  int result;
  int send_err;
  bool buffered = false;
  {
    PyMutexGuard lock(mu_);
    if (tls_->state != TlsState::kHandshake) return;
    tls::HandshakeScope scope(transport_, &mu_);
    result = e->conn_handshake(tls_->conn, &err);
    send_err = MoveCiphertextLocked(&buffered);
    if (result == MT_TLS_OK) tls_->state = TlsState::kWrapped;
  }
  if (result == MT_TLS_FAILED) {
    // Its alert is on its way (sent above when the socket took it).
    TlsHandshakeFailed(tls::MakeError(
        err, tls_->server_hostname.empty() ? nullptr : tls_->server_hostname.c_str()));
    return;
  }
  TlsSendAfter(send_err, buffered);
  if (result == MT_TLS_OK) TlsHandshakeDone();
}

void Conn::TlsHandshakeFailed(PyObject* exc) {
  {
    PyMutexGuard lock(mu_);
    tls_->state = TlsState::kDone;
  }
  TlsCancelTimer();
  ResolveWaiter(&tls_->waiter, exc);
  const int verify = PyObject_HasAttrString(exc, "verify_code");
  Fatal(exc, verify ? "SSL handshake failed on verifying the certificate"
                    : "SSL handshake failed");
}

void Conn::TlsHandshakeDone() {
  TlsCancelTimer();
  // What sslproto adds to the extra info (sslcontext, ssl_object, cipher,
  // compression; peercert on first use), from mt_asyncio.tls.
  PyObject* more = tls::OnHandshake(transport_);
  if (more == nullptr || PyDict_Update(extra_, more) < 0) PyErr_WriteUnraisable(transport_);
  Py_XDECREF(more);
  tls_->app_made = true;
  PyObject* protocol = tls_->call_connection_made ? Protocol() : nullptr;
  if (protocol != nullptr) {
    PyObject* res = CallMethod(protocol, "connection_made", transport_);
    if (res == nullptr) {
      LoopReportException(loop_, "Exception in callback ", protocol, nullptr, nullptr);
    }
    Py_XDECREF(res);
    Py_DECREF(protocol);
  }
  ResolveWaiter(&tls_->waiter);
  // Records that came with the handshake's last flight.
  TlsDeliver();
}

bool Conn::TlsHandOver(const char* data, std::size_t n) {
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return false;
  bool buffered;
  {
    PyMutexGuard lock(mu_);
    buffered = buffered_;
  }
  PyObject* res = nullptr;
  const char* failure;
  if (!buffered) {
    PyObject* bytes = PyBytes_FromStringAndSize(data, static_cast<Py_ssize_t>(n));
    res = bytes != nullptr ? CallMethod(protocol, "data_received", bytes) : nullptr;
    Py_XDECREF(bytes);
    failure = "Fatal error: protocol.data_received() call failed.";
  } else {
    // As many get_buffer()/buffer_updated() rounds as the protocol's
    // buffers need.
    failure = "Fatal error: protocol.get_buffer() call failed.";
    res = Py_NewRef(Py_None);
    while (n > 0 && res != nullptr) {
      Py_CLEAR(res);
      PyObject* size = PyLong_FromSize_t(n);
      PyObject* buf = size != nullptr ? CallMethod(protocol, "get_buffer", size) : nullptr;
      Py_XDECREF(size);
      if (buf == nullptr) break;
      Py_buffer view;
      if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(buf);
        break;
      }
      if (view.len == 0) {
        PyBuffer_Release(&view);
        Py_DECREF(buf);
        PyErr_SetString(PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        break;
      }
      const std::size_t k = std::min(n, static_cast<std::size_t>(view.len));
      std::memcpy(view.buf, data, k);
      PyBuffer_Release(&view);
      Py_DECREF(buf);
      data += k;
      n -= k;
      PyObject* count = PyLong_FromSize_t(k);
      res = count != nullptr ? CallMethod(protocol, "buffer_updated", count) : nullptr;
      Py_XDECREF(count);
      failure = "Fatal error: protocol.buffer_updated() call failed.";
    }
  }
  Py_DECREF(protocol);
  if (res == nullptr) {
    PyObject* exc = PyErr_GetRaisedException();
    if (IsExitException(exc)) {
      LoopRaiseInRunner(loop_, exc);
      return false;
    }
    Fatal(exc, failure);
    return false;
  }
  Py_DECREF(res);
  return true;
}

void Conn::TlsDeliver() {
  const MtTlsEngine* e = tls_->engine();
  thread_local std::unique_ptr<char[]> buffer(new char[kReadSize]);
  std::size_t total = 0;
  int status = MT_TLS_OK;
  MtTlsError err{};
  int send_err;
  bool buffered = false;
  {
    PyMutexGuard lock(mu_);
    if (tls_->state != TlsState::kWrapped || reading_paused_ || lost_pending_) return;
    // Records are at most 16 KiB: gather what is there into one
    // delivery, as a plain connection's one recv() would be.
    while (total < kReadSize && status == MT_TLS_OK) {
      total += e->conn_read(tls_->conn, buffer.get() + total, kReadSize - total, &status, &err);
    }
    // Reading may answer (a key update, an alert).
    send_err = MoveCiphertextLocked(&buffered);
  }
  if (total > 0 && !TlsHandOver(buffer.get(), total)) return;
  if (status == MT_TLS_CLOSED) {
    TlsPeerEnded(/*clean=*/true);
    return;
  }
  if (status == MT_TLS_FAILED) {
    Fatal(tls::MakeError(err), "Fatal error on SSL protocol");
    return;
  }
  TlsSendAfter(send_err, buffered);
  // The buffer filled: more may be there; other units go first.
  if (status != MT_TLS_WANT_READ) Wake(rt_task::ScheduleKind::kYield);
}

bool Conn::TlsDeliverEof() {
  if (tls_->eof_delivered || !tls_->app_made) return true;
  tls_->eof_delivered = true;
  PyObject* protocol = Protocol();
  if (protocol == nullptr) return true;
  PyObject* keep_open = CallMethod(protocol, "eof_received");
  Py_DECREF(protocol);
  if (keep_open == nullptr) {
    Fatal(PyErr_GetRaisedException(), "Error calling eof_received()");
    return false;
  }
  const int keep = PyObject_IsTrue(keep_open);
  Py_DECREF(keep_open);
  if (keep < 0) PyErr_Clear();
  if (keep > 0) {
    PyObject* r = PyObject_CallMethod(
        logger, "warning", "s", "returning true from eof_received() has no effect when using ssl");
    Py_XDECREF(r);
    PyErr_Clear();
  }
  return true;
}

void Conn::TlsPeerEnded(bool clean) {
  TlsState state;
  {
    PyMutexGuard lock(mu_);
    state = tls_->state;
  }
  if (state == TlsState::kHandshake) {
    PyObject* exc = PyObject_CallNoArgs(PyExc_ConnectionResetError);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    TlsHandshakeFailed(exc);
    return;
  }
  if ((state == TlsState::kWrapped || state == TlsState::kShutdown) && !TlsDeliverEof()) {
    return;
  }
  if (clean) {
    Close();  // Our close_notify answers theirs; nothing left to wait for.
  }
  // Either way nothing more will come: the socket closes once what is
  // buffered is sent.
  {
    PyMutexGuard lock(mu_);
    tls_->state = TlsState::kDone;
    awaiting_peer_close_ = false;
    closing_ = true;
  }
  TlsCancelTimer();
  Wake();
}

void Conn::TlsAdvance() {
  TlsState state;
  {
    PyMutexGuard lock(mu_);
    state = tls_->state;
  }
  if (state == TlsState::kHandshake) {
    TlsHandshakeStep();
    return;  // TlsHandshakeDone delivers what came with it.
  }
  if (state == TlsState::kWrapped) {
    TlsDeliver();
    return;
  }
  if (state != TlsState::kShutdown) return;
  // Waiting for the peer's close_notify: what comes before it is read and
  // dropped, as sslproto's unwrap does.
  const MtTlsEngine* e = tls_->engine();
  thread_local std::unique_ptr<char[]> sink(new char[16384]);
  int status = MT_TLS_OK;
  MtTlsError err{};
  int send_err;
  bool buffered = false;
  {
    PyMutexGuard lock(mu_);
    while (status == MT_TLS_OK) e->conn_read(tls_->conn, sink.get(), 16384, &status, &err);
    send_err = MoveCiphertextLocked(&buffered);
    if (status != MT_TLS_WANT_READ) {
      tls_->state = TlsState::kDone;
      awaiting_peer_close_ = false;
    }
  }
  TlsSendAfter(send_err, buffered);
  if (status != MT_TLS_WANT_READ) {
    TlsCancelTimer();
    // The peer's close_notify completes our shutdown: sslproto tells the
    // protocol eof_received() then (not after a failure).
    if (status == MT_TLS_CLOSED) TlsDeliverEof();
    Wake();  // FinishCloseIfDrained ends it.
  }
}

void Conn::TlsServe() {
  bool arm_shutdown;
  {
    PyMutexGuard lock(mu_);
    if (lost_pending_) return;
    arm_shutdown = tls_->state == TlsState::kShutdown && awaiting_peer_close_;
  }
  if (arm_shutdown && eof_seen_) {
    // The peer's end came before our close(): no close_notify will follow.
    {
      PyMutexGuard lock(mu_);
      tls_->state = TlsState::kDone;
      awaiting_peer_close_ = false;
    }
    Wake();  // FinishCloseIfDrained ends it.
    return;
  }
  // close() may come from any thread; its timer is started here, so that
  // it fires on this strand.
  if (arm_shutdown && tls_->timer == nullptr) TlsArmTimer(tls_->shutdown_timeout);
  // Plaintext the engine kept while reading was paused goes first.
  TlsAdvance();
  bool stop;
  {
    PyMutexGuard lock(mu_);
    stop = lost_pending_ || (reading_paused_ && tls_->state == TlsState::kWrapped) ||
           (closing_ && !awaiting_peer_close_ && tls_->state != TlsState::kHandshake);
  }
  if (stop || eof_seen_) return;
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, io::Direction::kRead, this);
  if (!ready) return;  // Armed.
  thread_local std::unique_ptr<char[]> buffer(new char[kReadSize]);
  ssize_t n;
  do {
    n = recv(fd_, buffer.get(), kReadSize, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    ReadFailed(errno, *ready);
    return;
  }
  if (n == 0) {
    NoteEof();
    TlsPeerEnded(/*clean=*/false);
    return;
  }
  {
    PyMutexGuard lock(mu_);
    tls_->engine()->conn_feed(tls_->conn, buffer.get(), static_cast<std::size_t>(n));
  }
  TlsAdvance();
  ReadDone(static_cast<std::size_t>(n), kReadSize, *ready);
}

void Conn::Close() {
  bool abort = false;
  bool plain = false;
  int send_err = 0;
  bool buffered = false;
  {
    PyMutexGuard lock(mu_);
    if (tls_ == nullptr) {
      plain = true;
    } else if (closing_) {
      return;
    } else {
      switch (tls_->state) {
        case TlsState::kHandshake:
          abort = true;  // As sslproto: nothing to say to a peer mid-handshake.
          break;
        case TlsState::kWrapped: {
          closing_ = true;
          tls_->state = TlsState::kShutdown;
          MtTlsError err{};
          const int r = tls_->engine()->conn_shutdown(tls_->conn, &err);
          send_err = MoveCiphertextLocked(&buffered);
          if (r == MT_TLS_WANT_READ) {
            awaiting_peer_close_ = true;  // TlsServe ends the wait if the peer is gone.
          } else {
            tls_->state = TlsState::kDone;
          }
          break;
        }
        default:
          plain = true;
          break;
      }
    }
  }
  if (abort) {
    ForceClose(nullptr);
    return;
  }
  if (plain) {
    ConnectionUnit::Close();
    return;
  }
  if (send_err != 0) {
    PyObject* exc = OsErrorFromErrno(send_err);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    ForceClose(exc);
    return;
  }
  Wake();  // The strand flushes, arms the shutdown timer, finishes.
}

// start_tls() on the native engine: the connection becomes a TLS one in
// place, on its strand. Its protocol is `protocol` from now on; `waiter`
// resolves when the handshake is done; `initial` is what a server's
// stream reader had already read of the peer's first flight.
PyObject* Conn::StartTls(PyObject* spec, PyObject* protocol, PyObject* waiter,
                         PyObject* initial) {
  if (!OnMyStrand()) {
    PyErr_SetString(PyExc_RuntimeError, "_start_tls() runs on the connection's strand");
    return nullptr;
  }
  const int buffered = PyObject_IsInstance(protocol, buffered_protocol_type);
  if (buffered < 0) return nullptr;
  std::unique_ptr<TlsSession> session = TlsSession::FromSpec(spec);
  if (session == nullptr) return nullptr;
  MtTlsError err{};
  if (!session->Start(&err)) return tls::RaiseError(err);
  if (PyBytes_Check(initial) && PyBytes_GET_SIZE(initial) > 0) {
    session->engine()->conn_feed(session->conn, PyBytes_AS_STRING(initial),
                                 static_cast<std::size_t>(PyBytes_GET_SIZE(initial)));
  }
  session->waiter = Py_NewRef(waiter);
  session->call_connection_made = false;
  PyObject* old;
  {
    PyMutexGuard lock(mu_);
    if (tls_ != nullptr || closing_ || lost_pending_) {
      PyErr_SetString(PyExc_RuntimeError, "the connection cannot start TLS now");
      return nullptr;
    }
    tls_ = std::move(session);
    old = std::exchange(protocol_, Py_NewRef(protocol));
    buffered_ = buffered > 0;
    reading_paused_ = false;
  }
  Py_XDECREF(old);
  TlsArmTimer(tls_->handshake_timeout);
  TlsHandshakeStep();
  Wake();  // Read the peer's answer.
  Py_RETURN_NONE;
}

void Conn::BeforeLost(PyObject* exc) {
  if (tls_ == nullptr) return;
  TlsCancelTimer();
  if (tls_->waiter != nullptr) {
    PyObject* why = exc != nullptr ? Py_NewRef(exc)
                                   : PyObject_CallFunction(PyExc_ConnectionResetError, "s",
                                                           "Connection lost during the TLS handshake");
    if (why == nullptr) why = PyErr_GetRaisedException();
    ResolveWaiter(&tls_->waiter, why);
    Py_DECREF(why);
  }
  PyMutexGuard lock(mu_);
  tls_->state = TlsState::kDone;
}

// --- SocketTransport ---------------------------------------------------------------

Conn* ConnOf(PyObject* self) { return static_cast<Conn*>(UnitOf(self)); }

// Views a bytes-like object as stdlib's transports accept it.
int GetData(PyObject* data, Py_buffer* view) {
  if (!PyBytes_Check(data) && !PyByteArray_Check(data) && !PyMemoryView_Check(data)) {
    // The running stdlib's words (3.14 reworded them).
#if PY_VERSION_HEX >= 0x030E0000
    PyErr_Format(PyExc_TypeError,
                 "data argument must be a bytes, bytearray, or memoryview "
                 "object, not '%s'",
                 Py_TYPE(data)->tp_name);
#else
    PyErr_Format(PyExc_TypeError, "data argument must be a bytes-like object, not '%s'",
                 Py_TYPE(data)->tp_name);
#endif
    return -1;
  }
  return PyObject_GetBuffer(data, view, PyBUF_SIMPLE);
}

// What write()/writelines() do with their data once it is viewed.
PyObject* WriteViews(PyObject* self, Py_buffer* views, std::size_t count,
                     const char* method) {
  Conn* c = ConnOf(self);
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += static_cast<std::size_t>(views[i].len);
  int err = 0;
  bool after_eof = false;
  bool warn = false;
  bool wake = false;
  bool pause = false;
  bool in_sendfile = false;
  std::unique_ptr<MtTlsError> tls_failed;
  {
    PyMutexGuard lock(c->mu_);
    if (c->eof_requested_) {
      after_eof = true;
    } else if (c->sendfile_active_) {
      in_sendfile = true;
    } else if (total == 0) {
      // Nothing to do.
    } else if (c->conn_lost_ > 0) {
      warn = c->conn_lost_ >= kLogConnLostWrites;
      ++c->conn_lost_;
    } else if (c->tls_ != nullptr) {
      // Encrypted here, on the caller's thread, under the lock: writes
      // from many threads each pay for their own records. After close()
      // (the shutdown has begun) writes are dropped, as sslproto's.
      if (c->tls_->state == TlsState::kWrapped) {
        const bool was_empty = c->wbuf_.empty();
        const MtTlsEngine* e = c->tls_->engine();
        for (std::size_t i = 0; i < count && tls_failed == nullptr; ++i) {
          MtTlsError tls_err{};
          if (e->conn_write(c->tls_->conn, static_cast<const char*>(views[i].buf),
                            static_cast<std::size_t>(views[i].len), &tls_err) != MT_TLS_OK) {
            tls_failed = std::make_unique<MtTlsError>(tls_err);
          }
        }
        bool buffered = false;
        err = c->MoveCiphertextLocked(&buffered);
        wake = was_empty && !c->wbuf_.empty();
        if (!c->want_paused_ && c->wbuf_.size() > c->high_water_) {
          c->want_paused_ = true;
          pause = true;
        }
      }
    } else {
      const bool was_empty = c->wbuf_.empty();
      std::size_t skip = 0;
      if (was_empty && !c->lost_pending_) {
        // Nothing queued: try the socket first, buffer only what is left.
        iovec iov[64];
        std::size_t n = std::min<std::size_t>(count, 64);
        for (std::size_t i = 0; i < n; ++i) {
          iov[i].iov_base = views[i].buf;
          iov[i].iov_len = static_cast<std::size_t>(views[i].len);
        }
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = n;
        ssize_t sent;
        do {
          sent = sendmsg(c->fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        } while (sent < 0 && errno == EINTR);
        if (sent >= 0) {
          skip = static_cast<std::size_t>(sent);
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
          err = errno;
        }
      }
      if (err == 0) {
        for (std::size_t i = 0; i < count; ++i) {
          const auto len = static_cast<std::size_t>(views[i].len);
          if (skip >= len) {
            skip -= len;
            continue;
          }
          c->wbuf_.Append(static_cast<const char*>(views[i].buf) + skip, len - skip);
          skip = 0;
        }
        wake = was_empty && !c->wbuf_.empty();
        if (!c->want_paused_ && c->wbuf_.size() > c->high_water_) {
          c->want_paused_ = true;
          pause = true;
        }
      }
    }
  }
  if (after_eof) {
    PyErr_Format(PyExc_RuntimeError, "Cannot call %s() after write_eof()", method);
    return nullptr;
  }
  if (in_sendfile) {
    PyErr_SetString(PyExc_RuntimeError, "unable to write; sendfile is in progress");
    return nullptr;
  }
  if (warn) {
    PyObject* r = PyObject_CallMethod(logger, "warning", "s", "socket.send() raised exception.");
    Py_XDECREF(r);
    PyErr_Clear();
  }
  if (tls_failed != nullptr) {
    c->Fatal(tls::MakeError(*tls_failed), "Fatal error on SSL protocol", self);
    Py_RETURN_NONE;
  }
  if (err != 0) {
    PyObject* exc = OsErrorFromErrno(err);
    if (exc == nullptr) exc = PyErr_GetRaisedException();
    c->Fatal(exc, "Fatal write error on socket transport", self);
    Py_RETURN_NONE;
  }
  // The unit flushes what is buffered (arming for writability).
  if (wake) c->Wake();
  if (pause) {
    if (c->OnMyStrand()) {
      c->SyncPause();  // As stdlib: pause_writing() before write() returns.
    } else if (!wake) {
      c->Wake();  // The unit delivers it, in order with its callbacks.
    }
  }
  Py_RETURN_NONE;
}

PyObject* Transport_write(PyObject* self, PyObject* data) {
  Py_buffer view;
  if (GetData(data, &view) < 0) return nullptr;
  PyObject* res = WriteViews(self, &view, 1, "write");
  PyBuffer_Release(&view);
  return res;
}

PyObject* Transport_writelines(PyObject* self, PyObject* list_of_data) {
  PyObject* seq = PySequence_Fast(list_of_data, "writelines() argument must be iterable");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Py_buffer> views(static_cast<std::size_t>(n));
  Py_ssize_t got = 0;
  PyObject* res = nullptr;
  for (; got < n; ++got) {
    if (GetData(PySequence_Fast_GET_ITEM(seq, got), &views[got]) < 0) break;
  }
  if (got == n) res = WriteViews(self, views.data(), views.size(), "writelines");
  for (Py_ssize_t i = 0; i < got; ++i) PyBuffer_Release(&views[i]);
  Py_DECREF(seq);
  return res;
}

PyObject* Transport_write_eof(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  bool shut_now = false;
  {
    PyMutexGuard lock(c->mu_);
    if (c->tls_ != nullptr) {
      PyErr_SetString(PyExc_NotImplementedError, "SSL doesn't support half-closes");
      return nullptr;
    }
    if (c->closing_ || c->eof_requested_) Py_RETURN_NONE;
    c->eof_requested_ = true;
    shut_now = c->wbuf_.empty();
  }
  if (shut_now && shutdown(c->fd_, SHUT_WR) != 0 && errno != ENOTCONN) {
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  Py_RETURN_NONE;
}

PyObject* Transport_can_write_eof(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  return PyBool_FromLong(c->tls_ == nullptr);
}





PyObject* Transport_is_reading(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  return PyBool_FromLong(!c->closing_ && !c->reading_paused_);
}

PyObject* Transport_pause_reading(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  if (!c->closing_) c->reading_paused_ = true;
  Py_RETURN_NONE;
}

PyObject* Transport_resume_reading(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  {
    PyMutexGuard lock(c->mu_);
    if (c->closing_ || !c->reading_paused_) Py_RETURN_NONE;
    c->reading_paused_ = false;
  }
  c->Wake();
  Py_RETURN_NONE;
}


PyObject* Transport_set_protocol(PyObject* self, PyObject* protocol) {
  const int buffered = PyObject_IsInstance(protocol, buffered_protocol_type);
  if (buffered < 0) return nullptr;
  Conn* c = ConnOf(self);
  PyObject* old;
  {
    PyMutexGuard lock(c->mu_);
    old = std::exchange(c->protocol_, Py_NewRef(protocol));
    c->buffered_ = buffered > 0;
  }
  Py_XDECREF(old);
  Py_RETURN_NONE;
}





// _call_serialized(callback, *args): callback(*args) now if the caller runs
// on this connection's strand (or an ancestor of it) and no earlier call
// is still queued (returning its result), else soon on the strand, after
// the calls queued before it (returning None), in the caller's context.
// What wraps a connection in more protocol state (TLS) uses it so that its
// own methods are as safe from any thread as write() is, and keep the
// order they were called in.
PyObject* Transport_call_serialized(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "_call_serialized(callback, *args)");
    return nullptr;
  }
  Conn* c = ConnOf(self);
  if (c->strand_ == nullptr ||
      (c->OnMyStrand() && c->serialized_pending_.load(std::memory_order_acquire) == 0)) {
    return PyObject_Vectorcall(args[0], args + 1, static_cast<std::size_t>(nargs - 1), nullptr);
  }
  PyObject* run = PyObject_GetAttrString(self, "_run_serialized");
  if (run == nullptr) return nullptr;
  PyObject* rest = PyTuple_New(nargs);
  if (rest == nullptr) {
    Py_DECREF(run);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(rest, i, Py_NewRef(args[i]));
  PyObject* ctx = PyContext_CopyCurrent();
  PyObject* handle = ctx != nullptr ? LoopNewHandle(c->loop_, run, rest, ctx) : nullptr;
  Py_DECREF(run);
  Py_DECREF(rest);
  Py_XDECREF(ctx);
  if (handle == nullptr) return nullptr;
  c->serialized_pending_.fetch_add(1, std::memory_order_acq_rel);
  LoopScheduleHandle(c->loop_, handle, c->strand_);
  Py_DECREF(handle);
  Py_RETURN_NONE;
}

// _run_serialized(callback, *args): a queued _call_serialized() call, run
// on the strand. It stops counting as pending before it runs, so that what
// it calls on this transport runs inline.
PyObject* Transport_run_serialized(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "_run_serialized(callback, *args)");
    return nullptr;
  }
  ConnOf(self)->serialized_pending_.fetch_sub(1, std::memory_order_acq_rel);
  return PyObject_Vectorcall(args[0], args + 1, static_cast<std::size_t>(nargs - 1), nullptr);
}

// _sendfile_begin() / _sendfile_end(): loop.sendfile()'s native path owns
// the socket in between (write() refuses).
PyObject* Transport_sendfile_begin(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  bool closing, busy;
  {
    PyMutexGuard lock(c->mu_);
    closing = c->closing_;
    busy = c->sendfile_active_;
    if (!closing && !busy) c->sendfile_active_ = true;
  }
  if (closing) {
    PyErr_SetString(PyExc_RuntimeError, "Transport is closing");
    return nullptr;
  }
  if (busy) {
    PyErr_SetString(PyExc_RuntimeError, "sendfile is in progress");
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyObject* Transport_sendfile_end(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  c->sendfile_active_ = false;
  Py_RETURN_NONE;
}

// _wait_writable() -> a future resolved when the write buffer is empty and
// the socket takes more (ConnectionError if the connection goes first).
PyObject* Transport_wait_writable(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  PyObject* fut = CallMethod(c->loop_, "create_future");
  if (fut == nullptr) return nullptr;
  PyObject* previous;
  {
    PyMutexGuard lock(c->mu_);
    previous = std::exchange(c->writable_waiter_, Py_NewRef(fut));
  }
  if (previous != nullptr) {
    PyObject* r = CallMethod(previous, "cancel");
    Py_XDECREF(r);
    PyErr_Clear();
    Py_DECREF(previous);
  }
  c->Wake();
  return fut;
}

// _tls_timeout(): the TLS handshake's or shutdown's timer fired (on the
// strand: it was started there).
PyObject* Transport_tls_timeout(PyObject* self, PyObject*) {
  Conn* c = ConnOf(self);
  if (c->tls_ != nullptr) c->TlsTimeout();
  Py_RETURN_NONE;
}

// _tls_info(what, index=0): what the TLS handshake settled (TlsSession::Info).
PyObject* Transport_tls_info(PyObject* self, PyObject* args) {
  const char* what;
  Py_ssize_t index = 0;
  if (!PyArg_ParseTuple(args, "s|n:_tls_info", &what, &index)) return nullptr;
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  if (c->tls_ == nullptr) Py_RETURN_NONE;
  return c->tls_->Info(what, index);
}

// _tls_set_context(core): the SNI callback's choice of certificate.
PyObject* Transport_tls_set_context(PyObject* self, PyObject* core) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  if (c->tls_ == nullptr) {
    PyErr_SetString(PyExc_ValueError, "not a TLS connection");
    return nullptr;
  }
  return c->tls_->SetContext(core);
}

PyObject* Transport_is_tls(PyObject* self, void*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  return PyBool_FromLong(c->tls_ != nullptr);
}

// _start_tls(spec, protocol, waiter, initial): Conn::StartTls.
PyObject* Transport_start_tls(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "_start_tls(spec, protocol, waiter, initial)");
    return nullptr;
  }
  return ConnOf(self)->StartTls(args[0], args[1], args[2], args[3]);
}

// Every stream transport of ours takes start_tls(): a plain one natively
// (a TLSContext) or through the ssl module's protocol; a TLS one through
// the ssl module's protocol over its plaintext (TLS inside TLS).
PyObject* Transport_start_tls_compatible(PyObject*, void*) { Py_RETURN_TRUE; }

// Whether the protocol is (or is about to be) paused for writing; what a
// sendfile fallback swapping protocols must hand back.
PyObject* Transport_protocol_paused(PyObject* self, void*) {
  Conn* c = ConnOf(self);
  PyMutexGuard lock(c->mu_);
  return PyBool_FromLong(c->want_paused_);
}

PyGetSetDef transport_getset[] = {
    {"_start_tls_compatible", Transport_start_tls_compatible, nullptr, nullptr, nullptr},
    {"_protocol_paused", Transport_protocol_paused, nullptr, nullptr, nullptr},
    {"_is_tls", Transport_is_tls, nullptr, nullptr, nullptr},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyObject* Transport_repr(PyObject* self) {
  Conn* c = ConnOf(self);
  bool closing, lost, paused;
  std::size_t size;
  {
    PyMutexGuard lock(c->mu_);
    closing = c->closing_;
    lost = c->conn_lost_ > 0 && c->lost_.load(std::memory_order_relaxed);
    paused = c->reading_paused_;
    size = c->wbuf_.size();
  }
  std::string state = lost ? " closed" : closing ? " closing" : "";
  return PyUnicode_FromFormat("<%s%s fd=%d read=%s write=<%s, bufsize=%zu>>",
                              Py_TYPE(self)->tp_name, state.c_str(), c->fd_,
                              lost || closing ? "idle" : paused ? "paused" : "polling",
                              size > 0 ? "polling" : "idle", size);
}

PyMethodDef transport_methods[] = {
    {"write", Transport_write, METH_O, "Write bytes-like data (any thread)."},
    {"writelines", Transport_writelines, METH_O, "Write a list of bytes-like objects."},
    {"write_eof", Transport_write_eof, METH_NOARGS,
     "Close the write end after the buffer is flushed."},
    {"can_write_eof", Transport_can_write_eof, METH_NOARGS, "True."},
    {"is_reading", Transport_is_reading, METH_NOARGS, nullptr},
    {"pause_reading", Transport_pause_reading, METH_NOARGS, nullptr},
    {"resume_reading", Transport_resume_reading, METH_NOARGS, nullptr},
    {"set_protocol", Transport_set_protocol, METH_O, nullptr},
    {"_sendfile_begin", Transport_sendfile_begin, METH_NOARGS, nullptr},
    {"_sendfile_end", Transport_sendfile_end, METH_NOARGS, nullptr},
    {"_wait_writable", Transport_wait_writable, METH_NOARGS, nullptr},
    {"_tls_timeout", Transport_tls_timeout, METH_NOARGS, nullptr},
    {"_start_tls",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Transport_start_tls)),
     METH_FASTCALL, "Become a TLS connection on the native engine (on the strand)."},
    {"_tls_info", Transport_tls_info, METH_VARARGS, "What the TLS handshake settled."},
    {"_tls_set_context", Transport_tls_set_context, METH_O, "Switch the TLS context (SNI)."},
    {"_call_serialized",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Transport_call_serialized)),
     METH_FASTCALL, "Run a callable on this connection's strand."},
    {"_run_serialized",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(Transport_run_serialized)),
     METH_FASTCALL, "A queued _call_serialized() call (the strand's side)."},
    {nullptr, nullptr, 0, nullptr},
};


PyObject* Transport_new_refused(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "SocketTransport objects are made by the loop "
                  "(create_connection, create_server, ...)");
  return nullptr;
}

PyType_Slot transport_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(Unit_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Unit_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Unit_clear)},
    {Py_tp_repr, reinterpret_cast<void*>(Transport_repr)},
    {Py_tp_methods, nullptr},  // WithUnitMethods(transport_methods), at registration.
    {Py_tp_members, unit_members},
    {Py_tp_getset, transport_getset},
    {Py_tp_new, reinterpret_cast<void*>(Transport_new_refused)},
    {Py_tp_doc, const_cast<char*>(
                    "A stream socket's transport on the parallel loop: one "
                    "connection's protocol callbacks run in order, never at "
                    "once; write() is safe from any thread.")},
    {0, nullptr},
};

PyType_Spec transport_spec = {
    "mt_asyncio._core.SocketTransport",
    sizeof(UnitObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_MANAGED_DICT,
    transport_slots,
};

// A transport object around a new connection unit for `sock` (which the
// unit owns from now on), its callbacks in a copy of `base_context` (or of
// the caller's). New reference or nullptr.
PyObject* NewTransport(PyObject* loop, PyObject* sock, Conn** out,
                       PyObject* base_context = nullptr) {
  const int fd = SocketFd(sock);
  if (fd < 0) return nullptr;
  auto* t = PyObject_GC_New(UnitObject, transport_type);
  if (t == nullptr) return nullptr;
  t->base_extra = nullptr;
  t->weakreflist = nullptr;
  auto* conn = new Conn(loop, sock, fd, base_context);
  t->unit = conn;
  conn->transport_ = Py_NewRef(reinterpret_cast<PyObject*>(t));
  PyObject_GC_Track(t);
  *out = conn;
  return reinterpret_cast<PyObject*>(t);
}

// _make_socket_transport(loop, sock, protocol, waiter, extra, server[, tls])
//
// `tls`: a TLS spec (TlsSession::FromSpec) for a connection on the native
// TLS engine; the protocol then hears connection_made after the handshake.
//
// A client-side (or connect_accepted_socket) connection. It runs on the
// calling strand if there is one; otherwise on a new strand that the
// calling task joins, so the task that reads what the protocol is fed
// never runs at the same time as the protocol's callbacks.
PyObject* MakeSocketTransport(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if ((nargs != 6 && nargs != 7) || !IsLoop(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "_make_socket_transport(loop, sock, protocol, waiter, extra, server[, tls])");
    return nullptr;
  }
  std::unique_ptr<TlsSession> tls;
  if (nargs == 7 && args[6] != Py_None) {
    tls = TlsSession::FromSpec(args[6]);
    if (tls == nullptr) return nullptr;
  }
  PyObject* loop = args[0];
  PyObject* sock = args[1];
  PyObject* protocol = args[2];
  const int buffered = PyObject_IsInstance(protocol, buffered_protocol_type);
  if (buffered < 0) return nullptr;
  PyObject* extra = MakeExtra(sock, args[4]);
  if (extra == nullptr) return nullptr;
  Conn* c;
  PyObject* transport = NewTransport(loop, sock, &c);
  if (transport == nullptr) {
    Py_DECREF(extra);
    return nullptr;
  }
  c->extra_ = extra;
  c->protocol_ = Py_NewRef(protocol);
  c->buffered_ = buffered > 0;
  c->tls_ = std::move(tls);
  if (args[3] != Py_None) c->waiter_ = Py_NewRef(args[3]);
  if (args[5] != Py_None) c->server_ = Py_NewRef(args[5]);
  c->io_ = FdTableRegisterTransport(loop, c->fd_, transport, c);
  if (c->io_ == nullptr) {
    // Never started: break the unit's hold on the object by hand.
    c->lost_.store(true);
    Py_CLEAR(c->transport_);
    Py_DECREF(transport);
    return nullptr;
  }
  SetNoDelay(c->fd_);
  Strand* strand = NewConnectionStrand(loop);
  c->set_executor(strand);
  c->strand_ = strand;
  strand->Unref();  // The unit holds it.
  c->Ref();  // The wake's; LoopWake takes its own if it defers.
  LoopWake(loop, c);
  c->Unref();
  return transport;
}

}  // namespace

int StartAcceptedTransport(PyObject* loop, PyObject* sock, PyObject* factory,
                           PyObject* server, PyObject* context,
                           runtime::scheduler::Strand* owner, PyObject* tls_spec) {
  std::unique_ptr<TlsSession> tls;
  if (tls_spec != nullptr && tls_spec != Py_None) {
    tls = TlsSession::FromSpec(tls_spec);
    if (tls == nullptr) return -1;
  }
  Conn* c;
  PyObject* transport = NewTransport(loop, sock, &c, context);
  if (transport == nullptr) return -1;
  c->tls_ = std::move(tls);
  c->extra_ = MakeExtra(sock, nullptr);
  if (c->extra_ == nullptr) PyErr_Clear();
  c->factory_ = Py_NewRef(factory);
  c->server_ = Py_NewRef(server);
  // Attached now, as stdlib's transports attach when they are made: a
  // server closed from here on waits for this connection too.
  PyObject* attached = CallMethod(server, "_attach", transport);
  if (attached == nullptr) PyErr_WriteUnraisable(server);
  Py_XDECREF(attached);
  c->attached_ = true;
  // A strand of its own under the server's owner, queued on this worker:
  // idle workers steal it, so connections from one listening socket spread
  // over every worker.
  Strand* strand = Strand::Create(LoopRuntime(loop).executor(), owner);
  ClaimForLoop(loop, strand);
  c->set_executor(strand);
  c->strand_ = strand;
  strand->Unref();
  c->Ref();
  LoopWake(loop, c);
  c->Unref();
  Py_DECREF(transport);  // The unit holds it until connection_lost.
  return 0;
}

namespace {

PyMethodDef module_methods[] = {
    {"_make_socket_transport",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(MakeSocketTransport)),
     METH_FASTCALL, "A transport for a connected stream socket."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterTransportTypes(PyObject* module) {
  if (Init() < 0) return -1;
  for (PyType_Slot& slot : transport_slots) {
    if (slot.slot == Py_tp_methods) slot.pfunc = WithUnitMethods(transport_methods);
  }
  transport_type = MakeUnitType(module, &transport_spec, {"Transport"});
  if (transport_type == nullptr) return -1;
  if (PyModule_AddObjectRef(module, "SocketTransport",
                            reinterpret_cast<PyObject*>(transport_type)) < 0) {
    return -1;
  }
  return PyModule_AddFunctions(module, module_methods);
}

}  // namespace mt::pyext
