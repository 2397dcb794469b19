#include "pyext/src/net/tls_context.h"

#include <sys/stat.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "pyext/src/net/tls_engine.h"

namespace mt::pyext::tls {
namespace {

// A key log file shared by a context's connections, which log from any
// worker at once: one line at a time, flushed, as the ssl module's.
struct KeylogFile {
  std::mutex mu;
  std::FILE* file = nullptr;
  ~KeylogFile() {
    if (file != nullptr) std::fclose(file);
  }
};

struct TlsContextObject {
  PyObject_HEAD
  MtTlsCtx* ctx;
  KeylogFile* keylog;
  PyObject* sni;  // sni(transport, server_name) -> None or an alert number.
  PyObject* weakreflist;
};

PyTypeObject* context_type = nullptr;
thread_local HandshakeScope* current_scope = nullptr;

TlsContextObject* Self(PyObject* o) { return reinterpret_cast<TlsContextObject*>(o); }

void WriteKeylog(void* arg, const char* line) {
  auto* log = static_cast<KeylogFile*>(arg);
  std::lock_guard<std::mutex> lock(log->mu);
  if (log->file == nullptr) return;
  std::fprintf(log->file, "%s\n", line);
  std::fflush(log->file);
}

// The engine's SNI hook: calls the context's Python hook with the
// connection's transport, the lock around the engine let go meanwhile.
int ServerName(void* arg, MtTlsConn*, const char* server_name) {
  auto* self = static_cast<TlsContextObject*>(arg);
  HandshakeScope* scope = HandshakeScope::Current();
  if (self->sni == nullptr || scope == nullptr) return 0;
  if (scope->lock() != nullptr) PyMutex_Unlock(scope->lock());
  int alert = 0;
  PyObject* name = server_name != nullptr ? PyUnicode_FromString(server_name) : Py_NewRef(Py_None);
  PyObject* res = name != nullptr ? PyObject_CallFunctionObjArgs(self->sni, scope->transport(),
                                                                  name, nullptr)
                                  : nullptr;
  Py_XDECREF(name);
  if (res == nullptr) {
    PyErr_WriteUnraisable(self->sni);
    alert = 40;  // handshake_failure, as the ssl module answers a failed callback.
  } else if (res != Py_None) {
    alert = static_cast<int>(PyLong_AsLong(res));
    if (alert == -1 && PyErr_Occurred()) {
      PyErr_WriteUnraisable(self->sni);
      alert = 80;  // internal_error
    }
  }
  Py_XDECREF(res);
  if (scope->lock() != nullptr) PyMutex_Lock(scope->lock());
  return alert;
}

PyObject* Context_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  if (PyTuple_GET_SIZE(args) != 0 || (kwds != nullptr && PyDict_GET_SIZE(kwds) != 0)) {
    PyErr_SetString(PyExc_TypeError, "TLSContextCore() takes no arguments");
    return nullptr;
  }
  const MtTlsEngine* e = Engine();
  if (e == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "the TLS engine is not loaded (_tls_load_engine)");
    return nullptr;
  }
  MtTlsError err{};
  MtTlsCtx* ctx = e->ctx_new(&err);
  if (ctx == nullptr) return RaiseError(err);
  auto* self = Self(type->tp_alloc(type, 0));
  if (self == nullptr) {
    e->ctx_unref(ctx);
    return nullptr;
  }
  self->ctx = ctx;
  e->ctx_set_server_name_hook(ctx, ServerName, self);
  return reinterpret_cast<PyObject*>(self);
}

int Context_traverse(PyObject* o, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(o));
  Py_VISIT(Self(o)->sni);
  return 0;
}

int Context_clear(PyObject* o) {
  Py_CLEAR(Self(o)->sni);
  return 0;
}

void Context_dealloc(PyObject* o) {
  PyObject_GC_UnTrack(o);
  TlsContextObject* self = Self(o);
  if (self->weakreflist != nullptr) PyObject_ClearWeakRefs(o);
  Py_CLEAR(self->sni);
  if (self->ctx != nullptr) {
    // Connections may hold the engine context longer than this object:
    // its hooks must not point here any more.
    Engine()->ctx_set_server_name_hook(self->ctx, nullptr, nullptr);
    Engine()->ctx_set_keylog(self->ctx, nullptr, nullptr);
    Engine()->ctx_unref(self->ctx);
  }
  // A key log still named by a live connection's context would be written
  // after this; contexts outlive their connections' handshakes in
  // practice, and the hook was cleared above.
  delete self->keylog;
  PyTypeObject* type = Py_TYPE(o);
  type->tp_free(o);
  Py_DECREF(type);
}

