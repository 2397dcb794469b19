// The engine through its C table, as the extension uses it: two
// connections in one process handing each other their output.

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pyext/src/net/tls/engine_api.h"
#include "pyext/src/net/tls/test_certs.h"

namespace {

using mt::tls::testing::Identity;
using mt::tls::testing::TestPki;

const MtTlsEngine& E() { return *mt_tls_engine_v1(); }

struct Ctx {
  MtTlsCtx* p;
  explicit Ctx(bool server) {
    MtTlsError err;
    p = E().ctx_new(&err);
    (void)server;  // Either side: each connection says.
  }
  ~Ctx() { E().ctx_unref(p); }
  void Use(const Identity& id) {
    MtTlsError err;
    ASSERT_EQ(E().ctx_use_cert_chain(p, id.cert_pem.data(), id.cert_pem.size(), id.key_pem.data(),
                                     id.key_pem.size(), nullptr, 0, &err),
              MT_TLS_OK)
        << err.message;
  }
  void Trust(const std::string& pem) {
    MtTlsError err;
    ASSERT_EQ(E().ctx_add_trust_pem(p, pem.data(), pem.size(), &err), MT_TLS_OK) << err.message;
  }
};

// Moves everything `from` has to send into `to`.
bool Pump(MtTlsConn* from, MtTlsConn* to) {
  size_t n;
  const char* data = E().conn_out_peek(from, &n);
  if (n == 0) return false;
  E().conn_feed(to, data, n);
  E().conn_out_consume(from, n);
  return true;
}

struct Pair {
  MtTlsConn* client = nullptr;
  MtTlsConn* server = nullptr;
  MtTlsError client_err{};
  MtTlsError server_err{};
  int client_result = MT_TLS_WANT_READ;
  int server_result = MT_TLS_WANT_READ;

  Pair(Ctx& c, Ctx& s, const char* name) {
    MtTlsError err;
    client = E().conn_new(c.p, 0, name, &err);
    server = E().conn_new(s.p, 1, nullptr, &err);
  }
  ~Pair() {
    E().conn_free(client);
    E().conn_free(server);
  }
  // Steps both handshakes until neither moves. True when both finished.
  bool Handshake() {
    for (int i = 0; i < 20; ++i) {
      if (client_result == MT_TLS_WANT_READ) client_result = E().conn_handshake(client, &client_err);
      Pump(client, server);
      if (server_result == MT_TLS_WANT_READ) server_result = E().conn_handshake(server, &server_err);
      Pump(server, client);
      if (client_result != MT_TLS_WANT_READ && server_result != MT_TLS_WANT_READ) break;
    }
    return client_result == MT_TLS_OK && server_result == MT_TLS_OK;
  }
};

// Everything `conn` can decrypt now.
std::string ReadAll(MtTlsConn* conn, int* last_status = nullptr) {
  std::string got;
  char buf[16384];
  for (;;) {
    int status;
    MtTlsError err;
    const size_t n = E().conn_read(conn, buf, sizeof(buf), &status, &err);
    if (n == 0) {
      if (last_status != nullptr) *last_status = status;
      return got;
    }
    got.append(buf, n);
  }
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new TestPki(); }
  static void TearDownTestSuite() { delete pki_; }
  static TestPki* pki_;
};
TestPki* EngineTest::pki_ = nullptr;

TEST_F(EngineTest, IsBoringSsl) {
  EXPECT_NE(std::strstr(E().library_version(), "BoringSSL"), nullptr) << E().library_version();
  EXPECT_EQ(E().abi, MT_TLS_ENGINE_ABI);
}

