#include "control/src/tls_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> Reader(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's reason for the last failure, and the error queue emptied (it
// is per thread, and gRPC reads it on this thread later).
std::string LastError() {
  const unsigned long code = ERR_peek_last_error();
  std::string why = code != 0 ? ERR_reason_error_string(code) ? ERR_reason_error_string(code)
                                                              : "unknown error"
                              : "no PEM data";
  ERR_clear_error();
  return why;
}

}  // namespace

absl::Status CheckServerTls(const std::string& cert_chain_pem, const std::string& key_pem,
                            const std::string& client_ca_pem) {
  std::unique_ptr<X509, X509Free> cert(
      PEM_read_bio_X509(Reader(cert_chain_pem).get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS certificate does not load: ", LastError()));
  }
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(Reader(key_pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the TLS private key does not load: ", LastError()));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the TLS private key does not match the certificate: ", LastError()));
  }
  if (!client_ca_pem.empty()) {
    std::unique_ptr<X509, X509Free> ca(
        PEM_read_bio_X509(Reader(client_ca_pem).get(), nullptr, nullptr, nullptr));
    if (ca == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the client CA does not load: ", LastError()));
    }
  }
  ERR_clear_error();
  return absl::OkStatus();
}

}  // namespace mt::control
