// CollectiveBook: which collective a Comm runs now (Comm::begin_collective) and the last few
// before it, so that the core can stamp every message of a collective with its fingerprint
// (wire.h), check the fingerprint of every message it matches, and tell a message that
// belongs to a collective this rank has already finished (its peer ran another operation, or
// the same one with another root: a receive this rank never posted).
//
// Collectives run one at a time on a Comm, in sequence order (CommProcessGroup's OpQueue),
// so "finished" is simply "of a lower sequence number than the one running". Until the
// first begin() nothing is stamped or checked: a Comm used directly (tests, tools) behaves
// as before. Sequence numbers are compared as the 31 bits a tag holds, modulo 2^31 (comm.h).
// One book serves one context (comm.h); CollectiveBooks holds a Comm's, by context.
// Thread-safety: begin() and check_for() from the thread that runs the collectives; the rest
// from any.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/op_fingerprint.h"
#include "tdist/thread_annotations.h"
#include "transport/comm.h"

namespace tdist::transport::core {

class CollectiveBook {
 public:
  using Check = tdist::core::OpFingerprint::Words;

  // Collective `seq`, described by `fp`, is the one running from now on.
  void begin(uint64_t seq, const tdist::core::OpFingerprint& fp);
  // The check a message with `tag` carries, or a receive of it expects: the running
  // collective's fingerprint for a collective tag of its sequence number, else empty. For
  // the thread that calls begin() (it posts the collective's messages).
  Check check_for(uint64_t tag) const {
    if (!active_.load(std::memory_order_acquire) || !is_collective(tag) ||
        tag_seq(tag) != seq_.load(std::memory_order_relaxed)) {
      return {};
    }
    return {w0_.load(std::memory_order_relaxed), w1_.load(std::memory_order_relaxed)};
  }
  // What any thread needs to judge a message without a receive, read consistently.
  struct View {
    bool finished = false;  // its collective is before the running one
    Check running;          // the running collective's check if the message is of it
  };
  View view(uint64_t tag) const;
  // The sequence number a collective tag carries.
  static uint64_t tag_seq(uint64_t tag);
  // "all_reduce #41 f32 x1024 sum" for a collective recorded here, else "operation #41".
  std::string describe(uint64_t seq) const;

 private:
  static bool is_collective(uint64_t tag);
  static constexpr size_t kHistory = 16;
  // The history is written by begin() only and read by any thread without a lock: a
  // sequence lock (`version_` odd while an entry changes; readers retry).
  struct Entry {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> w0{0};
    std::atomic<uint64_t> w1{0};
  };
  struct Copy {
    uint64_t seq = 0;
    Check words;
  };
  // The running collective (`back` = 0) or one before it; false when not recorded.
  bool copy(size_t back, Copy* out) const;

  // The running collective, for check_for's thread.
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> seq_{0};
  std::atomic<uint64_t> w0_{0};
  std::atomic<uint64_t> w1_{0};
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> recorded_{0};
  Entry history_[kHistory];
};

// A Comm's books, one per context (comm.h), each made by the first collective of its
// context; a context without one checks nothing. The same interface, by a message's tag.
class CollectiveBooks {
 public:
  using Check = CollectiveBook::Check;

  CollectiveBooks();
  void begin(uint32_t context, uint64_t seq, const tdist::core::OpFingerprint& fp)
      TDIST_EXCLUDES(mu_);
  Check check_for(uint64_t tag) const {
    const CollectiveBook* book = find(tag);
    return book == nullptr ? Check{} : book->check_for(tag);
  }
  CollectiveBook::View view(uint64_t tag) const {
    const CollectiveBook* book = find(tag);
    return book == nullptr || closed(tag) ? CollectiveBook::View{} : book->view(tag);
  }
  // CollectiveBook::describe of the collective a collective tag belongs to.
  std::string describe(uint64_t tag) const;

  // Contexts aborted on their own (Engine::abort_context): true for the first close of
  // `context` (>= 1), which keeps `error`. A closed context's messages are not judged.
  bool close(uint32_t context, std::exception_ptr error) TDIST_EXCLUDES(mu_);
  // Whether the context of `tag` (a message's or a request's) is closed; no lock.
  bool closed(uint64_t tag) const {
    const uint32_t context = tag_context(tag);
    return ((closed_[context / 64].load(std::memory_order_seq_cst) >> (context % 64)) & 1) != 0;
  }
  // The error a closed context's requests fail with.
  std::exception_ptr closed_error(uint64_t tag) const TDIST_EXCLUDES(mu_);

  // Checked messages that arrived before their receive and wait unexpected (the Peers
  // count them), so that begin() has to look for bad ones only when there are any. A Peer
  // counts a message before it calls view(); begin() reads the count after it published
  // the new collective (the book's sequence lock); all three seq_cst, so one of the two
  // sees the other.
  std::atomic<int> early{0};

 private:
  const CollectiveBook* find(uint64_t tag) const {
    return books_[tag_context(tag)].load(std::memory_order_acquire);
  }

  CollectiveBook base_;  // context 0's
  std::array<std::atomic<CollectiveBook*>, kMaxContext + 1> books_{};
  std::array<std::atomic<uint64_t>, 4> closed_{};  // a bit per context
  mutable Mutex mu_;                               // making books, closing contexts
  std::vector<std::unique_ptr<CollectiveBook>> made_ TDIST_GUARDED_BY(mu_);
  std::array<std::exception_ptr, kMaxContext + 1> closed_errors_ TDIST_GUARDED_BY(mu_);
};

// The text of a DesyncError, the lower rank first: "rank 0 called all_reduce #41 f32 x1024
// sum; rank 1 called broadcast #41 f32 x1024 root 0".
std::string desync_text(int rank_a, const std::string& op_a, int rank_b, const std::string& op_b);

}  // namespace tdist::transport::core