TEST_F(EngineTest, HandshakeAndDataBothWaysOverTls13) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  c.Trust(pki_->ca_pem());
  E().ctx_set_verify(c.p, MT_TLS_VERIFY_REQUIRED, 1);
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake()) << pair.client_err.message << " / " << pair.server_err.message;
  EXPECT_STREQ(E().conn_version_name(pair.client), "TLSv1.3");
  EXPECT_EQ(E().conn_version(pair.server), MT_TLS_VERSION_1_3);
  EXPECT_NE(E().conn_cipher_name(pair.client), nullptr);
  EXPECT_GE(E().conn_cipher_bits(pair.client), 128);
  size_t len;
  EXPECT_NE(E().conn_peer_cert(pair.client, 0, &len), nullptr);
  EXPECT_GT(len, 100u);
  EXPECT_EQ(E().conn_peer_cert(pair.server, 0, &len), nullptr);  // No client certificate.

  MtTlsError err;
  const std::string hello = "hello over TLS";
  ASSERT_EQ(E().conn_write(pair.client, hello.data(), hello.size(), &err), MT_TLS_OK);
  Pump(pair.client, pair.server);
  EXPECT_EQ(ReadAll(pair.server), hello);
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_EQ(E().conn_write(pair.server, big.data(), big.size(), &err), MT_TLS_OK);
  Pump(pair.server, pair.client);
  EXPECT_EQ(ReadAll(pair.client), big);
  EXPECT_EQ(E().conn_fed_pending(pair.client), 0u);
}

TEST_F(EngineTest, Tls12WhenTheServerStopsThere) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  MtTlsError err;
  ASSERT_EQ(E().ctx_set_versions(s.p, 0, MT_TLS_VERSION_1_2, &err), MT_TLS_OK);
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake());
  EXPECT_STREQ(E().conn_version_name(pair.client), "TLSv1.2");
  char shared[1024];
  EXPECT_GT(E().conn_shared_ciphers(pair.server, shared, sizeof(shared)), 0u);
}

TEST_F(EngineTest, VersionsThatDoNotMeetFail) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  MtTlsError err;
  ASSERT_EQ(E().ctx_set_versions(s.p, 0, MT_TLS_VERSION_1_2, &err), MT_TLS_OK);
  ASSERT_EQ(E().ctx_set_versions(c.p, MT_TLS_VERSION_1_3, 0, &err), MT_TLS_OK);
  Pair pair(c, s, "localhost");
  EXPECT_FALSE(pair.Handshake());
  EXPECT_EQ(pair.server_err.kind, MT_TLS_ERR_SSL);
  EXPECT_STREQ(pair.server_err.library, "SSL");
  EXPECT_STRNE(pair.server_err.reason_name, "");
}

TEST_F(EngineTest, AlpnFollowsTheServersOrder) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  const uint8_t client_list[] = "\x08http/1.1\x02h2";
  const uint8_t server_list[] = "\x02h2\x08http/1.1";
  MtTlsError err;
  E().ctx_set_alpn(c.p, client_list, sizeof(client_list) - 1, &err);
  E().ctx_set_alpn(s.p, server_list, sizeof(server_list) - 1, &err);
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake());
  char chosen[32];
  EXPECT_EQ(E().conn_alpn(pair.client, chosen, sizeof(chosen)), 2u);
  EXPECT_STREQ(chosen, "h2");
}

TEST_F(EngineTest, UntrustedExpiredAndWrongHostFailWithTheirCodes) {
  const Identity untrusted = TestPki::SelfSigned("localhost", "DNS:localhost");
  const Identity expired = pki_->Leaf("localhost", "DNS:localhost", /*expired=*/true);
  const Identity other = pki_->Leaf("other", "DNS:other.test");
  struct {
    const Identity* id;
    long code;  // X509_V_ERR_*.
  } cases[] = {{&untrusted, 18}, {&expired, 10}, {&other, 62}};
  for (const auto& k : cases) {
    Ctx c(false), s(true);
    s.Use(*k.id);
    c.Trust(pki_->ca_pem());
    E().ctx_set_verify(c.p, MT_TLS_VERIFY_REQUIRED, 1);
    Pair pair(c, s, "localhost");
    EXPECT_FALSE(pair.Handshake());
    EXPECT_EQ(pair.client_err.kind, MT_TLS_ERR_VERIFY) << pair.client_err.message;
    EXPECT_EQ(pair.client_err.verify_code, k.code) << pair.client_err.message;
    EXPECT_STREQ(pair.client_err.reason_name, "CERTIFICATE_VERIFY_FAILED");
  }
}

