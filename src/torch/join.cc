// Join and Joinable (tdist/torch/join.h): the generic part, the count of ranks that still
// have inputs and the joined ranks' loop over the hooks. DDP's hook is in ddp_join.cc.
#include "tdist/torch/join.h"

#include <exception>
#include <utility>

#include "ddp_sync.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::torch {
namespace {

// A joined rank that shadowed this many iterations says once that the skew is large
// (PyTorch warns at the same point).
constexpr uint64_t kSkewWarning = 1000;

}  // namespace

Joinable::~Joinable() {
  if (join_ != nullptr) join_->forget(*this);
}

std::optional<int> Joinable::notify_join_context() {
  if (join_ == nullptr || !first_) return std::nullopt;
  return join_->notify();
}

Join::Join(Joinable& joinable, JoinOptions options)
    : Join(std::vector<std::reference_wrapper<Joinable>>{joinable}, options) {}

Join::Join(const std::vector<std::reference_wrapper<Joinable>>& joinables, JoinOptions options)
    : options_(options), uncaught_at_start_(std::uncaught_exceptions()) {
  TDIST_CHECK(!joinables.empty(), InvalidArgument, "Join: needs at least one Joinable");
  for (Joinable& j : joinables) {
    TDIST_CHECK(j.join_ == nullptr, InvalidArgument,
                "Join: a Joinable is already in another Join (one Join at a time)");
    std::shared_ptr<ProcessGroup> group = j.join_process_group();
    TDIST_CHECK(group != nullptr, InvalidArgument, "Join: a Joinable has no process group");
    if (group_ == nullptr) {
      group_ = std::move(group);
      device_ = j.join_device();
    } else {
      TDIST_CHECK(group == group_, InvalidArgument,
                  "Join: the Joinables use different process groups (one Join takes Joinables "
                  "of one group)");
    }
  }
  for (size_t i = 0; i < joinables.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      TDIST_CHECK(&joinables[i].get() != &joinables[k].get(), InvalidArgument,
                  "Join: the same Joinable is given twice");
    }
  }
  if (!options_.enable) return;  // no hooks, and the Joinables see no Join
  for (Joinable& j : joinables) entries_.push_back({&j, j.join_hook(options_)});
  for (size_t i = 0; i < entries_.size(); ++i) {
    entries_[i].joinable->join_ = this;
    entries_[i].joinable->first_ = i == 0;
  }
}

Join::~Join() noexcept(false) {
  if (finished_) return;
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    // Leaving the scope by an exception: no shadowing (the others time out), as PyTorch.
    finished_ = true;
    leave();
    return;
  }
  finish();
}

void Join::leave() {
  for (Entry& e : entries_) {
    if (e.joinable != nullptr && e.joinable->join_ == this) e.joinable->join_ = nullptr;
  }
}

void Join::forget(const Joinable& joinable) {
  for (Entry& e : entries_) {
    if (e.joinable != &joinable) continue;
    e.joinable = nullptr;
    e.hook.reset();
  }
}

int64_t Join::count_ranks_with_inputs(int64_t mine) {
  std::vector<int64_t> count{mine};
  all_reduce_values(*group_, count, ReduceOpKind::kSum, device_);
  return count[0];
}

int Join::notify() {
  ++iterations_;
  int64_t with_inputs = 0;
  try {
    with_inputs = count_ranks_with_inputs(1);
  } catch (const Error&) {
    rethrow_with_context(
        std::current_exception(),
        ::tdist::detail::str_cat("Join (rank ", group_->rank(), ", iteration ", iterations_,
                                 "): counting the ranks that still have inputs failed; most "
                                 "likely a rank failed, or left its Join by an exception: "));
  }
  const int world = group_->size();
  TDIST_CHECK(with_inputs >= 1 && with_inputs <= world, DesyncError, "Join (rank ", group_->rank(),
              "): ", with_inputs, " of ", world,
              " ranks say they still have inputs; the ranks' collectives are out of step (do all "
              "ranks make their Join over the same Joinables?)");
  TDIST_CHECK(!options_.throw_on_early_termination || with_inputs == world, Error, "Join (rank ",
              group_->rank(), ", iteration ", iterations_, "): ", world - with_inputs, " of ",
              world,
              " ranks have run out of inputs; with throw_on_early_termination every rank stops "
              "in this iteration");
  return static_cast<int>(with_inputs);
}

void Join::finish() {
  if (finished_) return;
  finished_ = true;
  struct Leave {
    Join& join;
    ~Leave() { join.leave(); }
  } leave_at_end{*this};
  if (!options_.enable) return;
  const int rank = group_->rank();
  bool is_last_joiner = true;
  for (uint64_t shadowed = 0;; ++shadowed) {
    int64_t with_inputs = 0;
    try {
      with_inputs = count_ranks_with_inputs(0);
    } catch (const Error&) {
      rethrow_with_context(
          std::current_exception(),
          ::tdist::detail::str_cat("Join (rank ", rank, ", out of inputs after ", iterations_,
                                   " iterations, ", shadowed,
                                   " shadowed): waiting for the ranks that still have inputs "
                                   "failed; most likely one of them failed, or left its Join by "
                                   "an exception: "));
    }
    if (with_inputs == 0) break;
    TDIST_CHECK(!options_.throw_on_early_termination, Error, "Join (rank ", rank,
                "): this rank ran out of inputs after ", iterations_, " iterations while ",
                with_inputs, " of ", group_->size(),
                " ranks still have some; with throw_on_early_termination every rank stops in "
                "this iteration");
    if (shadowed == kSkewWarning) {
      TDIST_LOG(kWarn) << "Join (rank " << rank << "): this rank has shadowed " << kSkewWarning
                       << " iterations of the ranks that still have inputs; so large a skew "
                          "of the inputs costs time";
    }
    for (Entry& e : entries_) {
      if (e.hook != nullptr) e.hook->main_hook();
    }
    is_last_joiner = false;
  }
  for (Entry& e : entries_) {
    if (e.hook != nullptr) e.hook->post_hook(is_last_joiner);
  }
}

}  // namespace tdist::torch
