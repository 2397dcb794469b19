#ifndef MT_PYEXT_SRC_LOOP_GATHER_H_
#define MT_PYEXT_SRC_LOOP_GATHER_H_

#include <Python.h>

namespace mt::pyext {

// asyncio.gather in C++: `_core.gather` and its outer future type
// `_core._GatheringFuture`. Children that are mt_asyncio futures report
// through a native done callback (no loop round trip, no Python frame per
// child); other futures through a bound method.
//
// Adds them to `module` (after the Future, Loop and Task types). 0 or -1.
int RegisterGather(PyObject* module);

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_LOOP_GATHER_H_
