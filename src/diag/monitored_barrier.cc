// ProcessGroup::monitored_barrier (process_group.h), through the group's store only, so
// that every backend (a user's registered one included) has it without a collective.
//
// Keys of call n, under "monitored_barrier/<n>/":
//   arrived/<r>  set by rank r > 0 on arrival; rank 0 deletes them after its wait
//   result       set by rank 0: "ok" or "error:<text>"
//   done         add()ed by each rank > 0 once it read the result; the one that makes it
//                size() - 1 deletes result and done
// A failed call's keys may stay (a missing rank never reads the result).
#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "diag/error_context.h"
#include "tdist/deadline.h"
#include "tdist/error.h"
#include "tdist/process_group.h"

namespace tdist {
namespace {

// How much longer than rank 0 the other ranks wait for its result: covers rank 0's
// publishing after its own deadline (a store round trip), so that they report what rank
// 0 found rather than rank 0 itself.
constexpr std::chrono::milliseconds kResultMargin{1000};

constexpr std::string_view kOk = "ok";
constexpr std::string_view kErrorPrefix = "error:";

// Timeouts beyond a year never expire (nor overflow Clock's nanoseconds, margin added).
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

// A deadline `timeout` from now.
Deadline deadline_after(std::chrono::milliseconds timeout) {
  if (timeout > kForever) return Deadline::never();
  return Deadline::after(timeout);
}

}  // namespace

void ProcessGroup::monitored_barrier(std::optional<std::chrono::milliseconds> timeout,
                                     bool wait_all_ranks) {
  const std::chrono::milliseconds limit = timeout.value_or(timeout_);
  TDIST_CHECK(limit.count() >= 0, InvalidArgument, "monitored_barrier: timeout ", limit.count(),
              " ms is negative");
  const uint64_t n = monitored_barriers_.fetch_add(1, std::memory_order_relaxed);
  if (size_ == 1) return;

  const std::string context =
      detail::str_cat("monitored_barrier #", n, " (group of ", size_, ", ", backend_name(), ")");
  // "rank 2", or "rank 1 (global rank 3)" where the numbers differ.
  auto name = [&](int r) {
    const int g = global_rank(r);
    return g == r ? std::to_string(r) : detail::str_cat(r, " (global rank ", g, ")");
  };
  const std::string base = detail::str_cat("monitored_barrier/", n, "/");
  auto arrived_key = [&](int r) { return detail::str_cat(base, "arrived/", r); };
  const std::string result_key = base + "result";
  const std::string done_key = base + "done";

  std::string failure;  // the error text, without the location TDIST_THROW appends
  try {
    if (rank_ == 0) {
      const Deadline deadline = deadline_after(limit);
      std::vector<std::string> keys;
      for (int r = 1; r < size_; ++r) keys.push_back(arrived_key(r));
      bool all_arrived = true;
      try {
        store_->wait(keys, deadline);
      } catch (const TimeoutError&) {
        all_arrived = false;
      }
      if (!all_arrived) {
        // Who is missing, in rank order (a rank that arrived just after the deadline
        // counts as arrived: it did not hold the others up).
        std::vector<int> missing;
        for (int r = 1; r < size_; ++r) {
          if (!store_->check({arrived_key(r)})) {
            missing.push_back(r);
            if (!wait_all_ranks) break;
          }
        }
        if (!missing.empty()) {
          std::string who = missing.size() == 1 ? "rank " : "ranks ";
          for (size_t i = 0; i < missing.size(); ++i) {
            who += (i == 0 ? "" : ", ") + name(missing[i]);
          }
          failure =
              detail::str_cat(context, ": ", who, " did not arrive within ", limit.count(), " ms");
        }
      }
      store_->set(result_key,
                  failure.empty() ? std::string(kOk) : std::string(kErrorPrefix) + failure);
      for (const std::string& key : keys) store_->delete_key(key);
    } else {
      const std::chrono::milliseconds answer_limit =
          limit > kForever ? limit : limit + kResultMargin;
      const Deadline deadline = deadline_after(answer_limit);
      store_->set(arrived_key(rank_), std::string_view("1"));
      Bytes result;
      try {
        result = store_->get(result_key, deadline);
      } catch (const TimeoutError&) {
        TDIST_THROW(TimeoutError, context, ": rank ", name(0), " did not answer rank ", name(rank_),
                    " within ", answer_limit.count(), " ms (timeout ", limit.count(), " ms + ",
                    kResultMargin.count(), " ms)");
      }
      const std::string text = to_string(result);
      if (text != kOk) {
        TDIST_CHECK(text.rfind(kErrorPrefix, 0) == 0, Error, context,
                    ": rank 0 published an unknown result '", text, "'");
        failure = text.substr(kErrorPrefix.size());
      }
      if (store_->add(done_key, 1) == size_ - 1) {
        store_->delete_key(result_key);
        store_->delete_key(done_key);
      }
    }
  } catch (const Error& e) {
    // Our own TimeoutError already names the call; a store's failure gets the context.
    if (std::string_view(e.what()).rfind(context, 0) == 0) throw;
    std::rethrow_exception(diag::add_context(std::current_exception(), context + ": "));
  }
  if (!failure.empty()) TDIST_THROW(TimeoutError, failure);
}

}  // namespace tdist