// Each setter: the engine's answer, raised as the ssl module's exception.
PyObject* Check(int result, const MtTlsError& err) {
  if (result != MT_TLS_OK) return RaiseError(err);
  Py_RETURN_NONE;
}

bool Bytes(PyObject* o, const char** data, Py_ssize_t* len) {
  if (!PyBytes_Check(o)) {
    PyErr_Format(PyExc_TypeError, "expected bytes, not %s", Py_TYPE(o)->tp_name);
    return false;
  }
  *data = PyBytes_AS_STRING(o);
  *len = PyBytes_GET_SIZE(o);
  return true;
}

PyObject* Context_use_cert_chain(PyObject* o, PyObject* args) {
  PyObject *chain, *key, *password;
  if (!PyArg_ParseTuple(args, "OOO:use_cert_chain", &chain, &key, &password)) return nullptr;
  const char *c, *k, *p = nullptr;
  Py_ssize_t cl, kl, pl = 0;
  if (!Bytes(chain, &c, &cl) || !Bytes(key, &k, &kl)) return nullptr;
  if (password != Py_None && !Bytes(password, &p, &pl)) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_use_cert_chain(Self(o)->ctx, c, cl, k, kl, p, pl, &err), err);
}

PyObject* Context_add_trust_pem(PyObject* o, PyObject* pem) {
  const char* d;
  Py_ssize_t n;
  if (!Bytes(pem, &d, &n)) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_add_trust_pem(Self(o)->ctx, d, n, &err), err);
}

PyObject* Context_add_trust_der(PyObject* o, PyObject* der) {
  const char* d;
  Py_ssize_t n;
  if (!Bytes(der, &d, &n)) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_add_trust_der(Self(o)->ctx, reinterpret_cast<const uint8_t*>(d),
                                           n, &err),
               err);
}

PyObject* Context_add_trust_dir(PyObject* o, PyObject* path) {
  const char* p = PyUnicode_AsUTF8(path);
  if (p == nullptr) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_add_trust_dir(Self(o)->ctx, p, &err), err);
}

PyObject* Context_set_verify(PyObject* o, PyObject* args) {
  int mode, check_hostname;
  if (!PyArg_ParseTuple(args, "ip:set_verify", &mode, &check_hostname)) return nullptr;
  Engine()->ctx_set_verify(Self(o)->ctx, mode, check_hostname);
  Py_RETURN_NONE;
}

PyObject* Context_set_verify_flags(PyObject* o, PyObject* flags) {
  const unsigned long f = PyLong_AsUnsignedLong(flags);
  if (f == static_cast<unsigned long>(-1) && PyErr_Occurred()) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_set_verify_flags(Self(o)->ctx, f, &err), err);
}

PyObject* Context_set_versions(PyObject* o, PyObject* args) {
  int lo, hi;
  if (!PyArg_ParseTuple(args, "ii:set_versions", &lo, &hi)) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_set_versions(Self(o)->ctx, lo, hi, &err), err);
}

PyObject* Context_set_ciphers(PyObject* o, PyObject* spec) {
  const char* s = PyUnicode_AsUTF8(spec);
  if (s == nullptr) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_set_ciphers(Self(o)->ctx, s, &err), err);
}

PyObject* Context_set_curves(PyObject* o, PyObject* spec) {
  const char* s = PyUnicode_AsUTF8(spec);
  if (s == nullptr) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_set_curves(Self(o)->ctx, s, &err), err);
}

PyObject* Context_set_alpn(PyObject* o, PyObject* wire) {
  const char* d;
  Py_ssize_t n;
  if (!Bytes(wire, &d, &n)) return nullptr;
  MtTlsError err{};
  return Check(Engine()->ctx_set_alpn(Self(o)->ctx, reinterpret_cast<const uint8_t*>(d), n, &err),
               err);
}

PyObject* Context_set_flags(PyObject* o, PyObject* args) {
  int tickets, check_common_name, server_preference;
  if (!PyArg_ParseTuple(args, "ppp:set_flags", &tickets, &check_common_name,
                        &server_preference)) {
    return nullptr;
  }
  const MtTlsEngine* e = Engine();
  e->ctx_set_tickets(Self(o)->ctx, tickets, 2);
  e->ctx_set_check_common_name(Self(o)->ctx, check_common_name);
  e->ctx_set_server_preference(Self(o)->ctx, server_preference);
  Py_RETURN_NONE;
}

