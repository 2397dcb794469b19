#ifndef MT_PYEXT_SRC_COMMON_KWARGS_H_
#define MT_PYEXT_SRC_COMMON_KWARGS_H_

#include <Python.h>

namespace mt::pyext {

// The keyword arguments of a vectorcall that accepts only `context=`
// (call_soon, call_later, call_at, add_done_callback). Sets *context to
// the value given (borrowed) or leaves it as it was; any other keyword is
// the TypeError stdlib raises. 0, or -1 with the error set.
inline int ParseContextKeyword(const char* method, PyObject* const* kwvalues,
                               PyObject* kwnames, PyObject** context) {
  if (kwnames == nullptr) return 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(name, "context") != 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                   method, name);
      return -1;
    }
    *context = kwvalues[i];
  }
  return 0;
}

}  // namespace mt::pyext

#endif  // MT_PYEXT_SRC_COMMON_KWARGS_H_
