// TdistBackend (backend.h): torch's fault-tolerance calls, shrink and reconfigure.
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "backend.h"
#include "store_adapter.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "torch_work.h"

#ifdef C10D_BACKEND_HAS_RECONFIGURE
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#endif

namespace tdist::python {

std::string new_reconfigure_handle() {
  static std::mt19937_64 rng(std::random_device{}());
  static Mutex mu;
  uint64_t nonce = 0;
  {
    MutexLock lock(mu);
    nonce = rng();
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return detail::str_cat("tdist:", host, ":", ::getpid(), ":", nonce);
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE
namespace {

// torch.distributed.SHRINK_ABORT (distributed_c10d.py; c10d's C++ has no name for it).
constexpr int kShrinkAbort = 0x01;

// The handles as ranks: a list as given, a set in sorted order.
std::vector<std::string> ranked(const ::c10d::ReconfigureOptions& opts) {
  std::vector<std::string> out;
  if (const auto* list = std::get_if<std::vector<::c10d::ReconfigureHandle>>(&opts.handles)) {
    out = *list;
  } else {
    const auto& set = std::get<std::unordered_set<::c10d::ReconfigureHandle>>(opts.handles);
    out.assign(set.begin(), set.end());
    std::sort(out.begin(), out.end());
  }
  return out;
}

}  // namespace

c10::intrusive_ptr<::c10d::Backend> TdistBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
    const c10::intrusive_ptr<Options>& opts) {
  return torch_errors([&]() -> c10::intrusive_ptr<::c10d::Backend> {
    const auto& pg = group();
    if ((shrink_flags & kShrinkAbort) != 0) pg->abort();
    std::vector<int> exclude(ranks_to_exclude.begin(), ranks_to_exclude.end());
    std::shared_ptr<tdist::ProcessGroup> child = pg->shrink(std::move(exclude));
    // The child reconfigures in a namespace of its own in this backend's store.
    c10::intrusive_ptr<::c10d::Store> store;
    if (store_) {
      store = c10::make_intrusive<::c10d::PrefixStore>(detail::str_cat("tdist/shrink/", shrinks_++),
                                                       store_);
    }
    auto backend = c10::make_intrusive<TdistBackend>(std::move(child), engine_, std::move(store));
    if (opts) {
      backend->setTimeout(opts->timeout);
    } else if (const int64_t set = timeout_ms_.load(std::memory_order_relaxed); set >= 0) {
      backend->setTimeout(std::chrono::milliseconds(set));
    }
    if (timing_.load(std::memory_order_relaxed)) backend->enableCollectivesTiming();
    return backend;
  });
}

TdistBackend::WorkRef TdistBackend::reconfigure(const ::c10d::ReconfigureOptions& opts) {
  return torch_errors([&]() -> WorkRef {
    TDIST_CHECK(store_ != nullptr, InvalidArgument,
                "reconfigure: this tdist group has no store to meet its peers through (a "
                "group made by ElasticGroup); reconfigure a group made by init_process_group, "
                "new_group, split_group or shrink_group");
    const std::vector<std::string> handles = ranked(opts);
    TDIST_CHECK(!handles.empty(), InvalidArgument, "reconfigure: no handles given");
    std::vector<std::string> sorted = handles;
    std::sort(sorted.begin(), sorted.end());
    const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
    TDIST_CHECK(twice == sorted.end(), InvalidArgument, "reconfigure: handle '", *twice,
                "' is given twice");
    const auto me = std::find(handles.begin(), handles.end(), handle_);
    TDIST_CHECK(me != handles.end(), InvalidArgument, "reconfigure: this backend's handle '",
                handle_, "' is not among the ", handles.size(),
                " handles given (get_reconfigure_handle() of every peer, this one included)");
    TDIST_CHECK(std::find(uuids_.begin(), uuids_.end(), opts.uuid) == uuids_.end(), InvalidArgument,
                "reconfigure: uuid ", opts.uuid,
                " was used before by this group; pass a fresh one on every reconfigure");
    const int rank = static_cast<int>(me - handles.begin());
    const int size = static_cast<int>(handles.size());
    std::chrono::milliseconds timeout = group_ ? group_->timeout() : deferred_timeout_;
    if (opts.timeout) timeout = *opts.timeout;
    // The previous group goes first: its connections are not needed for the new one.
    progress_->stop();
    progress_ = std::make_shared<ProgressThread>();
    group_.reset();
    uuids_.push_back(opts.uuid);
    auto adapter = std::make_shared<C10dStore>(store_);
    adapter->set_timeout(timeout);
    auto ns = std::make_shared<PrefixStore>(detail::str_cat("tdist/reconfigure/", opts.uuid),
                                            std::move(adapter));
    ns->set_timeout(timeout);
    group_ = backend_factory(engine_)(std::move(ns), rank, size, timeout);
    rank_ = rank;
    size_ = size;
    collectives_.store(0, std::memory_order_relaxed);
    return c10::make_intrusive<TorchWork>(rank, ::c10d::OpType::UNKNOWN, std::vector<WorkPtr>{},
                                          std::vector<at::Tensor>{}, progress_);
  });
}
#endif

}  // namespace tdist::python