// set_keylog(path or None): where key log lines go from now on. The file
// object stays for the context's life (a handshake on another worker may
// be writing); only what it points at changes.
PyObject* Context_set_keylog(PyObject* o, PyObject* path) {
  TlsContextObject* self = Self(o);
  std::FILE* f = nullptr;
  if (path != Py_None) {
    PyObject* bytes;
    if (!PyUnicode_FSConverter(path, &bytes)) return nullptr;
    const char* p = PyBytes_AS_STRING(bytes);
    struct stat st;
    const bool fresh = stat(p, &st) != 0 || st.st_size == 0;
    f = std::fopen(p, "a");
    Py_DECREF(bytes);
    if (f == nullptr) return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
    // The ssl module's first line of a new file.
    if (fresh) std::fputs("# TLS secrets log file, generated by OpenSSL / Python\n", f);
    std::fflush(f);
  }
  if (self->keylog == nullptr) {
    self->keylog = new KeylogFile();
    Engine()->ctx_set_keylog(self->ctx, WriteKeylog, self->keylog);
  }
  std::FILE* old;
  {
    std::lock_guard<std::mutex> lock(self->keylog->mu);
    old = std::exchange(self->keylog->file, f);
  }
  if (old != nullptr) std::fclose(old);
  Py_RETURN_NONE;
}

PyObject* Context_set_sni(PyObject* o, PyObject* hook) {
  if (hook != Py_None && !PyCallable_Check(hook)) {
    PyErr_SetString(PyExc_TypeError, "not a callable object");
    return nullptr;
  }
  Py_XSETREF(Self(o)->sni, hook == Py_None ? nullptr : Py_NewRef(hook));
  Py_RETURN_NONE;
}

PyObject* Context_cipher_names(PyObject* o, PyObject*) {
  char names[8192];
  Engine()->ctx_cipher_names(Self(o)->ctx, names, sizeof(names));
  return PyUnicode_FromString(names);
}

PyMethodDef context_methods[] = {
    {"use_cert_chain", Context_use_cert_chain, METH_VARARGS, "(chain_pem, key_pem, password)"},
    {"add_trust_pem", Context_add_trust_pem, METH_O, nullptr},
    {"add_trust_der", Context_add_trust_der, METH_O, nullptr},
    {"add_trust_dir", Context_add_trust_dir, METH_O, nullptr},
    {"set_verify", Context_set_verify, METH_VARARGS, "(mode, check_hostname)"},
    {"set_verify_flags", Context_set_verify_flags, METH_O, nullptr},
    {"set_versions", Context_set_versions, METH_VARARGS, "(min, max): wire versions, 0 none"},
    {"set_ciphers", Context_set_ciphers, METH_O, nullptr},
    {"set_curves", Context_set_curves, METH_O, nullptr},
    {"set_alpn", Context_set_alpn, METH_O, "ALPN names, wire format"},
    {"set_flags", Context_set_flags, METH_VARARGS,
     "(tickets, check_common_name, server_preference)"},
    {"set_keylog", Context_set_keylog, METH_O, nullptr},
    {"set_sni", Context_set_sni, METH_O, "sni(transport, server_name) or None"},
    {"cipher_names", Context_cipher_names, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef context_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(TlsContextObject, weakreflist), Py_READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot context_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Context_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Context_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(Context_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(Context_clear)},
    {Py_tp_methods, context_methods},
    {Py_tp_members, context_members},
    {Py_tp_doc, const_cast<char*>("A TLS engine context (mt_asyncio.tls.TLSContext's).")},
    {0, nullptr},
};

PyType_Spec context_spec = {
    "mt_asyncio._core.TLSContextCore",
    sizeof(TlsContextObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    context_slots,
};

}  // namespace

HandshakeScope::HandshakeScope(PyObject* transport, PyMutex* lock)
    : transport_(transport), lock_(lock), previous_(current_scope) {
  current_scope = this;
}

HandshakeScope::~HandshakeScope() { current_scope = previous_; }

HandshakeScope* HandshakeScope::Current() { return current_scope; }

MtTlsCtx* ContextOf(PyObject* core) {
  if (context_type == nullptr || !PyObject_TypeCheck(core, context_type)) {
    PyErr_Format(PyExc_TypeError, "expected a TLSContextCore, not %s", Py_TYPE(core)->tp_name);
    return nullptr;
  }
  return Self(core)->ctx;
}

int RegisterTlsContextType(PyObject* module) {
  auto* type = reinterpret_cast<PyTypeObject*>(PyType_FromModuleAndSpec(module, &context_spec, nullptr));
  if (type == nullptr) return -1;
  context_type = type;
  if (PyModule_AddObjectRef(module, "TLSContextCore", reinterpret_cast<PyObject*>(type)) < 0) {
    return -1;
  }
  return RegisterTlsEngine(module);
}

}  // namespace mt::pyext::tls
