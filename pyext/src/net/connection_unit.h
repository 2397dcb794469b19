#ifndef MT_PYEXT_SRC_NET_CONNECTION_UNIT_H_
#define MT_PYEXT_SRC_NET_CONNECTION_UNIT_H_

#include <Python.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "runtime/io/scheduled_io.h"
#include "runtime/scheduler/strand.h"
#include "runtime/task/task.h"

namespace mt::pyext::transport {

// The kinds of socket transport, for the count of those open.
enum class ConnectionKind { kStream, kDatagram };

// Socket transports of `kind` open now: made and not yet lost (their
// socket closed) — mt_asyncio.metrics' mt_asyncio_transports_open.
std::int64_t OpenConnections(ConnectionKind kind);

// What a stream connection (transport.cc) and a datagram endpoint
// (datagram.cc) share: the runtime unit on the connection's strand that
// delivers every protocol callback, the state guarded by one PyMutex, and
// closing, aborting, fatal errors and pause/resume of writing, which both
// do by stdlib's rules. A subclass owns its write buffer.
class ConnectionUnit : public runtime::task::Task {
 public:
  static constexpr std::size_t kDefaultHighWater = 64 * 1024;

  // The callbacks' context is a copy of `base_context` (borrowed), or of
  // the caller's when it is nullptr.
  ConnectionUnit(ConnectionKind kind, PyObject* loop, PyObject* sock, int fd,
                 PyObject* base_context = nullptr);
  ~ConnectionUnit() override;

  // One run on the strand: makes the connection the first time
  // (MakeConnection, then connection_made's waiter), serves what the
  // reactor reported (Serve), delivers pause/resume around it, and ends
  // with connection_lost once it is due.
  bool Poll() final;
  // The runtime stopped scheduling: release the fd and what we hold, with
  // connection_lost if we still can (attached) and ever made the
  // connection.
  void OnCancel() final;

  // close(): connection_lost(None) once the buffer is flushed. Any thread.
  // A TLS connection first says close_notify (transport.cc).
  virtual void Close();
  // abort() or a fatal error: the buffer is dropped and
  // connection_lost(exc) is due (`exc` consumed; nullptr: None). Any
  // thread.
  void ForceClose(PyObject* exc);
  // close()/abort() from Python: connection_lost runs in a copy of the
  // caller's context, as stdlib's call_soon(_call_connection_lost) does.
  // Only the first request counts.
  void RememberLostContext();
  // transport._released(): a future done once the connection has let go of
  // its socket (taken it off the reactor and closed it). New reference.
  PyObject* Released();
  // Reports `exc` (consumed) as stdlib's _fatal_error does (an OSError
  // only in debug mode), then force-closes with it. `self` is the
  // transport object, borrowed, when called off the strand (transport_
  // may be cleared there meanwhile). Attached.
  void Fatal(PyObject* exc, const char* message, PyObject* self = nullptr);
  // On the strand: pause_writing/resume_writing when the wanted state
  // differs from what the protocol was last told.
  void SyncPause();
  // A closing connection whose buffer is empty: connection_lost(None) is
  // due (after SyncPause(), so a resume_writing() could still write).
  void FinishCloseIfDrained();
  // set_write_buffer_limits(): pauses at once if the buffer is now above
  // `high` (before returning when the caller's strand excludes ours).
  void SetWriteLimits(std::size_t high, std::size_t low);
  // Whether the caller runs on this connection's strand or an ancestor of
  // it: then no callback of the connection can run meanwhile.
  bool OnMyStrand() const;
  PyObject* Protocol();  // New reference, or nullptr once lost.
  bool LostPending();
  // What the transports' Python methods of the same names answer.
  PyObject* GetProtocol();  // get_protocol(): None once lost.
  PyObject* IsClosing();
  PyObject* GetWriteBufferSize();
  PyObject* GetWriteBufferLimits();

  // --- set up before the first wake (one thread) ---
  const ConnectionKind kind_;
  PyObject* const loop_;
  PyObject* const sock_;
  const int fd_;
  PyObject* transport_ = nullptr;  // Strong from the first wake until lost.
  PyObject* extra_ = nullptr;      // dict; written once before publication.
  PyObject* waiter_ = nullptr;     // Resolved after connection_made.
  // The contextvars context the protocol's callbacks run in: a copy of
  // the one current when the connection was made (create_connection's
  // caller's; for an accepted one, the server's when it started serving),
  // as stdlib's callbacks run in the contexts its call_soon/add_reader
  // copied then. One per connection: its callbacks never overlap.
  PyObject* context_ = nullptr;
  runtime::io::ScheduledIo* io_ = nullptr;
  runtime::scheduler::Strand* strand_ = nullptr;  // Borrowed: the executor.

