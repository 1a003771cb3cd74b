// AnySourceQueue: an Engine's receives posted for any source (comm.h's irecv_any) that no
// message has claimed yet, in posting order; and the two counters that order every
// point-to-point receive and every unexpected point-to-point message across the Peers.
//
// Matching (MPI's rule, comm.h's "Any source"): a message goes to the earliest posted receive
// that can take it. A Peer with a message of tag T compares its own first receive for T
// (its posted_ is in posting order per tag) with the first receive for T here, by post
// number, and takes the earlier (claim(), which removes it from here and sets its source).
// A receive posted here first takes the messages that arrived before it: the Engine offers
// it, and any receive for T posted before it, each Peer's unexpected messages of T, earliest
// arrival first (Peer::give_unexpected). A receive posted for one source first lets the
// earlier receives here take that source's unexpected messages (Peer::match_posted_locked).
// Either way one of the two sees the other: a Peer reads empty() under its receive lock,
// and the Engine offers a new receive the Peers' messages under theirs after post().
//
// Ownership: holds the pending Ops (shared with their Requests). Thread-safety: one mutex;
// a Peer calls claim() with its receive lock held (that lock first, never the reverse).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <memory>

#include "tdist/thread_annotations.h"
#include "transport/core/op.h"

namespace tdist::transport::core {

class AnySourceQueue {
 public:
  static constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();

  // The next post number (Op::post_seq) of a point-to-point receive of one source.
  uint64_t next_post() { return next_post_.fetch_add(1, std::memory_order_relaxed); }
  // The next arrival stamp of an unexpected point-to-point message.
  uint64_t next_arrival() { return next_arrival_.fetch_add(1, std::memory_order_relaxed); }

  // Whether no any-source receive waits (no lock; the common case of every message).
  bool empty() const { return pending_.load(std::memory_order_acquire) == 0; }

  // Numbers `op` (post_seq) and appends it. False when the queue failed: `op` is then
  // complete with the error.
  bool post(const std::shared_ptr<Op>& op) TDIST_EXCLUDES(mu_);
  // The earliest waiting receive for `tag` posted before `posted_before` (kNone: any),
  // removed from the queue with its source set to `source`; null when there is none.
  std::shared_ptr<Op> claim(uint64_t tag, uint64_t posted_before, int source) TDIST_EXCLUDES(mu_);
  // Removes `op` if it still waits (true); false once a Peer claimed it or it failed.
  bool withdraw(const Op& op) TDIST_EXCLUDES(mu_);
  // Fails every waiting receive and every later post with `error` (the first error stays).
  void fail_all(const std::exception_ptr& error) TDIST_EXCLUDES(mu_);
  // Fails the waiting receives of one context (comm.h) with `error`; returns how many.
  int fail_context(uint32_t context, const std::exception_ptr& error) TDIST_EXCLUDES(mu_);

 private:
  std::atomic<uint64_t> next_post_{0};
  std::atomic<uint64_t> next_arrival_{0};
  std::atomic<int> pending_{0};  // ops_.size(), written under mu_
  Mutex mu_;
  std::deque<std::shared_ptr<Op>> ops_ TDIST_GUARDED_BY(mu_);
  std::exception_ptr error_ TDIST_GUARDED_BY(mu_);
};

}  // namespace tdist::transport::core
