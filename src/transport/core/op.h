// Op: the state of one send or receive in the core, and the Request handed to the caller.
//
// Ownership: an Op is shared (shared_ptr) by the caller's CoreRequest and, while pending,
// by its Peer's queues; the caller's buffer is only borrowed. Completion happens exactly
// once, under the owning Peer's lock for that direction (or in abort), and is published
// with a seq_cst store, so a waiter that sees it done also sees the bytes and the error.
// Waiting: CoreRequest::wait hands the Op to the Engine (engine.h), which either drives
// the whole Comm's progress on this thread or sleeps until another driver completes it.
// Cancel on destroy (comm.h): destroying a pending CoreRequest withdraws a receive; a send
// keeps what is left of its payload in a private copy until it is out.
// Any source (comm.h's irecv_any): the Op's `peer` is kAnySource; the Peer whose message
// claims it (any_source.h) sets its source before anything else touches it.
// Thread-safety: complete/done may race freely; one CoreRequest is used by one thread at
// a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "core/block_cache.h"
#include "core/op_fingerprint.h"
#include "transport/comm.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {

class Engine;

class Op {
 public:
  // How a send goes out (wire.h): whole, a rendezvous descriptor (the payload follows
  // when the receiver asks), that payload, or a control frame of the core's own.
  enum class Phase : uint8_t { kEager, kRvRequest, kRvData, kControl };

  // `check`: the fingerprint a send carries, or the one a receive expects (wire.h).
  Op(int peer_rank, bool send, uint64_t op_tag, void* buffer, size_t size,
     tdist::core::OpFingerprint::Words check = {})
      : peer(peer_rank),
        is_send(send),
        tag(op_tag),
        data(static_cast<uint8_t*>(buffer)),
        bytes(size) {
    header[0] = op_tag;
    header[1] = size;
    header[2] = check.w0;
    header[3] = check.w1;
  }

  bool done() const { return done_.load(std::memory_order_seq_cst); }
  // Marks done with `error` (null = success). Later calls do nothing: an Op failed early
  // (Peer::fail_context) may still be written or read out; every completion of one
  // direction holds its Peer's lock for it, so they never race.
  void complete(std::exception_ptr error) {
    if (done_.load(std::memory_order_relaxed)) return;
    error_ = std::move(error);
    done_.store(true, std::memory_order_seq_cst);
  }
  // The error, valid once done().
  const std::exception_ptr& error() const { return error_; }
  // "send to rank 3 (tag 0x.., 8 bytes)", "receive from any rank (tag 0x.., 8 bytes)".
  std::string describe() const;

  // The rank a receive takes its message from: `peer`, or for an any-source receive the
  // rank whose message claimed it (-1 until then).
  int source() const {
    return peer != kAnySource ? peer : claimed_by_.load(std::memory_order_acquire);
  }
  void set_source(int rank) { claimed_by_.store(rank, std::memory_order_release); }

  const int peer;  // kAnySource for irecv_any
  const bool is_send;
  const uint64_t tag;
  uint8_t* data;  // a send's payload moves to `owned` when it is cancelled part-way
  const size_t bytes;
  // What precedes the payload on the wire (header_bytes of `header`: the header, then a
  // rendezvous descriptor or id; a receive keeps only its tag, size and check there),
  // whether the payload follows, the bytes of both written so far, the lane.
  // A device send's DeviceDescriptor follows the RvDescriptor (wire.h).
  uint64_t
      header[kHeaderWords + (sizeof(RvDescriptor) + sizeof(DeviceDescriptor)) / sizeof(uint64_t)];
  size_t header_bytes = kHeaderBytes;
  Phase phase = Phase::kEager;
  bool device = false;  // the buffer is device memory (comm.h's isend_device/irecv_device)
  size_t sent = 0;
  size_t lane = 0;
  std::unique_ptr<uint8_t[]> owned;
  // Rendezvous sends: the id, and the token a single-copy reader checks (wire.h); it is
  // zeroed when the send is cancelled, before the caller's buffer may go away.
  uint64_t rv_id = 0;
  std::atomic<uint64_t> rv_token{0};
  // Point-to-point receives: the order they were posted in, across every peer (any_source.h),
  // which decides between a receive of one source and one of any.
  uint64_t post_seq = 0;
  // A collective receive whose wait sent its peer a probe (wire.h's kProbeTag): once only.
  mutable std::atomic<bool> probed{false};

  const DeviceDescriptor& device_descriptor() const {
    return *reinterpret_cast<const DeviceDescriptor*>(
        &header[kHeaderWords + sizeof(RvDescriptor) / sizeof(uint64_t)]);
  }
  tdist::core::OpFingerprint::Words check() const { return {header[2], header[3]}; }
  bool payload_follows() const { return phase == Phase::kEager || phase == Phase::kRvData; }
  size_t wire_bytes() const { return header_bytes + (payload_follows() ? bytes : 0); }

 private:
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  std::atomic<int> claimed_by_{-1};  // an any-source receive's source, once claimed
};

// A new Op (its memory from this thread's block cache: one per send and receive).
template <typename... Args>
std::shared_ptr<Op> make_op(Args&&... args) {
  return std::allocate_shared<Op>(tdist::core::CachingAllocator<Op>(), std::forward<Args>(args)...);
}

class CoreRequest final : public Request {
 public:
  // Its memory from this thread's block cache too (the class is final: always its size).
  static void* operator new(size_t /*bytes*/) { return Blocks::get(); }
  static void operator delete(void* p) { Blocks::put(p); }

  // `engine` owns the Peer the Op went to (null for a request that failed at once). A
  // null `op`: a send that went out whole when it was posted (complete, no error).
  CoreRequest(Engine* engine, std::shared_ptr<Op> op) : engine_(engine), op_(std::move(op)) {}
  ~CoreRequest() override;
  void wait(Deadline deadline) override;
  bool test() override;
  int source() const override;

 private:
  using Blocks = tdist::core::BlockCache<32, alignof(std::max_align_t)>;

  Engine* engine_;
  std::shared_ptr<Op> op_;
};
static_assert(sizeof(CoreRequest) <= 32, "CoreRequest's block size");

}  // namespace tdist::transport::core