  // --- any thread, under mu_ ---
  PyMutex mu_{};
  PyObject* protocol_ = nullptr;
  std::size_t high_water_ = kDefaultHighWater;
  std::size_t low_water_ = kDefaultHighWater / 4;
  bool closing_ = false;
  // A closing TLS connection waits for the peer's close_notify: an empty
  // buffer does not finish the close yet.
  bool awaiting_peer_close_ = false;
  bool want_paused_ = false;  // Buffer above the high-water mark.
  int conn_lost_ = 0;
  bool lost_pending_ = false;  // connection_lost is due.
  PyObject* lost_exc_ = nullptr;
  PyObject* lost_context_ = nullptr;  // RememberLostContext's copy.
  PyObject* released_ = nullptr;      // Released()'s future, once asked for.
  bool socket_released_ = false;

  // --- the unit's own (on the strand) ---
  bool made_ = false;
  bool paused_delivered_ = false;
  std::atomic<bool> lost_{false};

 protected:
  // Registers what is left to register and calls connection_made; false
  // if the connection cannot be made (then it is closed, unmade).
  virtual bool MakeConnection() = 0;
  // Flushes and reads as the reactor allows.
  virtual void Serve() = 0;
  // Deregisters, drops the buffer, closes the socket, calls
  // connection_lost (if made), then AfterLost(), and lets go of the Python
  // object. Once.
  void DeliverLost();
  // close() with nothing buffered, abort(): the peer is sent the end of
  // the stream at once (see the definition). Under mu_.
  void SendFinLocked();
  // What a type releases after connection_lost (default: nothing).
  virtual void AfterLost() {}
  // Whether the protocol heard connection_made (a TLS connection's only
  // after its handshake): then it hears connection_lost.
  virtual bool ProtocolMade() const { return made_; }
  // Just before connection_lost(exc) (`exc` borrowed, nullptr: None).
  virtual void BeforeLost(PyObject* exc) { (void)exc; }
  // Under mu_.
  virtual bool BufferEmptyLocked() const = 0;
  virtual std::size_t BufferSizeLocked() const = 0;
  // Under mu_: empties the buffer; Python references it held go to
  // `drop`, released by the caller after unlocking.
  virtual void ClearBufferLocked(std::vector<PyObject*>& drop) = 0;
};

// The Python object of both transport types: a reference to its unit.
struct UnitObject {
  PyObject_HEAD
  // The one slot of asyncio.BaseTransport (`_extra`), which the types
  // derive from (MakeUnitType); unused by ours (get_extra_info reads
  // extra_), kept so the layout starts as the base's does.
  PyObject* base_extra;
  ConnectionUnit* unit;  // One reference; nullptr once deallocated.
  PyObject* weakreflist;
};

inline ConnectionUnit* UnitOf(PyObject* self) {
  return reinterpret_cast<UnitObject*>(self)->unit;
}

// Makes a transport type from `spec` deriving from the classes of
// asyncio.transports named in `base_names` (as stdlib's transports do), so
// that isinstance() checks written for stdlib's transports hold for ours.
// If a class's layout is not the one UnitObject starts with (a different
// Python), the type derives from object instead. New reference, or nullptr
// with an error.
PyTypeObject* MakeUnitType(PyObject* module, PyType_Spec* spec,
                           std::initializer_list<const char*> base_names);

// The slots and methods both transport types share; each type's tables
// list them beside its own.
// The types carry an instance dict, as stdlib's transports (Python
// classes) do: a test can patch a method on one transport
// (mock.patch.object(transport, "write")), a library can set attributes.
int Unit_traverse(PyObject* self, visitproc visit, void* arg);
int Unit_clear(PyObject* self);
void Unit_dealloc(PyObject* self);
extern PyMemberDef unit_members[];
// `__dict__` (the datagram type; the stream type lists it in its own).
extern PyGetSetDef unit_getset[];
// A type's own methods (terminated) followed by the shared ones, in
// storage that lives as long as the process (the type keeps pointing at
// it).
PyMethodDef* WithUnitMethods(const PyMethodDef* own);

}  // namespace mt::pyext::transport

#endif  // MT_PYEXT_SRC_NET_CONNECTION_UNIT_H_
