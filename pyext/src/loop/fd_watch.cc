// add_reader / add_writer on the runtime's reactor.
//
// A watcher is a runtime unit that waits for its direction's readiness,
// runs its Handle, and, as a selector loop's reader does, runs it again
// while the fd stays ready (level-triggered over the reactor's edge-
// triggered registration). Its handle runs on a worker, in the callback's
// context, never twice at once.

#include "pyext/src/loop/fd_watch.h"

#include <poll.h>
#include <sys/stat.h>

#include <atomic>
#include <optional>
#include <utility>

#include "pyext/src/common/py_ref.h"
#include "pyext/src/loop/loop.h"
#include "runtime/io/driver.h"
#include "runtime/runtime.h"

namespace mt::pyext {

namespace io = runtime::io;
namespace rt_task = runtime::task;

class FdWatcher final : public rt_task::Task {
 public:
  FdWatcher(PyObject* loop, io::ScheduledIo* io, io::Direction dir, PyObject* handle)
      : Task(/*scheduled=*/false),
        loop_(Py_NewRef(loop)),
        io_(io),
        generation_(io->generation()),
        dir_(dir),
        handle_(Py_NewRef(handle)) {
    ClaimForLoop(loop, this);
  }
  ~FdWatcher() override {
    DecRefAnyThread(handle_);
    DecRefAnyThread(loop_);
  }

  bool Poll() override;
  // remove_reader/remove_writer, a replacement, or the loop closing: the
  // handle is cancelled and the unit finishes at its next run.
  void Remove() {
    removed_.store(true, std::memory_order_release);
    LoopCancelHandle(handle_);
    Cancel();
  }
  PyObject* handle() const { return handle_; }

 private:
  bool StillReady() const;

