#include "runtime/admin/json.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "runtime/admin/snapshot_json.h"

namespace mt::runtime::admin {
namespace {

TEST(JsonWriterTest, WritesNestedDocumentsWithEscapes) {
  JsonWriter json;
  json.BeginObject()
      .Field("name", std::string("a\"b\\c\n\x01"))
      .Field("n", std::uint64_t{18446744073709551615u})
      .Field("neg", std::int64_t{-3})
      .Field("ok", true)
      .Field("x", std::numeric_limits<double>::infinity())
      .Key("list")
      .BeginArray()
      .Int(1)
      .BeginObject()
      .EndObject()
      .EndArray()
      .EndObject();
  EXPECT_EQ(json.Take(),
            R"({"name":"a\"b\\c\n\u0001","n":18446744073709551615,"neg":-3,)"
            R"("ok":true,"x":null,"list":[1,{}]})");
}

TEST(FlatJsonTest, ParsesScalarsAndRefusesTheRest) {
  auto parsed = ParseFlatJson(R"( {"target": 8, "wait_seconds":"2.5", "quick":true,
                                   "msg":"caf\u00e9 \"x\"", "none": null} )");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*NumberField(*parsed, "target", 0), 8);
  EXPECT_EQ(*NumberField(*parsed, "wait_seconds", 0), 2.5);  // proto3 int64 form.
  EXPECT_EQ(*NumberField(*parsed, "absent", -1), -1);
  EXPECT_EQ(*NumberField(*parsed, "none", 7), 7);
  EXPECT_TRUE(*BoolField(*parsed, "quick", false));
  EXPECT_EQ(std::get<std::string>(parsed->at("msg")), "caf\xc3\xa9 \"x\"");
  EXPECT_FALSE(NumberField(*parsed, "quick", 0).ok());
  EXPECT_FALSE(BoolField(*parsed, "target", false).ok());

  for (const char* bad : {"", "[]", "{", R"({"a":})", R"({"a":1,})", R"({"a":{"b":1}})",
                          R"({"a":[1]})", R"({"a":1} x)", R"({"a":"\u12"})",
                          R"({"a":1e})", R"({a:1})", "{\"a\":\"unterminated}"}) {
    EXPECT_EQ(ParseFlatJson(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_TRUE(ParseFlatJson("{}").ok());
}

TEST(SnapshotJsonTest, RuntimeInfoUsesProtoNamesAndLiveBlockingValues) {
  RuntimeSnapshot snap;
  snap.state = RuntimeState::kRunning;
  snap.worker_threads = 3;
  snap.config.blocking_threads_max = 128;
  snap.blocking.max_threads = 4;  // Changed live.
  snap.blocking.idle_ttl = std::chrono::milliseconds(1500);
  WorkerSnapshot w;
  w.index = 1;
  w.state = WorkerState::kDrivingReactor;
  snap.workers.push_back(w);
  const std::string doc = RuntimeSnapshotToJson(snap);
  EXPECT_NE(doc.find(R"("state":"RUNTIME_STATE_RUNNING")"), std::string::npos) << doc;
  EXPECT_NE(doc.find(R"("blocking_threads_max":4)"), std::string::npos) << doc;
  EXPECT_NE(doc.find(R"("blocking_idle_ttl_seconds":1.5)"), std::string::npos) << doc;
  EXPECT_NE(doc.find(R"("state":"WORKER_STATE_DRIVING_REACTOR")"), std::string::npos)
      << doc;
  EXPECT_TRUE(ParseFlatJson(doc).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mt::runtime::admin
