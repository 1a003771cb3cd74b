// ProcessGroup's common part (process_group.h): arguments, rank translation, and the
// sub-group calls, which agree on membership through the group's store and then ask the
// backend (make_subgroup) for a group over a namespace of that store.
#include "tdist/process_group.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <utility>

#include "diag/flight_recorder.h"
#include "diag/trace.h"
#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"

namespace tdist {

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                           std::chrono::milliseconds timeout, std::vector<int> global_ranks)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      global_ranks_(std::move(global_ranks)),
      debug_detail_(setting_string("TDIST_DEBUG") == "detail"),
      debug_callsite_(debug_detail_ || setting_string("TDIST_DEBUG") == "callsite"),
      recorder_(std::make_unique<diag::FlightRecorder>(
          static_cast<size_t>(setting_int("TDIST_FLIGHT_RECORDER_SIZE")))) {
  TDIST_CHECK(store_ != nullptr, InvalidArgument, "ProcessGroup: the store is null");
  TDIST_CHECK(size_ >= 1, InvalidArgument, "ProcessGroup: size ", size_, " is below 1");
  // A collective's fingerprint holds root + 1 in 24 bits (core/op_fingerprint.h).
  TDIST_CHECK(size_ < (1 << 24) - 1, InvalidArgument, "ProcessGroup: size ", size_,
              " is above the largest group, ", (1 << 24) - 2);
  TDIST_CHECK(rank_ >= 0 && rank_ < size_, InvalidArgument, "ProcessGroup: rank ", rank_,
              " is outside 0..", size_ - 1);
  TDIST_CHECK(timeout_.count() >= 0, InvalidArgument, "ProcessGroup: timeout ", timeout_.count(),
              " ms is negative");
  if (global_ranks_.empty()) {
    global_ranks_.resize(static_cast<size_t>(size_));
    std::iota(global_ranks_.begin(), global_ranks_.end(), 0);
  }
  TDIST_CHECK(global_ranks_.size() == static_cast<size_t>(size_), InvalidArgument,
              "ProcessGroup: ", global_ranks_.size(), " global ranks given for size ", size_);
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::global_rank(int group_rank) const {
  TDIST_CHECK(group_rank >= 0 && group_rank < size_, InvalidArgument, "global_rank: group rank ",
              group_rank, " is outside 0..", size_ - 1);
  return global_ranks_[static_cast<size_t>(group_rank)];
}

int ProcessGroup::group_rank(int global) const {
  auto it = std::find(global_ranks_.begin(), global_ranks_.end(), global);
  return it == global_ranks_.end() ? -1 : static_cast<int>(it - global_ranks_.begin());
}

std::shared_ptr<ProcessGroup> ProcessGroup::make_member_group(const std::vector<int>& members,
                                                              const std::string& name, bool split) {
  auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) return nullptr;
  std::vector<int> globals;
  globals.reserve(members.size());
  for (int r : members) globals.push_back(global_rank(r));
  auto sub_store = std::make_shared<PrefixStore>(name, store_);
  std::shared_ptr<ProcessGroup> group =
      split ? make_split_subgroup(std::move(sub_store), members, std::move(globals))
            : make_subgroup(std::move(sub_store), static_cast<int>(me - members.begin()),
                            static_cast<int>(members.size()), std::move(globals));
  if (group) group->name_ = name_ == "default" ? name : name_ + "/" + name;
  return group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::make_split_subgroup(std::shared_ptr<Store> store,
                                                                const std::vector<int>& members,
                                                                std::vector<int> global_ranks) {
  const auto me = std::find(members.begin(), members.end(), rank_);
  return make_subgroup(std::move(store), static_cast<int>(me - members.begin()),
                       static_cast<int>(members.size()), std::move(global_ranks));
}

std::string ProcessGroup::flight_record() const {
  return recorder_->record_json(*this, next_seq());
}

ProcessGroup::TraceTrack::~TraceTrack() {
  if (id.load(std::memory_order_relaxed) < 0) return;  // untraced, or no collective
  try {
    (void)diag::flush_trace();
  } catch (const std::exception&) {  // out of memory: the exit writes what is left
  }
}

void ProcessGroup::note_started(uint64_t seq) { recorder_->started(seq); }

void ProcessGroup::note_finished(uint64_t seq, const std::exception_ptr& error,
                                 std::string_view algorithm) {
  const bool first_failure = recorder_->finished(seq, error);
  if (diag::trace_enabled()) {
    const int rank = global_ranks_[static_cast<size_t>(rank_)];
    int track = trace_track_.id.load(std::memory_order_relaxed);
    if (track < 0) {  // the same number whoever asks first
      track = diag::trace_track(rank, "group " + name_ + " (" + backend_name() + ")");
      trace_track_.id.store(track, std::memory_order_relaxed);
    }
    diag::trace_collective(rank, track, name_, seq, *recorder_, error, algorithm);
  }
  if (!first_failure) return;
  // The group's first failure: what every group of this process was doing.
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError&) {
    diag::dump_flight_records("timeout in group " + name_);
  } catch (const DesyncError&) {
    diag::dump_flight_records("desync in group " + name_);
  } catch (const PeerError&) {
    diag::dump_flight_records("peer error in group " + name_);
  } catch (...) {  // a user's mistake (InvalidArgument and the like): no dump
  }
}

