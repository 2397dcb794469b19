#ifndef MT_ASYNCIO_CONTROL_SRC_TLS_CHECK_H_
#define MT_ASYNCIO_CONTROL_SRC_TLS_CHECK_H_

#include <string>

#include "absl/status/status.h"

namespace mt::control {

// Whether the TLS listener's PEM material loads: a certificate chain whose
// first certificate matches `key_pem`, and (when not empty) a client CA
// bundle of at least one certificate. gRPC loads them only when the first
// connection arrives on a listener it does not own, and then just logs
// what is wrong; checking here turns that into a refusal to start.
absl::Status CheckServerTls(const std::string& cert_chain_pem, const std::string& key_pem,
                            const std::string& client_ca_pem);

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_TLS_CHECK_H_
