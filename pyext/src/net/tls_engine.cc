#include "pyext/src/net/tls_engine.h"

#include <dlfcn.h>

#include <atomic>

#include "pyext/src/common/py_mutex.h"

namespace mt::pyext::tls {
namespace {

std::atomic<const MtTlsEngine*> engine{nullptr};
// Set with the engine; never released.
PyObject* make_error = nullptr;
PyObject* on_handshake = nullptr;
PyMutex load_mu{};

// AddressSanitizer's runtime refuses RTLD_DEEPBIND (it must see every
// allocation). Under it (the extension's ASan test runs) the engine is
// loaded RTLD_LOCAL alone, which keeps BoringSSL out of the global scope
// but lets an earlier global OpenSSL capture its calls; those runs import
// ssl the default, local way.
bool UnderAsan() { return dlsym(RTLD_DEFAULT, "__asan_init") != nullptr; }

PyObject* LoadEngine(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[1]) ||
      !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError,
                    "_tls_load_engine(path: str, make_error: callable, on_handshake: callable)");
    return nullptr;
  }
  PyMutexGuard lock(load_mu);
  if (const MtTlsEngine* loaded = engine.load(std::memory_order_acquire)) {
    return PyUnicode_FromString(loaded->library_version());
  }
  const char* path = PyUnicode_AsUTF8(args[0]);
  if (path == nullptr) return nullptr;
  int flags = RTLD_NOW | RTLD_LOCAL;
  if (!UnderAsan()) flags |= RTLD_DEEPBIND;
  void* handle = dlopen(path, flags);  // Never closed: contexts live on.
  if (handle == nullptr) {
    PyErr_Format(PyExc_ImportError, "cannot load the TLS engine: %s", dlerror());
    return nullptr;
  }
  using Entry = const MtTlsEngine* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, MT_TLS_ENGINE_SYMBOL));
  const MtTlsEngine* table = entry != nullptr ? entry() : nullptr;
  if (table == nullptr || table->abi != MT_TLS_ENGINE_ABI ||
      table->struct_size < sizeof(MtTlsEngine)) {
    PyErr_Format(PyExc_ImportError, "%s is not a TLS engine of ABI %d", path,
                 MT_TLS_ENGINE_ABI);
    return nullptr;
  }
  make_error = Py_NewRef(args[1]);
  on_handshake = Py_NewRef(args[2]);
  engine.store(table, std::memory_order_release);
  return PyUnicode_FromString(table->library_version());
}

PyMethodDef methods[] = {
    {"_tls_load_engine",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(LoadEngine)), METH_FASTCALL,
     "Load the TLS engine library privately (once); its BoringSSL version."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

const MtTlsEngine* Engine() { return engine.load(std::memory_order_acquire); }

PyObject* MakeError(const MtTlsError& err, const char* server_hostname) {
  PyObject* exc = PyObject_CallFunction(
      make_error, "isssls", err.kind, err.library, err.reason_name, err.message,
      err.verify_code, server_hostname);
  if (exc == nullptr) {
    // The factory failed: its own exception says why.
    exc = PyErr_GetRaisedException();
  }
  return exc;
}

PyObject* OnHandshake(PyObject* transport) {
  return PyObject_CallOneArg(on_handshake, transport);
}

PyObject* RaiseError(const MtTlsError& err) {
  PyObject* exc = MakeError(err);
  PyErr_SetRaisedException(exc);
  return nullptr;
}

int RegisterTlsEngine(PyObject* module) { return PyModule_AddFunctions(module, methods); }

}  // namespace mt::pyext::tls
