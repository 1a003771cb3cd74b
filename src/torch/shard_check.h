// fully_shard's cross-rank check (internal): before a unit is wrapped, and before each of
// its gathers in forward and backward, the ranks of its group exchange a small fixed-size
// header (kWords int64, one all_gather) saying what each is about to do: wrap a module (its
// parameters' names and shapes, the units inside), or run a unit forward (with the shapes
// of its Tensor inputs) or backward, as the n-th call of which root. Headers of one size
// for every step, so that ranks at different steps meet in the same collective and each
// sees the others' step: any difference is a DesyncError on every rank naming both sides
// (rank 0 and the first rank that differs), before the collective that would have hung or
// mismatched. Thread-safety: none (the unit's thread); collective over the group.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tdist/process_group.h"

namespace tdist::torch::shard_check {

constexpr size_t kWords = 16;
using Header = std::array<int64_t, kWords>;

enum class Phase : int64_t { kWrap = 1, kForward = 2, kBackward = 3 };

// What a rank wraps: the unit's own parameters (names relative to its module) and the units
// inside it (their agreed ids, in wrap order, with their paths).
struct WrapInfo {
  int64_t proposed_id = 0;  // this rank's; every rank takes rank 0's
  std::string module;       // its class, e.g. "Linear"
  std::vector<std::string> param_names;
  std::vector<::torch::Tensor> params;
  std::vector<std::pair<int64_t, std::string>> inner;  // (id, path), in wrap order
};

// What a rank runs: unit `unit` as part of root `root`'s call number `call`; `touched`
// (not compared) tells of a parameter of the unit changed outside fully_shard (0: none).
struct RunInfo {
  Phase phase = Phase::kForward;
  int64_t unit = 0, root = 0, call = 0, touched = 0;
  const std::vector<::torch::Tensor>* inputs = nullptr;  // forward: the Tensor arguments
};

Header wrap_header(const WrapInfo& info);
Header run_header(const RunInfo& info);

// Every rank's header ([rank]); on the host, or through a tensor on `device` for a group
// that takes device memory only. Collective, blocking.
std::vector<Header> exchange(ProcessGroup& group, const Header& mine, c10::Device device);

// The first rank whose step differs from rank 0's, or -1 when all agree (the proposed id of
// a wrap and `touched` of a run do not count).
int first_difference(const std::vector<Header>& all);

// Names a unit by its agreed id (as every rank wrapped the same units, this rank's unit of
// that id stands for the other rank's).
using UnitName = std::function<std::string(int64_t id)>;

// "runs unit 'block2' forward with input [8, 64]", "wraps a module of 2 parameters, the
// first [7, 6]" (what one header tells; `with_call` adds the root's call number).
std::string describe(const Header& h, const UnitName& name, bool with_call);

// What a rank wraps, fully, for the message when every rank is wrapping:
// "a Net with the units 'block0', 'block2' inside and parameters 'head.weight' [3, 7]".
std::string describe_wrap(const WrapInfo& info);

// Throws the DesyncError for headers that differ at rank `r` (first_difference). When every
// rank is wrapping and the group works on the host, the ranks first exchange their
// describe_wrap texts (a second collective) to name each side's parameters.
[[noreturn]] void throw_desync(ProcessGroup& group, const std::vector<Header>& all, int r,
                               const UnitName& name, const WrapInfo* wrap);

}  // namespace tdist::torch::shard_check