std::vector<int> ProcessGroup::sorted_ranks(const char* caller, std::vector<int> ranks) const {
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    TDIST_CHECK(ranks[i] >= 0 && ranks[i] < size_, InvalidArgument, caller, ": rank ", ranks[i],
                " is outside 0..", size_ - 1);
    TDIST_CHECK(i == 0 || ranks[i] != ranks[i - 1], InvalidArgument, caller, ": rank ", ranks[i],
                " is listed twice");
  }
  return ranks;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(std::vector<int> ranks) {
  TDIST_CHECK(!ranks.empty(), InvalidArgument, "new_group: the rank list is empty");
  const std::vector<int> sorted = sorted_ranks("new_group", std::move(ranks));
  const uint64_t n = subgroups_made_++;
  return make_member_group(sorted, "group/" + std::to_string(n));
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  const uint64_t n = subgroups_made_++;
  const std::string base = "split/" + std::to_string(n) + "/";
  store_->set(base + std::to_string(rank_), std::to_string(color) + "," + std::to_string(key));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(base + std::to_string(r));
  std::vector<Bytes> values = store_->multi_get(keys, Deadline::after(timeout_));
  if (color < 0) return nullptr;

  std::vector<std::pair<int, int>> members;  // (key, rank) of ranks with my color
  for (int r = 0; r < size_; ++r) {
    std::string v = to_string(values[static_cast<size_t>(r)]);
    size_t comma = v.find(',');
    if (std::stoi(v.substr(0, comma)) == color) {
      members.emplace_back(std::stoi(v.substr(comma + 1)), r);
    }
  }
  std::sort(members.begin(), members.end());
  std::vector<int> ranks;
  for (const auto& m : members) ranks.push_back(m.second);
  return make_member_group(ranks, base + "color" + std::to_string(color), /*split=*/true);
}

std::shared_ptr<ProcessGroup> ProcessGroup::shrink(std::vector<int> exclude) {
  exclude = sorted_ranks("shrink", std::move(exclude));
  TDIST_CHECK(!std::binary_search(exclude.begin(), exclude.end(), rank_), InvalidArgument,
              "shrink: rank ", rank_, " excludes itself; only the remaining ranks call shrink");
  TDIST_CHECK(exclude.size() < static_cast<size_t>(size_), InvalidArgument,
              "shrink: excluding every rank leaves nobody");
  std::vector<int> members;
  for (int r = 0; r < size_; ++r) {
    if (!std::binary_search(exclude.begin(), exclude.end(), r)) members.push_back(r);
  }
  const uint64_t n = shrinks_made_++;
  return make_member_group(members, "shrink/" + std::to_string(n));
}

}  // namespace tdist
