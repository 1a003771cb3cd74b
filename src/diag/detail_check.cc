// TDIST_DEBUG=detail (process_group.h): before a collective is numbered, every rank of the
// group publishes its fingerprint of it in the group's store and reads everyone's; any
// difference is a DesyncError on every rank, quoting the first rank that differs from rank 0
// and rank 0, before anything is sent (so the group stays usable). Like the fingerprints on
// the wire, but it also sees what the caller adds (CollectiveDetail: the torch layer's
// tensor shapes) and works for every backend, mpi and a user's included. CallSite, the scope
// that names a collective's call site (TDIST_DEBUG=callsite, also under detail), lives here too.
//
// Keys of check n, under "debug_detail/<n>/": <r>, set by rank r: "<w0> <w1> <seq>\t<detail>"
// (the fingerprint's wire words, hexadecimal). Rank r deletes its key of check n - 1 once it
// has read every key of check n: by then every rank has read check n - 1.
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/call_site.h"
#include "core/op_fingerprint.h"
#include "tdist/deadline.h"
#include "tdist/error.h"
#include "tdist/process_group.h"
#include "tdist/settings.h"
#include "tdist/store.h"

namespace tdist {
namespace {

thread_local const CollectiveDetail* innermost = nullptr;
thread_local const CallSite* outermost_site = nullptr;

struct Published {
  core::OpFingerprint::Words words;
  unsigned long long seq = 0;
  std::string detail;
};

std::string encode(const core::OpFingerprint::Words& w, uint64_t seq, const std::string& detail) {
  char head[64];
  std::snprintf(head, sizeof(head), "%llx %llx %llu\t", static_cast<unsigned long long>(w.w0),
                static_cast<unsigned long long>(w.w1), static_cast<unsigned long long>(seq));
  return head + detail;
}

Published decode(const std::string& text) {
  Published p;
  unsigned long long w0 = 0;
  unsigned long long w1 = 0;
  const size_t tab = text.find('\t');
  TDIST_CHECK(tab != std::string::npos &&
                  std::sscanf(text.c_str(), "%llx %llx %llu", &w0, &w1, &p.seq) == 3,
              Error, "TDIST_DEBUG=detail: a rank published an unreadable fingerprint '", text, "'");
  p.words = {w0, w1};
  p.detail = text.substr(tab + 1);
  return p;
}

// "all_reduce #3 f32 x1024 sum shape [32, 32] at train.cc:88": the call site last.
std::string describe(const Published& p) {
  core::OpFingerprint fp = core::OpFingerprint::decode(p.words);
  const uint16_t site = std::exchange(fp.site, 0);
  std::string text = fp.describe(p.seq);
  if (!p.detail.empty()) text += " " + p.detail;
  if (site != 0) text += " at " + core::call_site_text(site);
  return text;
}

bool agree(const Published& a, const Published& b) {
  return a.seq == b.seq && core::fingerprints_agree(a.words, b.words) && a.detail == b.detail;
}

}  // namespace

CallSite::CallSite(const char* file, uint32_t line)
    : file_(file), line_(line), outermost_(outermost_site == nullptr) {
  if (outermost_) outermost_site = this;
}

CallSite::~CallSite() {
  if (outermost_) outermost_site = nullptr;
}

const CallSite* CallSite::outermost() { return outermost_site; }

CollectiveDetail::CollectiveDetail(std::string text) : text_(std::move(text)), outer_(innermost) {
  innermost = this;
}

CollectiveDetail::~CollectiveDetail() { innermost = outer_; }

const std::string& CollectiveDetail::current() {
  static const std::string kNone;
  return innermost != nullptr ? innermost->text_ : kNone;
}

void ProcessGroup::detail_check(const core::OpFingerprint& fp) {
  const uint64_t n = detail_checks_.fetch_add(1, std::memory_order_relaxed);
  if (size_ == 1) return;
  const uint64_t seq = next_seq();
  const std::string base = detail::str_cat("debug_detail/", n, "/");
  auto key = [&](int r) { return base + std::to_string(r); };
  // "rank 2", or "rank 1 (global rank 3)" where the numbers differ.
  auto name = [&](int r) {
    const int g = global_rank(r);
    return g == r ? detail::str_cat("rank ", r)
                  : detail::str_cat("rank ", r, " (global rank ", g, ")");
  };
  const std::string mine = encode(fp.encode(), seq, CollectiveDetail::current());
  store_->set(key(rank_), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(r));
  const std::string context =
      detail::str_cat(name(rank_), " of group ", name_, " (", backend_name(),
                      "), TDIST_DEBUG=detail check of ", fp.describe(seq), ": ");
  try {
    store_->wait(keys, timeout_ > std::chrono::hours(24 * 365) ? Deadline::never()
                                                               : Deadline::after(timeout_));
  } catch (const TimeoutError&) {
    std::string missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_->check({key(r)})) missing += (missing.empty() ? "" : ", ") + name(r);
    }
    TDIST_THROW(TimeoutError, context, "not called within ", timeout_.count(), " ms by ", missing);
  }
  const std::vector<Bytes> values = store_->multi_get(keys);
  if (n > 0) store_->delete_key(detail::str_cat("debug_detail/", n - 1, "/", rank_));
  std::vector<Published> all;
  for (const Bytes& v : values) all.push_back(decode(to_string(v)));
  for (int r = 1; r < size_; ++r) {
    if (agree(all[0], all[static_cast<size_t>(r)])) continue;
    TDIST_THROW(DesyncError, context, name(0), " called ", describe(all[0]), "; ", name(r),
                " called ", describe(all[static_cast<size_t>(r)]));
  }
}

}  // namespace tdist
