#include "pyext/src/net/tls/test_certs.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec_key.h>
#include <openssl/evp.h>
#include <openssl/nid.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace mt::tls::testing {
namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "test_certs: %s failed\n", what);
  std::abort();
}

EVP_PKEY* NewKey() {
  EC_KEY* ec = EC_KEY_new_by_curve_name(NID_X9_62_prime256v1);
  if (ec == nullptr || !EC_KEY_generate_key(ec)) Die("EC key");
  EVP_PKEY* key = EVP_PKEY_new();
  EVP_PKEY_assign_EC_KEY(key, ec);
  return key;
}

void AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) Die("extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// Signs a certificate for `key` named `cn`; self-signed when issuer is null.
X509* NewCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key,
              bool ca, const std::string& alt_names, bool expired) {
  static std::atomic<long> serial{1000};
  X509* cert = X509_new();
  X509_set_version(cert, X509_VERSION_3);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial.fetch_add(1) + std::rand() % 100000);
  const long day = 24 * 3600;
  X509_gmtime_adj(X509_getm_notBefore(cert), expired ? -2 * day : -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), expired ? -day : day);
  X509_NAME* name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const uint8_t*>("mt_asyncio tests"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const uint8_t*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509_set_pubkey(cert, key);
  X509* signer = issuer != nullptr ? issuer : cert;
  if (ca) {
    AddExtension(cert, signer, NID_basic_constraints, "critical,CA:TRUE");
    AddExtension(cert, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert, signer, NID_basic_constraints, "CA:FALSE");
    AddExtension(cert, signer, NID_ext_key_usage, "serverAuth,clientAuth");
    if (!alt_names.empty()) AddExtension(cert, signer, NID_subject_alt_name, alt_names);
  }
  AddExtension(cert, signer, NID_subject_key_identifier, "hash");
  if (!X509_sign(cert, issuer_key != nullptr ? issuer_key : key, EVP_sha256())) Die("sign");
  return cert;
}

// What `write` (a PEM_write_bio_* call) writes, as a string.
template <typename Write>
std::string ToPem(Write write) {
  BIO* bio = BIO_new(BIO_s_mem());
  write(bio);
  const uint8_t* data;
  size_t len;
  BIO_mem_contents(bio, &data, &len);
  std::string out(reinterpret_cast<const char*>(data), len);
  BIO_free(bio);
  return out;
}

std::string Pem(X509* cert) {
  return ToPem([cert](BIO* bio) { PEM_write_bio_X509(bio, cert); });
}

std::string Pem(EVP_PKEY* key) {
  return ToPem([key](BIO* bio) {
    PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

}  // namespace

TestPki::TestPki() {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(key, "mt_asyncio test CA", nullptr, nullptr, true, "", false);
  ca_ = {Pem(cert), Pem(key)};
  ca_key_ = key;
  ca_cert_ = cert;
}

TestPki::~TestPki() {
  EVP_PKEY_free(static_cast<EVP_PKEY*>(ca_key_));
  X509_free(static_cast<X509*>(ca_cert_));
}

Identity TestPki::Leaf(const std::string& common_name, const std::string& alt_names,
                       bool expired) const {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(key, common_name, static_cast<X509*>(ca_cert_),
                       static_cast<EVP_PKEY*>(ca_key_), false, alt_names, expired);
  Identity id{Pem(cert), Pem(key)};
  X509_free(cert);
  EVP_PKEY_free(key);
  return id;
}

Identity TestPki::SelfSigned(const std::string& common_name, const std::string& alt_names) {
  EVP_PKEY* key = NewKey();
  X509* cert = NewCert(key, common_name, nullptr, nullptr, false, alt_names, false);
  Identity id{Pem(cert), Pem(key)};
  X509_free(cert);
  EVP_PKEY_free(key);
  return id;
}

}  // namespace mt::tls::testing
