// CollectiveBook (collective_book.h).
#include "transport/core/collective_book.h"

#include "tdist/error.h"
#include "transport/comm.h"

namespace tdist::transport::core {

void CollectiveBook::begin(uint64_t seq, const tdist::core::OpFingerprint& fp) {
  const uint64_t wire_seq = tag_seq(collective_tag(seq, 0));
  const Check words = fp.encode();
  const uint64_t n = recorded_.load(std::memory_order_relaxed);
  Entry& e = history_[n % kHistory];
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);  // odd: changing
  std::atomic_thread_fence(std::memory_order_release);
  e.seq.store(wire_seq, std::memory_order_relaxed);
  e.w0.store(words.w0, std::memory_order_relaxed);
  e.w1.store(words.w1, std::memory_order_relaxed);
  w0_.store(words.w0, std::memory_order_relaxed);
  w1_.store(words.w1, std::memory_order_relaxed);
  seq_.store(wire_seq, std::memory_order_relaxed);
  recorded_.store(n + 1, std::memory_order_relaxed);
  version_.store(v + 2);  // seq_cst: see `early` in the header
  active_.store(true, std::memory_order_release);
}

bool CollectiveBook::copy(size_t back, Copy* out) const {
  while (true) {
    const uint64_t v1 = version_.load();  // seq_cst: see `early` in the header
    if (v1 % 2 == 0) {
      const uint64_t n = recorded_.load(std::memory_order_relaxed);
      if (back >= n || back >= kHistory) return false;
      const Entry& e = history_[(n - 1 - back) % kHistory];
      out->seq = e.seq.load(std::memory_order_relaxed);
      out->words = {e.w0.load(std::memory_order_relaxed), e.w1.load(std::memory_order_relaxed)};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (version_.load(std::memory_order_relaxed) == v1) return true;
    }
  }
}

CollectiveBook::View CollectiveBook::view(uint64_t tag) const {
  Copy running;
  if (!is_collective(tag) || !copy(0, &running)) return {};
  // How far the message's collective is behind the running one, modulo 2^31.
  constexpr uint64_t kMask = (uint64_t{1} << kTagSeqBits) - 1;
  const uint64_t behind = (running.seq - tag_seq(tag)) & kMask;
  if (behind == 0) return {false, running.words};
  if (behind < (kMask + 1) / 2) return {true, {}};
  return {};  // ahead: a later collective's
}

uint64_t CollectiveBook::tag_seq(uint64_t tag) {
  return (tag >> 24) & ((uint64_t{1} << kTagSeqBits) - 1);
}

bool CollectiveBook::is_collective(uint64_t tag) { return (tag & kP2PTagBit) == 0; }

std::string CollectiveBook::describe(uint64_t seq) const {
  Copy c;
  for (size_t back = 0; copy(back, &c); ++back) {
    if (c.seq == seq) return tdist::core::OpFingerprint::decode(c.words).describe(seq);
  }
  return detail::str_cat("operation #", seq);
}

CollectiveBooks::CollectiveBooks() { books_[0].store(&base_, std::memory_order_relaxed); }

void CollectiveBooks::begin(uint32_t context, uint64_t seq, const tdist::core::OpFingerprint& fp) {
  CollectiveBook* book = books_[context].load(std::memory_order_acquire);
  if (book == nullptr) {  // the context's first collective
    TDIST_CHECK(context <= kMaxContext, InvalidArgument, "transport: context ", context,
                " is outside 0..", kMaxContext);
    MutexLock lock(mu_);
    book = books_[context].load(std::memory_order_relaxed);
    if (book == nullptr) {
      book = made_.emplace_back(std::make_unique<CollectiveBook>()).get();
      books_[context].store(book, std::memory_order_release);
    }
  }
  book->begin(seq, fp);
}

std::string CollectiveBooks::describe(uint64_t tag) const {
  const uint64_t seq = CollectiveBook::tag_seq(tag);
  const CollectiveBook* book = find(tag);
  return book == nullptr ? detail::str_cat("operation #", seq) : book->describe(seq);
}

bool CollectiveBooks::close(uint32_t context, std::exception_ptr error) {
  TDIST_CHECK(context >= 1 && context <= kMaxContext, InvalidArgument, "transport: context ",
              context, " is outside 1..", kMaxContext);
  MutexLock lock(mu_);
  if (closed_errors_[context]) return false;
  closed_errors_[context] = std::move(error);
  closed_[context / 64].fetch_or(uint64_t{1} << (context % 64));  // seq_cst: see engine.cc
  return true;
}

std::exception_ptr CollectiveBooks::closed_error(uint64_t tag) const {
  MutexLock lock(mu_);
  return closed_errors_[tag_context(tag)];
}

std::string desync_text(int rank_a, const std::string& op_a, int rank_b, const std::string& op_b) {
  if (rank_b < rank_a) return desync_text(rank_b, op_b, rank_a, op_a);
  return detail::str_cat("rank ", rank_a, " called ", op_a, "; rank ", rank_b, " called ", op_b);
}

}  // namespace tdist::transport::core