TEST_F(EngineTest, MutualTls) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  s.Trust(pki_->ca_pem());
  E().ctx_set_verify(s.p, MT_TLS_VERIFY_REQUIRED, 0);
  {
    Pair pair(c, s, "localhost");  // No client certificate: refused.
    EXPECT_FALSE(pair.Handshake());
    EXPECT_EQ(pair.server_result, MT_TLS_FAILED);
  }
  c.Use(pki_->Leaf("client", "DNS:client.test"));
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake()) << pair.server_err.message;
  size_t len;
  EXPECT_NE(E().conn_peer_cert(pair.server, 0, &len), nullptr);
  EXPECT_EQ(E().conn_verify_result(pair.server), 0);
}

struct SniSwitch {
  MtTlsCtx* other;
  std::string seen;
};

int SwitchOnName(void* arg, MtTlsConn* conn, const char* name) {
  auto* s = static_cast<SniSwitch*>(arg);
  s->seen = name != nullptr ? name : "(none)";
  if (name != nullptr && std::strcmp(name, "b.test") == 0) E().conn_set_ctx(conn, s->other);
  if (name != nullptr && std::strcmp(name, "refused.test") == 0) return 112;  // unrecognized_name
  return 0;
}

TEST_F(EngineTest, ServerNameHookChoosesTheCertificate) {
  Ctx c(false), a(true), b(true);
  a.Use(pki_->Leaf("a", "DNS:a.test"));
  b.Use(pki_->Leaf("b", "DNS:b.test"));
  c.Trust(pki_->ca_pem());
  E().ctx_set_verify(c.p, MT_TLS_VERIFY_REQUIRED, 1);
  SniSwitch sni{b.p, ""};
  E().ctx_set_server_name_hook(a.p, SwitchOnName, &sni);
  {
    Pair pair(c, a, "a.test");
    ASSERT_TRUE(pair.Handshake()) << pair.client_err.message;
    EXPECT_EQ(sni.seen, "a.test");
  }
  {
    Pair pair(c, a, "b.test");
    ASSERT_TRUE(pair.Handshake()) << pair.client_err.message;
    EXPECT_EQ(sni.seen, "b.test");
    char name[64];
    E().conn_server_name(pair.server, name, sizeof(name));
    EXPECT_STREQ(name, "b.test");
  }
  {
    Pair pair(c, a, "refused.test");
    EXPECT_FALSE(pair.Handshake());
  }
}

TEST_F(EngineTest, CloseNotifyEndsTheStream) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake());
  MtTlsError err;
  ASSERT_EQ(E().conn_write(pair.client, "last", 4, &err), MT_TLS_OK);
  EXPECT_EQ(E().conn_shutdown(pair.client, &err), MT_TLS_WANT_READ);
  Pump(pair.client, pair.server);
  int status;
  EXPECT_EQ(ReadAll(pair.server, &status), "last");
  EXPECT_EQ(status, MT_TLS_CLOSED);
  EXPECT_EQ(E().conn_shutdown(pair.server, &err), MT_TLS_OK);
  Pump(pair.server, pair.client);
  ReadAll(pair.client, &status);
  EXPECT_EQ(status, MT_TLS_CLOSED);
}

TEST_F(EngineTest, ASecondConnectionResumesTheSession) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  {
    Pair first(c, s, "localhost");
    ASSERT_TRUE(first.Handshake());
    EXPECT_FALSE(E().conn_session_reused(first.client));
    ReadAll(first.client);  // TLS 1.3 tickets come after the handshake.
  }
  Pair second(c, s, "localhost");
  ASSERT_TRUE(second.Handshake());
  EXPECT_TRUE(E().conn_session_reused(second.client));
  EXPECT_TRUE(E().conn_session_reused(second.server));
}

