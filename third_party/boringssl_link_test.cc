// Proves @boringssl links and loads (Debian keeps it under android/ with an
// .so.0 name, reached through an rpath): hash a known vector and check that
// the library in use is BoringSSL, not the system OpenSSL.

#include <openssl/base.h>
#include <openssl/sha.h>

#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"

namespace {

TEST(BoringSslTest, Sha256OfAbc) {
  const unsigned char input[] = {'a', 'b', 'c'};
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(input, sizeof(input), digest);
  char hex[2 * SHA256_DIGEST_LENGTH + 1];
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  }
  EXPECT_STREQ(
      hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(BoringSslTest, HeadersAreBoringSsl) {
#ifndef OPENSSL_IS_BORINGSSL
  FAIL() << "openssl/base.h is not BoringSSL's";
#endif
}

}  // namespace
