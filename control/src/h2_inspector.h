// What a TLS peer may send the control plane, frame by frame, before its
// bytes reach gRPC.
//
// gRPC 1.51 has published HTTP/2 denial-of-service fixes after it: a
// header block spread over CONTINUATION frames that never ends is
// buffered without limit (32 MiB measured; CVE-2023-33953 covers HPACK
// buffering, later releases the CONTINUATION flood), and frames that each
// make the server queue an answer (PING, SETTINGS) or do work (RST_STREAM
// after HEADERS, the "rapid reset" of CVE-2023-44487) cost the server
// whatever the peer sends. The inspector reads only the 9-byte frame
// headers (never HPACK), so it passes bytes through as they come, and
// says when a connection has gone past one of these bounds; the listener
// then closes it.

#ifndef MT_ASYNCIO_CONTROL_SRC_H2_INSPECTOR_H_
#define MT_ASYNCIO_CONTROL_SRC_H2_INSPECTOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mt::control {

struct H2Limits {
  // The largest frame payload (gRPC advertises HTTP/2's default, 16 KiB,
  // and never more: a larger frame is already a protocol error).
  std::size_t max_frame_bytes = 16 * 1024;
  // One header block: a HEADERS frame and its CONTINUATION frames. The
  // server takes 16 KiB of metadata per call; HPACK only shrinks it.
  std::size_t max_header_block_bytes = 32 * 1024;
  // Frames that ask the server for an answer or for bookkeeping and carry
  // no request: PING, SETTINGS (not their acknowledgements), RST_STREAM,
  // PRIORITY, WINDOW_UPDATE, empty DATA that does not end its stream, and
  // frame types HTTP/2 does not define. A connection may send this many
  // at once, then this many a second, plus one for every
  // `control_frame_per_bytes_sent` bytes the server sent it (a client
  // receiving a large answer sends WINDOW_UPDATEs and pings in step).
  double control_frames_burst = 256;
  double control_frames_per_second = 32;
  std::size_t control_frame_per_bytes_sent = 1024;
};

class H2Inspector {
 public:
  using Clock = std::chrono::steady_clock;

  explicit H2Inspector(H2Limits limits = {}, Clock::time_point now = Clock::now());

  // Takes the next `n` bytes the client sent. False once the connection
  // has passed a limit or broken the framing (then why() says how, and
  // every later call is false too).
  bool Feed(const char* data, std::size_t n, Clock::time_point now = Clock::now());
  // The server sent the client `n` bytes.
  void Sent(std::size_t n) { sent_ += n; }

  const std::string& why() const { return why_; }
  std::uint64_t control_frames() const { return control_frames_; }

 private:
  bool Fail(std::string why);
  // A frame header is complete in header_.
  bool OnFrameHeader(Clock::time_point now);

  const H2Limits limits_;
  const Clock::time_point start_;
  std::size_t preface_seen_ = 0;   // Bytes of the client preface matched.
  unsigned char header_[9] = {};   // The frame header being read.
  std::size_t header_seen_ = 0;
  std::size_t payload_left_ = 0;   // Of the current frame, still to come.
  bool in_header_block_ = false;   // HEADERS without END_HEADERS seen.
  std::uint32_t block_stream_ = 0;
  std::size_t block_bytes_ = 0;
  std::uint64_t control_frames_ = 0;
  std::uint64_t sent_ = 0;
  std::string why_;
};

}  // namespace mt::control

#endif  // MT_ASYNCIO_CONTROL_SRC_H2_INSPECTOR_H_
