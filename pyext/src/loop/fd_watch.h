#ifndef MT_PYEXT_SRC_LOOP_FD_WATCH_H_
#define MT_PYEXT_SRC_LOOP_FD_WATCH_H_

#include <Python.h>

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "runtime/io/scheduled_io.h"
#include "runtime/task/task.h"

namespace mt::pyext {

class FdWatcher;

// One file descriptor a loop has registered with the runtime's reactor:
// either owned by a transport, or watched by add_reader/add_writer
// callbacks (a selector loop's readers and writers), never both: asyncio
// refuses add_reader on a transport's fd, and so do we.
struct FdEntry {
  runtime::io::ScheduledIo* io = nullptr;
  PyObject* transport = nullptr;  // Borrowed; set while a transport owns it.
  // The transport's unit (borrowed: it unregisters before it goes), which
  // a closing loop cancels.
  runtime::task::Task* owner = nullptr;
  FdWatcher* watchers[2] = {nullptr, nullptr};  // One reference each.
};

// A loop's registered file descriptors (LoopFds()).
struct FdTable {
  std::mutex mu;
  absl::flat_hash_map<int, FdEntry> entries;  // Guarded by mu.
};

// Registers `fd` for a transport whose unit is `owner` (both borrowed: the
// transport unregisters before it goes). Raises RuntimeError if
// add_reader/add_writer watch it or another transport owns it, OSError if
// the reactor refuses it. Returns the reactor record, or nullptr with an
// error.
runtime::io::ScheduledIo* FdTableRegisterTransport(PyObject* loop, int fd,
                                                   PyObject* transport,
                                                   runtime::task::Task* owner);
// Releases a transport's fd from the reactor (before the fd is closed).
void FdTableUnregisterTransport(PyObject* loop, int fd);
// A closing loop: drops every watcher (their handles are cancelled) and
// cancels every transport's unit, which closes its socket (a one-thread
// loop's transports would wait for the garbage collector; ours are held by
// the reactor, so they would never go).
void FdTableCloseAll(PyObject* loop);

// Adds the loop's module functions _fd_watch/_fd_unwatch/_fd_transport.
int RegisterFdWatch(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_FD_WATCH_H_