TEST_F(EngineTest, NoTicketsNoResumption) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  E().ctx_set_tickets(c.p, 0, 0);
  {
    Pair first(c, s, "localhost");
    ASSERT_TRUE(first.Handshake());
    ReadAll(first.client);
  }
  Pair second(c, s, "localhost");
  ASSERT_TRUE(second.Handshake());
  EXPECT_FALSE(E().conn_session_reused(second.client));
}

void CountLine(void* arg, const char* line) {
  auto* lines = static_cast<std::vector<std::string>*>(arg);
  lines->push_back(line);
}

TEST_F(EngineTest, KeyLogLines) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  std::vector<std::string> lines;
  E().ctx_set_keylog(c.p, CountLine, &lines);
  Pair pair(c, s, "localhost");
  ASSERT_TRUE(pair.Handshake());
  ASSERT_FALSE(lines.empty());
  bool traffic = false;
  for (const auto& l : lines) traffic = traffic || l.rfind("CLIENT_TRAFFIC_SECRET_0 ", 0) == 0;
  EXPECT_TRUE(traffic);
}

TEST_F(EngineTest, BadConfigurationSaysWhat) {
  Ctx s(true);
  MtTlsError err;
  EXPECT_EQ(E().ctx_set_ciphers(s.p, "NO-SUCH-CIPHER", &err), MT_TLS_FAILED);
  EXPECT_EQ(err.kind, MT_TLS_ERR_SSL);
  EXPECT_EQ(E().ctx_set_curves(s.p, "no-such-curve", &err), MT_TLS_FAILED);
  EXPECT_EQ(E().ctx_set_verify_flags(s.p, 0x100000, &err), MT_TLS_FAILED);
  EXPECT_EQ(err.kind, MT_TLS_ERR_ARGUMENT);
  EXPECT_EQ(E().ctx_set_verify_flags(s.p, 0x80000 | 0x20, &err), MT_TLS_OK);
  const std::string junk = "not a certificate";
  EXPECT_EQ(E().ctx_use_cert_chain(s.p, junk.data(), junk.size(), junk.data(), junk.size(),
                                   nullptr, 0, &err),
            MT_TLS_FAILED);
  EXPECT_STREQ(err.library, "PEM");
  // A key that is not the certificate's.
  const Identity a = pki_->Leaf("a", "DNS:a.test");
  const Identity b = pki_->Leaf("b", "DNS:b.test");
  EXPECT_EQ(E().ctx_use_cert_chain(s.p, a.cert_pem.data(), a.cert_pem.size(), b.key_pem.data(),
                                   b.key_pem.size(), nullptr, 0, &err),
            MT_TLS_FAILED);
  EXPECT_EQ(E().ctx_add_trust_pem(s.p, junk.data(), junk.size(), &err), MT_TLS_FAILED);
  const uint8_t der[] = {0x30, 0x03, 0x02, 0x01};
  EXPECT_EQ(E().ctx_add_trust_der(s.p, der, sizeof(der), &err), MT_TLS_FAILED);
}

// Different connections of one context on different threads at once, as
// the loop's workers run them.
TEST_F(EngineTest, ConnectionsOfOneContextOnManyThreads) {
  Ctx c(false), s(true);
  s.Use(pki_->Leaf("localhost", "DNS:localhost"));
  c.Trust(pki_->ca_pem());
  E().ctx_set_verify(c.p, MT_TLS_VERIFY_REQUIRED, 1);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        Pair pair(c, s, "localhost");
        if (!pair.Handshake()) continue;
        MtTlsError err;
        E().conn_write(pair.client, "ping", 4, &err);
        Pump(pair.client, pair.server);
        if (ReadAll(pair.server) == "ping") ok.fetch_add(1);
        ReadAll(pair.client);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 100);
}

}  // namespace