  PyObject* const loop_;
  // The record is recycled once the watcher leaves the table (possibly for
  // the next fd with the same number, made while this unit is still
  // finishing a run on another worker): every wait checks the generation.
  io::ScheduledIo* const io_;
  const std::uint32_t generation_;
  const io::Direction dir_;
  PyObject* const handle_;
  std::atomic<bool> removed_{false};
  bool armed_once_ = false;  // Only its own runs touch it.
};

bool FdWatcher::Poll() {
  if (removed_.load(std::memory_order_acquire)) return true;
  if (LoopDeferIfStopped(loop_, this)) return false;
  io::IoDriver& driver = LoopRuntime(loop_).driver().io();
  std::optional<io::ReadyEvent> ready = driver.PollReady(io_, dir_, this, generation_);
  if (!ready) {
    armed_once_ = true;
    return false;  // Armed: the reactor wakes us.
  }
  if (!armed_once_) {
    // The run add_reader()/add_writer() queued found the fd ready at once.
    // asyncio calls back only from a later poll, after what was already
    // scheduled (a cancel of the sock_accept() this watcher serves, say:
    // CPython's test_sock_accept_racing), so go behind it first.
    armed_once_ = true;
    Wake(rt_task::ScheduleKind::kYield);
    return false;
  }
  if (LoopEnterOnWorker(loop_) < 0) {
    PyErr_WriteUnraisable(loop_);
    return true;
  }
  StopAfterCallback stop_after(loop_);
  SlowCallbackCheck check(loop_);
  LoopRunHandle(loop_, handle_);
  check.Done(handle_);
  if (removed_.load(std::memory_order_acquire)) return true;
  if (StillReady()) {
    Wake(rt_task::ScheduleKind::kYield);  // Again, after what else waits.
    return false;
  }
  // Drained: forget what we saw, unless a newer event arrived meanwhile,
  // and arm; a readiness that slipped in between is caught by PollReady.
  driver.ClearReadiness(io_, dir_, *ready);
  if (driver.PollReady(io_, dir_, this, generation_)) Wake(rt_task::ScheduleKind::kYield);
  return false;
}

bool FdWatcher::StillReady() const {
  if (io_->generation() != generation_) return false;
  pollfd p{};
  p.fd = io_->fd();
  if (p.fd < 0) return false;
  p.events = dir_ == io::Direction::kRead ? POLLIN : POLLOUT;
  return poll(&p, 1, 0) > 0 && (p.revents & (p.events | POLLHUP | POLLERR)) != 0;
}

namespace {

// What the reactor would refuse, with the errors a selector loop raises.
int CheckFd(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) {
    errno = EPERM;  // What epoll_ctl says of a regular file.
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  return 0;
}

io::ScheduledIo* RegisterLocked(PyObject* loop, int fd) {
  absl::StatusOr<io::ScheduledIo*> io = LoopRuntime(loop).driver().io().Register(fd);
  if (!io.ok()) {
    PyErr_Format(PyExc_OSError, "cannot register fd %d with the reactor: %s", fd,
                 std::string(io.status().message()).c_str());
    return nullptr;
  }
  return *io;
}

void DeregisterIfUnused(PyObject* loop, FdTable& table, int fd) {
  auto it = table.entries.find(fd);
  if (it == table.entries.end()) return;
  FdEntry& e = it->second;
  if (e.transport != nullptr || e.watchers[0] != nullptr || e.watchers[1] != nullptr) {
    return;
  }
  (void)LoopRuntime(loop).driver().io().Deregister(e.io);
  table.entries.erase(it);
}

int ParseFdArgs(PyObject* const* args, Py_ssize_t nargs, Py_ssize_t want,
                const char* name, int* fd, bool* writing) {
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments", name, want);
    return -1;
  }
  if (!IsLoop(args[0])) {
    PyErr_Format(PyExc_TypeError, "%s() needs an mt_asyncio loop", name);
    return -1;
  }
  *fd = PyLong_AsInt(args[1]);
  if (*fd == -1 && PyErr_Occurred()) return -1;
  if (*fd < 0) {
    PyErr_Format(PyExc_ValueError, "Invalid file descriptor: %d", *fd);
    return -1;
  }
  const int w = PyObject_IsTrue(args[2]);
  if (w < 0) return -1;
  *writing = w != 0;
  return 0;
}

PyObject* TransportConflict(int fd, PyObject* transport) {
  PyErr_Format(PyExc_RuntimeError, "File descriptor %d is used by transport %R", fd,
               transport);
  return nullptr;
}

// _fd_watch(loop, fd, writing, callback, args, context) -> Handle
PyObject* FdWatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  int fd;
  bool writing;
  if (ParseFdArgs(args, nargs, 6, "_fd_watch", &fd, &writing) < 0) return nullptr;
  PyObject* loop = args[0];
  if (!PyTuple_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "_fd_watch() args must be a tuple");
    return nullptr;
  }
  if (CheckFd(fd) < 0) return nullptr;
  PyObject* handle = LoopNewHandle(loop, args[3], args[4], args[5]);
  if (handle == nullptr) return nullptr;
  FdTable& table = LoopFds(loop);
  const int d = writing ? 1 : 0;
  FdWatcher* previous = nullptr;
  FdWatcher* watcher = nullptr;
  PyObject* conflict = nullptr;
  {
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.entries.find(fd);
    if (it != table.entries.end() && it->second.transport != nullptr) {
      conflict = Py_NewRef(it->second.transport);
    } else {
      if (it == table.entries.end()) {
        io::ScheduledIo* io = RegisterLocked(loop, fd);
        if (io == nullptr) {
          Py_DECREF(handle);
          return nullptr;
        }
        it = table.entries.emplace(fd, FdEntry{}).first;
        it->second.io = io;
      }
      watcher = new FdWatcher(loop, it->second.io,
                              writing ? io::Direction::kWrite : io::Direction::kRead,
                              handle);
      watcher->set_executor(LoopExecutor(loop));
      previous = std::exchange(it->second.watchers[d], watcher);
      watcher->Ref();  // The table's.
    }
  }
  if (conflict != nullptr) {  // Outside the lock: repr() runs Python.
    TransportConflict(fd, conflict);
    Py_DECREF(conflict);
    Py_DECREF(handle);
    return nullptr;
  }
  if (previous != nullptr) {
    previous->Remove();
    previous->Unref();
  }
  // Its first run checks readiness and arms; the creator's reference goes
  // with the wake (or is dropped if the loop defers it).
  LoopWake(loop, watcher);
  watcher->Unref();
  return handle;
}

