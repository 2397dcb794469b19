#include "pyext/src/admin/register.h"

#include <string>

#include "pyext/src/admin/admin_service.h"
#include "pyext/src/admin/stall_reports.h"
#include "pyext/src/common/runtime_holder.h"
#include "runtime/admin/admin_abi.h"
#include "runtime/metrics/histogram.h"

namespace mt::pyext {
namespace {

// _admin_call(method, request="{}") -> (status code, bytes): one call
// through the admin boundary, as the control plane would make it.
PyObject* Module_admin_call(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"method", "request", nullptr};
  const char* method;
  Py_ssize_t method_size;
  const char* request = "{}";
  Py_ssize_t request_size = 2;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s#|s#:_admin_call",
                                   const_cast<char**>(kwlist), &method,
                                   &method_size, &request, &request_size)) {
    return nullptr;
  }
  std::string body;
  const int code = AdminCall(std::string(method, method_size),
                             std::string(request, request_size), &body);
  return Py_BuildValue("(iy#)", code, body.data(),
                       static_cast<Py_ssize_t>(body.size()));
}

PyObject* Module_set_admin_handler(PyObject*, PyObject* fn) {
  if (fn != Py_None && !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError,
                    "the admin handler must be callable or None");
    return nullptr;
  }
  SetAdminHandler(fn);
  Py_RETURN_NONE;
}

// One histogram as (upper bounds in seconds, per-bucket counts with +Inf
// last, sum in seconds).
PyObject* HistogramTuple(const runtime::metrics::DurationHistogram& histogram) {
  using runtime::metrics::DurationHistogram;
  const DurationHistogram::Totals totals = histogram.Read();
  PyObject* bounds = PyTuple_New(DurationHistogram::kFiniteBuckets);
  PyObject* counts = PyTuple_New(DurationHistogram::kBuckets);
  if (bounds == nullptr || counts == nullptr) {
    Py_XDECREF(bounds);
    Py_XDECREF(counts);
    return nullptr;
  }
  for (int i = 0; i < DurationHistogram::kBuckets; ++i) {
    if (i < DurationHistogram::kFiniteBuckets) {
      PyTuple_SET_ITEM(
          bounds, i,
          PyFloat_FromDouble(DurationHistogram::UpperBoundNs(i) / 1e9));
    }
    PyTuple_SET_ITEM(counts, i, PyLong_FromUnsignedLongLong(totals.counts[i]));
  }
  if (PyErr_Occurred()) {
    Py_DECREF(bounds);
    Py_DECREF(counts);
    return nullptr;
  }
  return Py_BuildValue("(NNd)", bounds, counts, totals.sum_ns / 1e9);
}

// _task_histograms() -> {"step": ..., "schedule_delay": ...}: the
// process's task histograms (runtime/metrics/histogram.h), each as
// HistogramTuple gives it.
PyObject* Module_task_histograms(PyObject*, PyObject*) {
  return Py_BuildValue(
      "{sNsN}", "step", HistogramTuple(runtime::metrics::TaskStepDurations()),
      "schedule_delay", HistogramTuple(runtime::metrics::TaskScheduleDelays()));
}

PyMethodDef module_functions[] = {
    {"_admin_call",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)()>(Module_admin_call)),
     METH_VARARGS | METH_KEYWORDS,
     "One call through the admin boundary: (status code, JSON or message)."},
    {"_task_histograms", Module_task_histograms, METH_NOARGS,
     "The task step and scheduling delay histograms: (bounds, counts, sum)."},
    {"_set_admin_handler", Module_set_admin_handler, METH_O,
     "Install fn(method, request_json) -> str for loop and task methods."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

int RegisterAdminPackage(PyObject* module) {
  if (PyModule_AddFunctions(module, module_functions) < 0) return -1;
  if (RegisterStallReports(module) < 0) return -1;
  RuntimeHolder::SetStallSink(PushStallReport);
  // The control extension reaches the runtime only through this capsule:
  // a versioned table of C functions (runtime/admin/admin_abi.h).
  PyObject* abi = PyCapsule_New(const_cast<MtAdminAbi*>(AdminAbi()),
                                kMtAdminAbiCapsuleName, nullptr);
  return PyModule_Add(module, "_admin_abi", abi);
}

}  // namespace mt::pyext
