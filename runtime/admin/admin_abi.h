#ifndef MT_RUNTIME_ADMIN_ADMIN_ABI_H_
#define MT_RUNTIME_ADMIN_ADMIN_ABI_H_

// The boundary between mt_asyncio's core extension and its control
// extension. They are linked separately (the control one carries gRPC and
// OpenSSL), possibly by different compilers or standard libraries, so only
// C types cross: a versioned table of function pointers exported in a
// PyCapsule, whose requests and answers are JSON documents shaped like the
// mt.control.v1 messages (proto field names). The same documents are what
// Python's mt_asyncio.runtime_info() reads, so the two views of the
// runtime cannot drift apart.
//
// Evolving it: add methods (an unknown method answers UNIMPLEMENTED) and
// fields (readers ignore unknown fields); append function pointers at the
// end and the reader checks struct_size; bump kMtAdminAbiVersion only for
// a change an older reader would misread.

#include <stddef.h>
#include <stdint.h>

extern "C" {

struct MtAdminResponse {
  // A canonical status code (absl::StatusCode's numbering, which is
  // gRPC's): 0 OK, 3 INVALID_ARGUMENT, 5 NOT_FOUND, 9 FAILED_PRECONDITION,
  // 12 UNIMPLEMENTED, 13 INTERNAL, 14 UNAVAILABLE.
  int32_t code;
  // On OK a JSON document; otherwise the error message. Owned by the core:
  // release it with free_response.
  char* body;
  size_t body_size;
};

struct MtAdminAbi {
  uint32_t abi_version;
  uint32_t struct_size;  // sizeof(MtAdminAbi) as the core was built.
  // Answers one method ("GetRuntime", "ListLoops", ...; see
  // pyext/src/admin_service.cc) given its JSON request. Safe from any
  // thread, attached to the interpreter or not. Methods about the runtime
  // never need the interpreter; those about loops and tasks attach.
  MtAdminResponse (*call)(const char* method, size_t method_size,
                          const char* request, size_t request_size);
  void (*free_response)(MtAdminResponse* response);
};

}  // extern "C"

inline constexpr uint32_t kMtAdminAbiVersion = 1;
inline constexpr char kMtAdminAbiCapsuleName[] = "mt_asyncio._core._admin_abi";

#endif  // MT_RUNTIME_ADMIN_ADMIN_ABI_H_
