#include "pyext/src/net/tls_bio.h"

#include <memory>
#include <string>

#include "pyext/src/common/py_mutex.h"
#include "pyext/src/net/tls_context.h"
#include "pyext/src/net/tls_engine.h"
#include "pyext/src/net/tls_session.h"

namespace mt::pyext::tls {
namespace {

struct BioObject {
  PyObject_HEAD
  TlsSession* session;  // Owned.
  PyMutex mu;
  PyObject* weakreflist;
};

BioObject* Self(PyObject* o) { return reinterpret_cast<BioObject*>(o); }

PyObject* Bio_new(PyTypeObject* type, PyObject* args, PyObject*) {
  PyObject* spec;
  if (!PyArg_ParseTuple(args, "O!:TLSBio", &PyTuple_Type, &spec)) return nullptr;
  std::unique_ptr<TlsSession> session = TlsSession::FromSpec(spec);
  if (session == nullptr) return nullptr;
  MtTlsError err{};
  if (!session->Start(&err)) return RaiseError(err);
  auto* self = Self(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->session = session.release();
  return reinterpret_cast<PyObject*>(self);
}

void Bio_dealloc(PyObject* o) {
  BioObject* self = Self(o);
  if (self->weakreflist != nullptr) PyObject_ClearWeakRefs(o);
  delete self->session;
  PyTypeObject* type = Py_TYPE(o);
  type->tp_free(o);
  Py_DECREF(type);
}

const MtTlsEngine* E(BioObject* self) { return self->session->engine(); }

PyObject* Bio_feed(PyObject* o, PyObject* data) {
  Py_buffer view;
  if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return nullptr;
  BioObject* self = Self(o);
  {
    PyMutexGuard lock(self->mu);
    E(self)->conn_feed(self->session->conn, static_cast<const char*>(view.buf),
                       static_cast<std::size_t>(view.len));
  }
  PyBuffer_Release(&view);
  Py_RETURN_NONE;
}

PyObject* Bio_take(PyObject* o, PyObject*) {
  BioObject* self = Self(o);
  PyMutexGuard lock(self->mu);
  std::size_t n = 0;
  const char* data = E(self)->conn_out_peek(self->session->conn, &n);
  PyObject* out = PyBytes_FromStringAndSize(data, static_cast<Py_ssize_t>(n));
  if (out != nullptr) E(self)->conn_out_consume(self->session->conn, n);
  return out;
}

PyObject* Bio_handshake(PyObject* o, PyObject*) {
  BioObject* self = Self(o);
  MtTlsError err{};
  int r;
  {
    PyMutexGuard lock(self->mu);
    if (self->session->state != TlsState::kHandshake) Py_RETURN_TRUE;
    HandshakeScope scope(o, &self->mu);
    r = E(self)->conn_handshake(self->session->conn, &err);
    if (r == MT_TLS_OK) self->session->state = TlsState::kWrapped;
  }
  if (r == MT_TLS_FAILED) {
    const std::string& host = self->session->server_hostname;
    PyErr_SetRaisedException(MakeError(err, host.empty() ? nullptr : host.c_str()));
    return nullptr;
  }
  return PyBool_FromLong(r == MT_TLS_OK);
}

PyObject* Bio_read(PyObject* o, PyObject* arg) {
  const Py_ssize_t n = PyLong_AsSsize_t(arg);
  if (n < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "size should not be negative");
    return nullptr;
  }
  BioObject* self = Self(o);
  PyObject* bytes = PyBytes_FromStringAndSize(nullptr, n);
  if (bytes == nullptr) return nullptr;
  MtTlsError err{};
  int status = MT_TLS_OK;
  std::size_t got = 0;
  {
    PyMutexGuard lock(self->mu);
    while (got < static_cast<std::size_t>(n) && status == MT_TLS_OK) {
      got += E(self)->conn_read(self->session->conn, PyBytes_AS_STRING(bytes) + got,
                                static_cast<std::size_t>(n) - got, &status, &err);
      if (got > 0) break;  // As SSL_read: what one record gave.
    }
  }
  if (status == MT_TLS_FAILED) {
    Py_DECREF(bytes);
    return RaiseError(err);
  }
  if (_PyBytes_Resize(&bytes, static_cast<Py_ssize_t>(got)) < 0) return nullptr;
  const int code = got > 0 ? 0 : status == MT_TLS_CLOSED ? 2 : 1;
  return Py_BuildValue("(Ni)", bytes, code);
}

PyObject* Bio_write(PyObject* o, PyObject* data) {
  Py_buffer view;
  if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return nullptr;
  BioObject* self = Self(o);
  MtTlsError err{};
  int r;
  {
    PyMutexGuard lock(self->mu);
    r = E(self)->conn_write(self->session->conn, static_cast<const char*>(view.buf),
                            static_cast<std::size_t>(view.len), &err);
  }
  PyBuffer_Release(&view);
  if (r != MT_TLS_OK) return RaiseError(err);
  Py_RETURN_NONE;
}

PyObject* Bio_shutdown(PyObject* o, PyObject*) {
  BioObject* self = Self(o);
  MtTlsError err{};
  int r;
  {
    PyMutexGuard lock(self->mu);
    r = E(self)->conn_shutdown(self->session->conn, &err);
  }
  if (r == MT_TLS_FAILED) return RaiseError(err);
  return PyBool_FromLong(r == MT_TLS_OK);
}

PyObject* Bio_tls_info(PyObject* o, PyObject* args) {
  const char* what;
  Py_ssize_t index = 0;
  if (!PyArg_ParseTuple(args, "s|n:_tls_info", &what, &index)) return nullptr;
  BioObject* self = Self(o);
  PyMutexGuard lock(self->mu);
  return self->session->Info(what, index);
}

PyObject* Bio_tls_set_context(PyObject* o, PyObject* core) {
  BioObject* self = Self(o);
  PyMutexGuard lock(self->mu);
  return self->session->SetContext(core);
}

PyMethodDef bio_methods[] = {
    {"feed", Bio_feed, METH_O, nullptr},
    {"take", Bio_take, METH_NOARGS, nullptr},
    {"handshake", Bio_handshake, METH_NOARGS, nullptr},
    {"read", Bio_read, METH_O, nullptr},
    {"write", Bio_write, METH_O, nullptr},
    {"shutdown", Bio_shutdown, METH_NOARGS, nullptr},
    {"_tls_info", Bio_tls_info, METH_VARARGS, nullptr},
    {"_tls_set_context", Bio_tls_set_context, METH_O, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef bio_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(BioObject, weakreflist), Py_READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot bio_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(Bio_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(Bio_dealloc)},
    {Py_tp_methods, bio_methods},
    {Py_tp_members, bio_members},
    {Py_tp_doc, const_cast<char*>("One TLS engine connection driven by Python (wrap_bio).")},
    {0, nullptr},
};

PyType_Spec bio_spec = {
    "mt_asyncio._core.TLSBio",
    sizeof(BioObject),
    0,
    Py_TPFLAGS_DEFAULT,
    bio_slots,
};

}  // namespace

int RegisterTlsBioType(PyObject* module) {
  PyObject* type = PyType_FromModuleAndSpec(module, &bio_spec, nullptr);
  if (type == nullptr) return -1;
  const int r = PyModule_AddObjectRef(module, "TLSBio", type);
  Py_DECREF(type);
  return r;
}

}  // namespace mt::pyext::tls
