#include "control/src/h2_inspector.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace mt::control {
namespace {

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113, section 6) and the flags the inspector reads.
constexpr unsigned char kData = 0x0;
constexpr unsigned char kHeaders = 0x1;
constexpr unsigned char kPriority = 0x2;
constexpr unsigned char kRstStream = 0x3;
constexpr unsigned char kSettings = 0x4;
constexpr unsigned char kPushPromise = 0x5;
constexpr unsigned char kPing = 0x6;
constexpr unsigned char kGoaway = 0x7;
constexpr unsigned char kWindowUpdate = 0x8;
constexpr unsigned char kContinuation = 0x9;
constexpr unsigned char kFlagEndStream = 0x1;
constexpr unsigned char kFlagAck = 0x1;
constexpr unsigned char kFlagEndHeaders = 0x4;

}  // namespace

H2Inspector::H2Inspector(H2Limits limits, Clock::time_point now) : limits_(limits), start_(now) {}

bool H2Inspector::Fail(std::string why) {
  if (why_.empty()) why_ = std::move(why);
  return false;
}

bool H2Inspector::Feed(const char* data, std::size_t n, Clock::time_point now) {
  if (!why_.empty()) return false;
  while (n > 0) {
    if (preface_seen_ < kPreface.size()) {
      const std::size_t take = std::min(n, kPreface.size() - preface_seen_);
      if (std::memcmp(data, kPreface.data() + preface_seen_, take) != 0) {
        return Fail("not an HTTP/2 client (the connection preface is wrong)");
      }
      preface_seen_ += take;
      data += take;
      n -= take;
      continue;
    }
    if (payload_left_ > 0) {
      const std::size_t take = std::min(n, payload_left_);
      payload_left_ -= take;
      data += take;
      n -= take;
      continue;
    }
    const std::size_t take = std::min(n, sizeof(header_) - header_seen_);
    std::memcpy(header_ + header_seen_, data, take);
    header_seen_ += take;
    data += take;
    n -= take;
    if (header_seen_ == sizeof(header_)) {
      header_seen_ = 0;
      if (!OnFrameHeader(now)) return false;
    }
  }
  return true;
}

bool H2Inspector::OnFrameHeader(Clock::time_point now) {
  const std::size_t length = (std::size_t{header_[0]} << 16) | (std::size_t{header_[1]} << 8) |
                             std::size_t{header_[2]};
  const unsigned char type = header_[3];
  const unsigned char flags = header_[4];
  const std::uint32_t stream = ((std::uint32_t{header_[5]} & 0x7f) << 24) |
                               (std::uint32_t{header_[6]} << 16) |
                               (std::uint32_t{header_[7]} << 8) | std::uint32_t{header_[8]};
  payload_left_ = length;
  if (length > limits_.max_frame_bytes) {
    return Fail(absl::StrCat("a frame of ", length, " bytes (the limit is ",
                             limits_.max_frame_bytes, ")"));
  }
  if (in_header_block_) {
    // Nothing may come between a HEADERS frame and the CONTINUATION that
    // ends its block (RFC 9113, section 6.10).
    if (type != kContinuation || stream != block_stream_) {
      return Fail("a header block interrupted before its END_HEADERS");
    }
    block_bytes_ += length;
    if (block_bytes_ > limits_.max_header_block_bytes) {
      return Fail(absl::StrCat("a header block of more than ", limits_.max_header_block_bytes,
                               " bytes (HEADERS and CONTINUATION frames)"));
    }
    if ((flags & kFlagEndHeaders) != 0) in_header_block_ = false;
    return true;
  }
  bool control = false;
  switch (type) {
    case kHeaders:
      if ((flags & kFlagEndHeaders) == 0) {
        in_header_block_ = true;
        block_stream_ = stream;
        block_bytes_ = length;
      }
      return true;
    case kContinuation:
      return Fail("a CONTINUATION frame with no header block open");
    case kPushPromise:
      return Fail("a PUSH_PROMISE frame from a client");
    case kData:
      control = length == 0 && (flags & kFlagEndStream) == 0;
      break;
    case kSettings:
    case kPing:
      control = (flags & kFlagAck) == 0;  // Acknowledgements answer the server.
      break;
    case kGoaway:
      return true;  // The peer is leaving.
    case kPriority:
    case kRstStream:
    case kWindowUpdate:
    default:  // Types HTTP/2 does not define are ignored by gRPC, but cost a read.
      control = true;
      break;
  }
  if (!control) return true;
  ++control_frames_;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double allowed = limits_.control_frames_burst +
                         limits_.control_frames_per_second * seconds +
                         static_cast<double>(sent_ / limits_.control_frame_per_bytes_sent);
  if (static_cast<double>(control_frames_) > allowed) {
    return Fail(absl::StrCat(control_frames_,
                             " PING, SETTINGS, RST_STREAM, PRIORITY, WINDOW_UPDATE or empty DATA "
                             "frames in ",
                             static_cast<int>(seconds * 1000), " ms (the limit is ",
                             static_cast<int>(limits_.control_frames_burst), " at once, then ",
                             static_cast<int>(limits_.control_frames_per_second), " a second)"));
  }
  return true;
}

}  // namespace mt::control
