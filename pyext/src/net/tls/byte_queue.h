#ifndef MT_PYEXT_SRC_NET_TLS_BYTE_QUEUE_H_
#define MT_PYEXT_SRC_NET_TLS_BYTE_QUEUE_H_

#include <cstddef>
#include <cstring>
#include <string>

namespace mt::tls {

// A FIFO of bytes with a view of its front: what a TLS connection has been
// fed and not consumed, or has produced and not had sent. Appends and
// takes are amortized O(n); the front is compacted once more than half of
// the storage is consumed, so a queue drained as fast as it fills stays
// the size of what is in flight.
class ByteQueue {
 public:
  std::size_t size() const { return data_.size() - offset_; }
  bool empty() const { return size() == 0; }
  const char* front() const { return data_.data() + offset_; }

  void Append(const char* bytes, std::size_t n) { data_.append(bytes, n); }

  // Copies up to `n` bytes from the front into `out` and consumes them.
  std::size_t Take(char* out, std::size_t n) {
    if (n > size()) n = size();
    std::memcpy(out, front(), n);
    Consume(n);
    return n;
  }

  void Consume(std::size_t n) {
    offset_ += n < size() ? n : size();
    if (offset_ == data_.size()) {
      data_.clear();
      offset_ = 0;
      // A queue that once held a large burst gives its memory back.
      if (data_.capacity() > kKeepCapacity) std::string().swap(data_);
    } else if (offset_ > data_.size() / 2) {
      data_.erase(0, offset_);
      offset_ = 0;
    }
  }

 private:
  static constexpr std::size_t kKeepCapacity = 256 * 1024;
  std::string data_;
  std::size_t offset_ = 0;
};

}  // namespace mt::tls

#endif  // MT_PYEXT_SRC_NET_TLS_BYTE_QUEUE_H_
