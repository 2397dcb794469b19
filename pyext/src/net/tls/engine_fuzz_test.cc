// Hostile input for the engine: random bytes, a real peer's records cut
// short, reordered, duplicated and bit-flipped, fed in pieces of random
// sizes. Whatever arrives, every call returns (a result, never a crash)
// and frees what it made; ASan's leak check covers the second half.
// Seeded, so a failure replays.

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "pyext/src/net/tls/engine_api.h"
#include "pyext/src/net/tls/test_certs.h"

namespace {

const MtTlsEngine& E() { return *mt_tls_engine_v1(); }

std::string Drain(MtTlsConn* conn) {
  size_t n;
  const char* data = E().conn_out_peek(conn, &n);
  std::string out(data, n);
  E().conn_out_consume(conn, n);
  return out;
}

// Splits a stream of TLS records at record boundaries.
std::vector<std::string> Records(const std::string& stream) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 5 <= stream.size()) {
    const size_t len = (static_cast<uint8_t>(stream[at + 3]) << 8) |
                       static_cast<uint8_t>(stream[at + 4]);
    const size_t end = std::min(stream.size(), at + 5 + len);
    out.push_back(stream.substr(at, end - at));
    at = end;
  }
  return out;
}

class EngineFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MtTlsError err;
    server_ctx_ = E().ctx_new(&err);
    client_ctx_ = E().ctx_new(&err);
    const auto id = pki_.Leaf("localhost", "DNS:localhost");
    ASSERT_EQ(E().ctx_use_cert_chain(server_ctx_, id.cert_pem.data(), id.cert_pem.size(),
                                     id.key_pem.data(), id.key_pem.size(), nullptr, 0, &err),
              MT_TLS_OK);
  }
  void TearDown() override {
    E().ctx_unref(server_ctx_);
    E().ctx_unref(client_ctx_);
  }

  // Feeds `input` in random pieces to a fresh connection of `ctx`, stepping
  // it after each, then reads and shuts down. Returns whether it failed.
  bool Feed(MtTlsCtx* ctx, const std::string& input, std::mt19937& rng) {
    MtTlsError err;
    const bool client = ctx == client_ctx_;
    MtTlsConn* conn = E().conn_new(ctx, !client, client ? "localhost" : nullptr, &err);
    EXPECT_NE(conn, nullptr);
    int state = E().conn_handshake(conn, &err);
    Drain(conn);
    size_t at = 0;
    bool failed = false;
    while (at < input.size() && !failed) {
      const size_t piece = std::min(input.size() - at, 1 + rng() % 700);
      E().conn_feed(conn, input.data() + at, piece);
      at += piece;
      if (state == MT_TLS_WANT_READ) state = E().conn_handshake(conn, &err);
      if (state == MT_TLS_OK) {
        char buf[4096];
        int status = MT_TLS_OK;
        while (E().conn_read(conn, buf, sizeof(buf), &status, &err) > 0) {
        }
        failed = status == MT_TLS_FAILED || status == MT_TLS_CLOSED;
      }
      failed = failed || state == MT_TLS_FAILED;
      Drain(conn);
    }
    E().conn_shutdown(conn, &err);
    Drain(conn);
    E().conn_free(conn);
    return failed;
  }

  // A real client's first flight and a real server's answer to it.
  void Capture(std::string* client_flight, std::string* server_flight) {
    MtTlsError err;
    MtTlsConn* c = E().conn_new(client_ctx_, 0, "localhost", &err);
    MtTlsConn* s = E().conn_new(server_ctx_, 1, nullptr, &err);
    E().conn_handshake(c, &err);
    *client_flight = Drain(c);
    E().conn_feed(s, client_flight->data(), client_flight->size());
    E().conn_handshake(s, &err);
    *server_flight = Drain(s);
    E().conn_free(c);
    E().conn_free(s);
  }

  mt::tls::testing::TestPki pki_;
  MtTlsCtx* server_ctx_ = nullptr;
  MtTlsCtx* client_ctx_ = nullptr;
};

TEST_F(EngineFuzzTest, RandomBytesFail) {
  std::mt19937 rng(1);
  int failed = 0;
  for (int i = 0; i < 300; ++i) {
    std::string junk(1 + rng() % 3000, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    if (i % 2 == 0) junk[0] = 0x16;  // Looks like a handshake record.
    if (i % 4 == 0) junk[1] = 0x03;
    failed += Feed(i % 3 == 0 ? client_ctx_ : server_ctx_, junk, rng);
  }
  // A few are prefixes of a record that never completes: still waiting,
  // not failed. Junk is never taken for a handshake.
  EXPECT_GT(failed, 250);
}

TEST_F(EngineFuzzTest, MangledRealRecordsNeverCrash) {
  std::mt19937 rng(2);
  std::string client_flight, server_flight;
  Capture(&client_flight, &server_flight);
  ASSERT_FALSE(client_flight.empty());
  ASSERT_FALSE(server_flight.empty());
  for (int i = 0; i < 400; ++i) {
    const bool to_server = i % 2 == 0;
    std::string input = to_server ? client_flight : server_flight;
    std::vector<std::string> records = Records(input);
    switch (i % 5) {
      case 0:  // Truncated.
        input.resize(rng() % input.size());
        break;
      case 1:  // Reordered records.
        std::shuffle(records.begin(), records.end(), rng);
        input.clear();
        for (const auto& r : records) input += r;
        break;
      case 2:  // A record twice.
        input += records[rng() % records.size()];
        break;
      case 3:  // Bits flipped.
        for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k) {
          input[rng() % input.size()] ^= static_cast<char>(1 << (rng() % 8));
        }
        break;
      case 4:  // A length field lying.
        input[3] = static_cast<char>(rng());
        input[4] = static_cast<char>(rng());
        break;
    }
    Feed(to_server ? server_ctx_ : client_ctx_, input, rng);
  }
}

TEST_F(EngineFuzzTest, GarbageAfterTheHandshakeFailsTheConnection) {
  std::mt19937 rng(3);
  MtTlsError err;
  for (int i = 0; i < 50; ++i) {
    MtTlsConn* c = E().conn_new(client_ctx_, 0, "localhost", &err);
    MtTlsConn* s = E().conn_new(server_ctx_, 1, nullptr, &err);
    int cr = MT_TLS_WANT_READ, sr = MT_TLS_WANT_READ;
    for (int k = 0; k < 10 && (cr != MT_TLS_OK || sr != MT_TLS_OK); ++k) {
      if (cr == MT_TLS_WANT_READ) cr = E().conn_handshake(c, &err);
      std::string out = Drain(c);
      E().conn_feed(s, out.data(), out.size());
      if (sr == MT_TLS_WANT_READ) sr = E().conn_handshake(s, &err);
      out = Drain(s);
      E().conn_feed(c, out.data(), out.size());
    }
    ASSERT_EQ(cr, MT_TLS_OK);
    ASSERT_EQ(sr, MT_TLS_OK);
    E().conn_write(c, "data", 4, &err);
    std::string record = Drain(c);
    record[5 + rng() % (record.size() - 5)] ^= 0x40;  // Fails its tag check.
    E().conn_feed(s, record.data(), record.size());
    char buf[64];
    int status;
    EXPECT_EQ(E().conn_read(s, buf, sizeof(buf), &status, &err), 0u);
    EXPECT_EQ(status, MT_TLS_FAILED);
    EXPECT_EQ(err.kind, MT_TLS_ERR_SSL);
    E().conn_free(c);
    E().conn_free(s);
  }
}

}  // namespace
