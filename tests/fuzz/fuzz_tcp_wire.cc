// fuzz_tcp_wire: the transport core's framed messages (transport/core/wire.h) as its
// receive side (peer_recv.cc) parses them from a peer. Rank 0 of a 2-rank Engine gets
// FuzzChannels as its lanes to rank 1: each lane's read() hands out its part of the input
// (in chunks of a chosen size), then the end of the stream; writes go nowhere. Before
// that, the input names the receives and sends rank 0 posts (some before anything is
// read, some after, some withdrawn), so messages meet posted receives, arrive unexpected,
// and rendezvous and control frames meet the sends they refer to. Every request must
// complete or fail with PeerError/DesyncError well before its deadline: a TimeoutError is
// a hang and aborts.
//
// Input: config(1) nops(1) nops * op(12) lane_bytes(2 per lane but the last) streams.
//   config: lanes = 1 + bits 0-1 % 3; bit 2: the lanes offer peek (as shm's do);
//           bits 3-5: read chunk size; bit 6: read_remote works (zeroes; for even addresses);
//           bit 7: collective 1 (an f32 all_reduce of 4 elements) runs: receives of its tags
//           expect its fingerprint, and checked messages of collective 0 are stale
//   op: kind(1: recv before, recv after, recv withdrawn, send) bytes(u16 LE, ×16 when kind
//       bit 4) tag(u64 LE, its low byte alone when kind bit 5: small tags meet small tags)
// A peer's header may announce up to 16 TiB before any payload: operator new[] here
// refuses more than 64 MiB with bad_alloc (ASan would otherwise end the process), which
// the core must turn into a PeerError. FUZZ_LOG=1 keeps tdist's log on (TDIST_LOG_LEVEL), to
// see why the transport aborted on an input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/logging.h"
#include "transport/core/channel.h"
#include "transport/core/engine.h"

void* operator new[](std::size_t bytes) {
  if (bytes > (size_t{64} << 20)) throw std::bad_alloc();
  void* p = std::malloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

using namespace tdist;
using namespace tdist::transport;
using namespace tdist::transport::core;

constexpr size_t kChunks[] = {1, 3, 7, 16, 64, 1000, 65536, SIZE_MAX};
constexpr auto kWaitTimeout = std::chrono::seconds(5);

class FuzzChannel final : public Channel {
 public:
  FuzzChannel(const uint8_t* data, size_t size, size_t chunk, bool peekable, bool remote)
      : data_(data), size_(size), chunk_(chunk), peekable_(peekable), remote_(remote) {}

  const char* kind() const override { return "fuzz"; }
  std::string describe() const override { return "fuzz"; }
  size_t write(const iovec* iov, size_t count, std::string*) override {
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) total += iov[i].iov_len;
    return total;
  }
  size_t read(const iovec* iov, size_t count, bool* eof, std::string*) override {
    if (pos_ == size_) {
      *eof = true;
      ended_ = true;
      return 0;
    }
    size_t budget = std::min(chunk_, size_ - pos_);
    size_t got = 0;
    for (size_t i = 0; i < count && budget > 0; ++i) {
      const size_t n = std::min(budget, iov[i].iov_len);
      std::memcpy(iov[i].iov_base, data_ + pos_, n);
      pos_ += n;
      got += n;
      budget -= n;
    }
    return got;
  }
  size_t peek(const uint8_t** data) override {
    if (!peekable_) return 0;
    *data = data_ + pos_;
    return std::min(chunk_, size_ - pos_);
  }
  void consume(size_t bytes) override {
    if (bytes > size_ - pos_) std::abort();  // more than peek offered
    pos_ += bytes;
  }
  bool readable() override { return !ended_; }
  bool writable() override { return true; }
  size_t rendezvous_bytes() const override { return 256; }
  size_t single_copy_bytes() const override { return remote_ ? 1024 : 0; }
  bool read_remote(void* dest, uint64_t remote_address, size_t bytes) override {
    if (!remote_ || (remote_address & 1) != 0) return false;
    std::memset(dest, 0, bytes);
    return true;
  }
  void arm(bool) override {}
  void disarm() override {}
  pollfd poll_for(bool, bool) override { return pollfd{-1, 0, 0}; }
  void on_poll(short) override {}
  void close(Deadline) override {}
  void shut_down() override {}

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  size_t chunk_;
  bool peekable_, remote_;
  bool ended_ = false;
};