// _fd_unwatch(loop, fd, writing) -> bool: whether a watcher was removed.
PyObject* FdUnwatch(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  int fd;
  bool writing;
  if (ParseFdArgs(args, nargs, 3, "_fd_unwatch", &fd, &writing) < 0) return nullptr;
  PyObject* loop = args[0];
  FdTable& table = LoopFds(loop);
  FdWatcher* removed = nullptr;
  PyObject* conflict = nullptr;
  {
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.entries.find(fd);
    if (it != table.entries.end()) {
      if (it->second.transport != nullptr) {
        conflict = Py_NewRef(it->second.transport);
      } else {
        removed = std::exchange(it->second.watchers[writing ? 1 : 0], nullptr);
        // Deregister before the caller closes the fd, as a selector
        // unregisters it.
        DeregisterIfUnused(loop, table, fd);
      }
    }
  }
  if (conflict != nullptr) {
    TransportConflict(fd, conflict);
    Py_DECREF(conflict);
    return nullptr;
  }
  if (removed == nullptr) Py_RETURN_FALSE;
  removed->Remove();
  removed->Unref();
  Py_RETURN_TRUE;
}

// _fd_transport(loop, fd) -> the transport that owns fd, or None.
PyObject* FdTransport(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !IsLoop(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_fd_transport(loop, fd)");
    return nullptr;
  }
  const int fd = PyLong_AsInt(args[1]);
  if (fd == -1 && PyErr_Occurred()) return nullptr;
  FdTable& table = LoopFds(args[0]);
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.entries.find(fd);
  if (it == table.entries.end() || it->second.transport == nullptr) Py_RETURN_NONE;
  return Py_NewRef(it->second.transport);
}

PyMethodDef fd_methods[] = {
    {"_fd_watch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FdWatch)),
     METH_FASTCALL, "Run a Handle whenever fd is readable (or writable)."},
    {"_fd_unwatch",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FdUnwatch)),
     METH_FASTCALL, "Stop watching fd in one direction; True if it was."},
    {"_fd_transport",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(FdTransport)),
     METH_FASTCALL, "The transport that owns fd, or None."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

io::ScheduledIo* FdTableRegisterTransport(PyObject* loop, int fd, PyObject* transport,
                                          rt_task::Task* owner) {
  FdTable& table = LoopFds(loop);
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.entries.find(fd);
  if (it != table.entries.end()) {
    PyErr_Format(PyExc_RuntimeError,
                 "File descriptor %d is used by another transport or watched "
                 "by add_reader()/add_writer()",
                 fd);
    return nullptr;
  }
  io::ScheduledIo* io = RegisterLocked(loop, fd);
  if (io == nullptr) return nullptr;
  FdEntry& e = table.entries[fd];
  e.io = io;
  e.transport = transport;
  e.owner = owner;
  return io;
}

void FdTableUnregisterTransport(PyObject* loop, int fd) {
  FdTable& table = LoopFds(loop);
  std::lock_guard<std::mutex> lock(table.mu);
  auto it = table.entries.find(fd);
  if (it == table.entries.end() || it->second.transport == nullptr) return;
  it->second.transport = nullptr;
  it->second.owner = nullptr;
  DeregisterIfUnused(loop, table, fd);
}

void FdTableCloseAll(PyObject* loop) {
  FdTable& table = LoopFds(loop);
  std::vector<FdWatcher*> removed;
  std::vector<rt_task::Task*> owners;
  {
    std::lock_guard<std::mutex> lock(table.mu);
    std::vector<int> fds;
    for (auto& [fd, e] : table.entries) {
      for (FdWatcher*& w : e.watchers) {
        if (w != nullptr) removed.push_back(std::exchange(w, nullptr));
      }
      if (e.owner != nullptr) {
        e.owner->Ref();  // Until cancelled below, outside the lock.
        owners.push_back(e.owner);
      }
      fds.push_back(fd);
    }
    for (int fd : fds) DeregisterIfUnused(loop, table, fd);
  }
  for (FdWatcher* w : removed) {
    w->Remove();
    w->Unref();
  }
  for (rt_task::Task* owner : owners) {
    owner->Cancel();  // Its cancel path closes the socket.
    owner->Unref();
  }
}

int RegisterFdWatch(PyObject* module) { return PyModule_AddFunctions(module, fd_methods); }

}  // namespace mt::pyext
