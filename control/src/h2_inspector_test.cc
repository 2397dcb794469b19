#include "control/src/h2_inspector.h"

#include <gtest/gtest.h>

#include <string>

namespace mt::control {
namespace {

using namespace std::chrono_literals;

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(unsigned char type, unsigned char flags, std::uint32_t stream,
                  std::size_t length) {
  std::string f;
  f.push_back(static_cast<char>((length >> 16) & 0xff));
  f.push_back(static_cast<char>((length >> 8) & 0xff));
  f.push_back(static_cast<char>(length & 0xff));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  f.push_back(static_cast<char>((stream >> 24) & 0x7f));
  f.push_back(static_cast<char>((stream >> 16) & 0xff));
  f.push_back(static_cast<char>((stream >> 8) & 0xff));
  f.push_back(static_cast<char>(stream & 0xff));
  f.append(length, '\0');
  return f;
}

std::string Opening() { return std::string(kPreface) + Frame(0x4, 0, 0, 6); }

bool FeedAll(H2Inspector& in, const std::string& bytes, H2Inspector::Clock::time_point now) {
  return in.Feed(bytes.data(), bytes.size(), now);
}

TEST(H2InspectorTest, AnOrdinaryCallPassesInPiecesOfAnySize) {
  const auto t0 = H2Inspector::Clock::now();
  H2Inspector in({}, t0);
  const std::string call = Opening() + Frame(0x4, 0x1, 0, 0) +  // SETTINGS ack
                           Frame(0x1, 0x4, 1, 120) +             // HEADERS, END_HEADERS
                           Frame(0x0, 0x1, 1, 5) +               // DATA, END_STREAM
                           Frame(0x1, 0x0, 3, 100) + Frame(0x9, 0x4, 3, 100) +
                           Frame(0x0, 0x1, 3, 16384);
  for (const std::size_t piece : {1u, 7u, 4096u}) {
    H2Inspector fresh({}, t0);
    for (std::size_t i = 0; i < call.size(); i += piece) {
      ASSERT_TRUE(fresh.Feed(call.data() + i, std::min(piece, call.size() - i), t0))
          << fresh.why();
    }
  }
  EXPECT_TRUE(FeedAll(in, call, t0));
  EXPECT_EQ(in.control_frames(), 1u);  // The first SETTINGS; its ack is not counted.
}

TEST(H2InspectorTest, AWrongPrefaceIsRefused) {
  H2Inspector in;
  EXPECT_FALSE(FeedAll(in, "GET / HTTP/1.1\r\n\r\n", H2Inspector::Clock::now()));
  EXPECT_NE(in.why().find("preface"), std::string::npos);
}

TEST(H2InspectorTest, AHeaderBlockThatNeverEndsIsCutAtItsLimit) {
  const auto t0 = H2Inspector::Clock::now();
  H2Inspector in({.max_header_block_bytes = 32 * 1024}, t0);
  ASSERT_TRUE(FeedAll(in, Opening() + Frame(0x1, 0, 1, 16384), t0));
  ASSERT_TRUE(FeedAll(in, Frame(0x9, 0, 1, 16384), t0));  // 32 KiB: at the limit.
  EXPECT_FALSE(FeedAll(in, Frame(0x9, 0, 1, 1), t0));
  EXPECT_NE(in.why().find("header block of more than 32768"), std::string::npos) << in.why();
  EXPECT_FALSE(FeedAll(in, Frame(0x4, 0x1, 0, 0), t0));  // Stays refused.
}

TEST(H2InspectorTest, FramingErrorsAreRefused) {
  const auto t0 = H2Inspector::Clock::now();
  H2Inspector interrupted({}, t0);
  EXPECT_FALSE(FeedAll(interrupted, Opening() + Frame(0x1, 0, 1, 10) + Frame(0x6, 0, 0, 8), t0));
  EXPECT_NE(interrupted.why().find("interrupted"), std::string::npos);
  H2Inspector other_stream({}, t0);
  EXPECT_FALSE(FeedAll(other_stream, Opening() + Frame(0x1, 0, 1, 10) + Frame(0x9, 4, 3, 8), t0));
  H2Inspector stray({}, t0);
  EXPECT_FALSE(FeedAll(stray, Opening() + Frame(0x9, 4, 1, 8), t0));
  H2Inspector big({}, t0);
  EXPECT_FALSE(FeedAll(big, Opening() + Frame(0x0, 0, 1, 16385), t0));
  EXPECT_NE(big.why().find("16385"), std::string::npos);
  H2Inspector push({}, t0);
  EXPECT_FALSE(FeedAll(push, Opening() + Frame(0x5, 4, 1, 4), t0));
}

TEST(H2InspectorTest, ControlFramesHaveABudgetThatTimeAndAnswersRefill) {
  const auto t0 = H2Inspector::Clock::now();
  H2Limits limits;
  limits.control_frames_burst = 10;
  limits.control_frames_per_second = 10;
  limits.control_frame_per_bytes_sent = 1000;
  H2Inspector in(limits, t0);
  ASSERT_TRUE(FeedAll(in, Opening(), t0));  // 1: the SETTINGS.
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(FeedAll(in, Frame(0x6, 0, 0, 8), t0)) << i;
  H2Inspector at_once = in;
  EXPECT_FALSE(FeedAll(at_once, Frame(0x6, 0, 0, 8), t0));  // The 11th at once.
  // Half a second later, 5 more; answers of 3000 bytes earn 3 more.
  const auto later = t0 + 500ms;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(FeedAll(in, Frame(0x3, 0, 1, 4), later)) << i;
  in.Sent(3000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(FeedAll(in, Frame(0x8, 0, 0, 4), later)) << i;
  EXPECT_FALSE(FeedAll(in, Frame(0x0, 0, 1, 0), later));  // Empty DATA counts too.
  EXPECT_NE(in.why().find("19 PING, SETTINGS"), std::string::npos) << in.why();
}

TEST(H2InspectorTest, AcknowledgementsAndRequestsAreNotControlFrames) {
  const auto t0 = H2Inspector::Clock::now();
  H2Limits limits;
  limits.control_frames_burst = 2;
  limits.control_frames_per_second = 0;
  H2Inspector in(limits, t0);
  ASSERT_TRUE(FeedAll(in, Opening(), t0));
  for (std::uint32_t s = 1; s < 2000; s += 2) {
    ASSERT_TRUE(FeedAll(in, Frame(0x6, 0x1, 0, 8) + Frame(0x4, 0x1, 0, 0) +
                                Frame(0x1, 0x4, s, 30) + Frame(0x0, 0x1, s, 5) +
                                Frame(0x0, 0x1, s, 0),
                        t0))
        << in.why();
  }
  EXPECT_EQ(in.control_frames(), 1u);
}

}  // namespace
}  // namespace mt::control
