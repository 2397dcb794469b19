#ifndef MT_PYEXT_SRC_LOOP_STRANDS_H_
#define MT_PYEXT_SRC_LOOP_STRANDS_H_

#include <Python.h>

#include "runtime/scheduler/strand.h"

namespace mt::pyext {

// A new strand for a connection that the calling code makes, as a child of
// the strand that code owns. Code not on a strand but in a task (the usual
// asyncio.run() main task) joins a new strand first, made for it, so its
// next steps exclude the connection's callbacks (see
// runtime/scheduler/strand.h); so do the tasks it starts from then on. One
// of those tasks, on the strand it inherited, joins a strand of its own
// under it the same way. New reference.
runtime::scheduler::Strand* NewConnectionStrand(PyObject* loop);
// Like NewConnectionStrand, but the strand the calling code runs on (or
// joins) itself. New reference, or nullptr outside any task or strand.
runtime::scheduler::Strand* OwnerStrand(PyObject* loop);

// Adds _serial_task, _connection_strand, _on_strand and
// _adopt_serial_strand (strands.cc). 0 or -1.
int RegisterStrandFunctions(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_STRANDS_H_
