#ifndef MT_PYEXT_SRC_NET_TLS_TEST_CERTS_H_
#define MT_PYEXT_SRC_NET_TLS_TEST_CERTS_H_

#include <string>

namespace mt::tls::testing {

// A certificate and its key, PEM.
struct Identity {
  std::string cert_pem;
  std::string key_pem;
};

// A throwaway public key infrastructure for tests: a CA made when the
// object is, and leaves it signs on request. EC P-256, SHA-256.
class TestPki {
 public:
  TestPki();
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& ca_pem() const { return ca_.cert_pem; }

  // A leaf signed by the CA for `alt_names` (an X.509 subjectAltName list:
  // "DNS:localhost,IP:127.0.0.1"), valid for a day, or expired a day ago.
  Identity Leaf(const std::string& common_name, const std::string& alt_names,
                bool expired = false) const;
  // A leaf for the same names signed by nobody the CA knows.
  static Identity SelfSigned(const std::string& common_name, const std::string& alt_names);

 private:
  Identity ca_;
  void* ca_key_;  // EVP_PKEY*.
  void* ca_cert_;  // X509*.
};

}  // namespace mt::tls::testing

#endif  // MT_PYEXT_SRC_NET_TLS_TEST_CERTS_H_
