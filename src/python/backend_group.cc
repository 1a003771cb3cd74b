// TdistBackend (backend.h): what c10d::Backend offers besides the collectives: split,
// timeouts, monitoredBarrier (in torch's words), sequence numbers, shutdown and abort.
#include <algorithm>
#include <functional>
#include <string>
#include <string_view>

#include "backend.h"
#include "backend_calls.h"
#include "tdist/torch/collectives.h"

namespace tdist::python {
namespace {

// "Rank 2" or "Ranks 2, 3": the ranks a tdist monitored_barrier error names as missing
// ("rank 2 did not arrive" / "ranks 2, 3 did not arrive", diag/monitored_barrier.cc), the
// global rank in parentheses left out; empty when it names none.
std::string missing_ranks(std::string_view text) {
  const size_t end = text.find(" did not arrive within ");
  if (end == std::string_view::npos) return {};
  const size_t start = text.rfind(": ", end);
  if (start == std::string_view::npos) return {};
  std::string_view who = text.substr(start + 2, end - start - 2);
  std::string out;
  for (size_t i = 0; i < who.size(); ++i) {
    if (who[i] == '(') {  // " (global rank 3)"
      i = who.find(')', i);
      if (i == std::string_view::npos) break;
      if (!out.empty() && out.back() == ' ') out.pop_back();
      continue;
    }
    out += who[i];
  }
  if (!out.empty()) out[0] = 'R';
  return out;
}

}  // namespace

const std::shared_ptr<tdist::ProcessGroup>& TdistBackend::group() const {
  TDIST_CHECK(group_ != nullptr, InvalidArgument,
              deferred_timeout_.count() > 0 && uuids_.empty()
                  ? "this tdist group was made with enable_reconfigure and has no peers yet: "
                    "call torch.distributed._reconfigure first"
                  : "this tdist group was shut down (shutdown() or destroy_process_group())");
  return group_;
}

std::chrono::milliseconds TdistBackend::timeout_of(std::chrono::milliseconds option) const {
  if (option != ::c10d::kUnsetTimeout) return option;
  const int64_t set = timeout_ms_.load(std::memory_order_relaxed);
  return set < 0 ? ::c10d::kUnsetTimeout : std::chrono::milliseconds(set);
}

void TdistBackend::monitoredBarrier(const ::c10d::BarrierOptions& opts, bool wait_all_ranks) {
  torch_errors([&] {
    const std::chrono::milliseconds limit = timeout_of(opts.timeout);
    const auto& pg = group();
    try {
      if (limit == ::c10d::kUnsetTimeout) {
        pg->monitored_barrier(std::nullopt, wait_all_ranks);
      } else {
        pg->monitored_barrier(limit, wait_all_ranks);
      }
    } catch (const TimeoutError& e) {
      // gloo's words, which torch's callers and tests look for, then tdist's.
      const long ms = (limit == ::c10d::kUnsetTimeout ? pg->timeout() : limit).count();
      const std::string missing = missing_ranks(e.what());
      std::string head;
      if (getRank() != 0) {
        head = detail::str_cat("Rank ", getRank(),
                               " successfully reached monitoredBarrier, but received errors "
                               "while waiting for send/recv from rank 0");
      } else if (ms == 0 && !wait_all_ranks) {
        head = "Rank 0 timed out in monitoredBarrier after 0 ms";
      } else if (!missing.empty()) {
        head = detail::str_cat(missing, " failed to pass monitoredBarrier in ", ms, " ms");
      }
      if (head.empty()) throw;
      TDIST_THROW(Error, head, " (tdist: ", e.what(), ")");
    }
    return 0;
  });
}

uint64_t TdistBackend::getSequenceNumberForGroup() {
  return collectives_.load(std::memory_order_relaxed);
}

TdistBackend::WorkRef TdistBackend::barrier(const ::c10d::BarrierOptions& opts) {
  return TDIST_ISSUE(::c10d::OpType::BARRIER, Tensors{},
                     { works.push_back(tdist::torch::barrier_async(group())); });
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<::c10d::Backend> TdistBackend::split(
    const c10::intrusive_ptr<::c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  return torch_errors([&]() -> c10::intrusive_ptr<::c10d::Backend> {
    const auto& pg = group();
    const int me = getRank();
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    const bool member = std::binary_search(sorted.begin(), sorted.end(), me);
    // The color is the member list itself (hashed), so that ranks that were given
    // different lists for one group do not end up together; checked below.
    std::string key;
    for (int r : sorted) key += std::to_string(r) + ",";
    const int color = member ? static_cast<int>(std::hash<std::string>{}(key)&0x3fffffff) : -1;
    std::shared_ptr<tdist::ProcessGroup> child = pg->split(color, me);
    // Every rank learns whether every rank got the group it was given.
    bool ok = !member || (child != nullptr && child->size() == static_cast<int>(sorted.size()));
    if (ok && child != nullptr) {
      for (size_t i = 0; i < sorted.size(); ++i)
        ok = ok && pg->group_rank(child->global_rank(static_cast<int>(i))) == sorted[i];
    }
    int32_t all_ok = ok ? 1 : 0;
    pg->all_reduce(&all_ok, &all_ok, 1, DType::kI32, ReduceOpKind::kMin)->wait();
    TDIST_CHECK(all_ok == 1, InvalidArgument,
                "split_group: the ranks were given split groups that disagree (they overlap, or "
                "ranks passed different splits); rank ",
                me, " was given [", key, "]", ok ? "" : " and got another group");
    if (child == nullptr) return {};
    auto backend = c10::make_intrusive<TdistBackend>(std::move(child), engine_, store);
    if (opts && opts->timeout != group_->timeout()) backend->setTimeout(opts->timeout);
    return backend;
  });
}

void TdistBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
}

c10::intrusive_ptr<::c10d::Backend::Options> TdistBackend::getBackendOptions() {
  return torch_errors([&] {
    const int64_t set = timeout_ms_.load(std::memory_order_relaxed);
    const std::chrono::milliseconds own =
        group_ == nullptr && uuids_.empty() ? deferred_timeout_ : group()->timeout();
    return c10::make_intrusive<Options>("tdist", set < 0 ? own : std::chrono::milliseconds(set));
  });
}

void TdistBackend::abort() {
  if (group_) group_->abort();
}

void TdistBackend::shutdown() {
  // The group goes when its last Work does; later calls on this backend are refused.
  progress_->stop();
  group_.reset();
}
#endif

}  // namespace tdist::python