struct Posting {
  uint8_t kind;
  size_t bytes;
  uint64_t tag;
};

template <typename T>
T take(const uint8_t*& data, size_t& size) {
  T value = 0;
  const size_t n = std::min(sizeof(T), size);
  for (size_t i = 0; i < n; ++i) value |= static_cast<T>(T{data[i]} << (8 * i));
  data += n;
  size -= n;
  return value;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_tcp_wire: %s\n", what.c_str());
  std::abort();
}

// Waits for `request`: success, PeerError or DesyncError; never the deadline.
void finish(RequestPtr& request) {
  try {
    request->wait(Deadline::after(kWaitTimeout));
  } catch (const TimeoutError& e) {
    fail(std::string("a request hung: ") + e.what());
  } catch (const PeerError&) {
  } catch (const DesyncError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (std::getenv("FUZZ_LOG") == nullptr) set_log_level(LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t config = take<uint8_t>(data, size);
  const size_t nlanes = 1 + (config & 3) % 3;
  const bool peekable = (config & 4) != 0;
  const size_t chunk = kChunks[(config >> 3) & 7];
  const bool remote = (config & 64) != 0;
  const bool checked = (config & 128) != 0;
  std::vector<Posting> ops(take<uint8_t>(data, size) % 9);
  for (Posting& op : ops) {
    op.kind = take<uint8_t>(data, size);
    op.bytes = take<uint16_t>(data, size);
    if ((op.kind & 16) != 0) op.bytes *= 16;
    op.tag = take<uint64_t>(data, size);
    if ((op.kind & 32) != 0) op.tag &= 0xff;
  }
  std::vector<size_t> lane_bytes(nlanes);
  for (size_t i = 0; i + 1 < nlanes; ++i)
    lane_bytes[i] = std::min<size_t>(take<uint16_t>(data, size), size);
  std::vector<std::vector<std::unique_ptr<Channel>>> channels(2);
  for (size_t i = 0; i < nlanes; ++i) {
    const size_t n = i + 1 < nlanes ? std::min(lane_bytes[i], size) : size;
    channels[1].push_back(std::make_unique<FuzzChannel>(data, n, chunk, peekable, remote));
    data += n;
    size -= n;
  }

  auto comm = std::make_unique<Engine>(0, 2, std::move(channels));
  if (checked) {
    tdist::core::OpFingerprint fp;
    fp.kind = tdist::core::OpKind::kAllReduce;
    fp.dtype = DType::kF32;
    fp.count = 4;
    fp.has_reduce = true;
    comm->begin_collective(1, fp);  // nothing arrived yet: no stale message to find
  }
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  std::vector<RequestPtr> early, late;
  auto post = [&](const Posting& op, std::vector<RequestPtr>& into) {
    buffers.push_back(std::make_unique<uint8_t[]>(op.bytes));
    try {
      if ((op.kind & 3) == 3) {
        into.push_back(comm->isend(1, op.tag, buffers.back().get(), op.bytes));
      } else {
        into.push_back(comm->irecv(1, op.tag, buffers.back().get(), op.bytes));
      }
      return true;
    } catch (const InvalidArgument&) {  // a reserved tag
      return false;
    }
  };
  for (const Posting& op : ops) {
    if ((op.kind & 3) != 1 && post(op, early) && (op.kind & 3) == 2) {
      early.pop_back();  // withdrawn at once
    }
  }
  for (RequestPtr& r : early) finish(r);
  for (const Posting& op : ops) {
    if ((op.kind & 3) == 1) post(op, late);
  }
  for (RequestPtr& r : late) finish(r);
  late.clear();
  early.clear();
  comm.reset();
  return 0;
}
