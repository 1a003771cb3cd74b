// CollectiveBook (collective_book.h).
#include "transport/core/collective_book.h"

#include "tdist/error.h"
#include "transport/comm.h"

namespace tdist::transport::core {

void CollectiveBook::begin(uint64_t seq, const tdist::core::OpFingerprint& fp) {
  const uint64_t wire_seq = tag_seq(collective_tag(seq, 0));
  const Check words = fp.encode();
  MutexLock lock(mu_);
  history_[recorded_ % kHistory] = Entry{wire_seq, fp};
  ++recorded_;
  w0_.store(words.w0, std::memory_order_relaxed);
  w1_.store(words.w1, std::memory_order_relaxed);
  seq_.store(wire_seq, std::memory_order_relaxed);
  active_.store(true, std::memory_order_release);
}

CollectiveBook::View CollectiveBook::view(uint64_t tag) const {
  MutexLock lock(mu_);
  if (recorded_ == 0 || !is_collective(tag)) return {};
  const Entry& running = history_[(recorded_ - 1) % kHistory];
  const uint64_t seq = tag_seq(tag);
  if (seq < running.seq) return {true, {}};
  if (seq == running.seq) return {false, running.fp.encode()};
  return {};
}

uint64_t CollectiveBook::tag_seq(uint64_t tag) { return (tag >> 24) & ((uint64_t{1} << 39) - 1); }

bool CollectiveBook::is_collective(uint64_t tag) { return (tag & kP2PTagBit) == 0; }

std::string CollectiveBook::describe(uint64_t seq) const {
  MutexLock lock(mu_);
  for (size_t i = 0; i < kHistory && i < recorded_; ++i) {
    const Entry& e = history_[(recorded_ - 1 - i) % kHistory];
    if (e.seq == seq) return e.fp.describe(seq);
  }
  return detail::str_cat("operation #", seq);
}

std::string desync_text(int rank_a, const std::string& op_a, int rank_b, const std::string& op_b) {
  if (rank_b < rank_a) return desync_text(rank_b, op_b, rank_a, op_a);
  return detail::str_cat("rank ", rank_a, " called ", op_a, "; rank ", rank_b, " called ", op_b);
}

}  // namespace tdist::transport::core
