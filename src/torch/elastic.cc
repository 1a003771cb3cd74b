// elastic::recover (torch/elastic.h): the members agree on the most advanced step; its lowest
// rank sends its catalog, every member checks it, and the ranks behind receive the tensors.
#include "tdist/torch/elastic.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tdist/bytes_collectives.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::elastic {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using checkpoint::State;
using checkpoint::TensorEntry;
using checkpoint::Value;

constexpr uint32_t kTag = 0x454c4153;  // "ELAS": recovery's point-to-point messages

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The source's catalog: its step and progress, its tensors (name, dtype, shape) in send
// order, its values, and the sampler's epoch mask.
json catalog_of(const State::Snapshot& snap, const Progress& progress,
                const tdist::torch::DistributedSampler* sampler) {
  json c;
  c["step"] = progress.step;
  c["epoch"] = progress.epoch;
  json tensors = json::array();
  for (const TensorEntry& e : snap.tensors) {
    tensors.push_back({{"name", e.name},
                       {"dtype", static_cast<int>(e.data.scalar_type())},
                       {"shape", e.global_shape}});
  }
  c["tensors"] = std::move(tensors);
  json values = json::object();
  for (const auto& [name, v] : snap.values) {
    if (const auto* i = std::get_if<int64_t>(&v)) values[name] = {{"i", *i}};
    if (const auto* d = std::get_if<double>(&v)) values[name] = {{"d", *d}};
    if (const auto* s = std::get_if<std::string>(&v)) values[name] = {{"s", *s}};
  }
  c["values"] = std::move(values);
  if (sampler != nullptr) {
    c["mask"] = sampler->world_mask(static_cast<size_t>(std::max<int64_t>(progress.taken, 0)));
  }
  return c;
}

// Why this rank's state cannot take the catalog's ("" when it can): each of its tensors
// must be in it with the same shape and dtype (it may lack some: an optimizer's state not
// created yet).
std::string difference(const State::Snapshot& mine, const json& catalog) {
  std::map<std::string, const json*> theirs;
  for (const json& t : catalog["tensors"]) theirs[t["name"].get<std::string>()] = &t;
  for (const TensorEntry& e : mine.tensors) {
    auto it = theirs.find(e.name);
    if (it == theirs.end()) return "it has " + e.name + ", which the source's state has not";
    const auto shape = (*it->second)["shape"].get<std::vector<int64_t>>();
    if (shape != e.global_shape) {
      return e.name + " has shape " + shape_text(e.global_shape) + " here, " + shape_text(shape) +
             " at the source";
    }
    if ((*it->second)["dtype"].get<int>() != static_cast<int>(e.data.scalar_type())) {
      return e.name + " has dtype " + c10::toString(e.data.scalar_type()) + " here, " +
             c10::toString(static_cast<c10::ScalarType>((*it->second)["dtype"].get<int>())) +
             " at the source";
    }
  }
  return "";
}

// The source's tensors as contiguous host tensors, in catalog order.
std::vector<::torch::Tensor> host_copies(const State::Snapshot& snap) {
  std::vector<::torch::Tensor> out;
  for (const TensorEntry& e : snap.tensors) out.push_back(e.data.to(::torch::kCPU).contiguous());
  return out;
}

// Receives the catalog's tensors from `source` into fresh host tensors, by name.
std::map<std::string, ::torch::Tensor> receive(ProcessGroup& pg, const json& catalog, int source) {
  std::map<std::string, ::torch::Tensor> got;
  std::vector<P2POp> ops;
  for (const json& t : catalog["tensors"]) {
    ::torch::Tensor buf = ::torch::empty(
        t["shape"].get<std::vector<int64_t>>(),
        ::torch::TensorOptions().dtype(static_cast<c10::ScalarType>(t["dtype"].get<int>())));
    ops.push_back({P2POp::Kind::kRecv, buf.data_ptr(), static_cast<size_t>(buf.nbytes()),
                   DType::kU8, source, kTag});
    got[t["name"].get<std::string>()] = std::move(buf);
  }
  if (!ops.empty()) pg.batch_isend_irecv(ops)->wait();
  return got;
}

void send(ProcessGroup& pg, const std::vector<::torch::Tensor>& tensors,
          const std::vector<int>& to) {
  std::vector<P2POp> ops;
  for (int peer : to) {
    for (const ::torch::Tensor& t : tensors) {
      ops.push_back({P2POp::Kind::kSend, t.data_ptr(), static_cast<size_t>(t.nbytes()), DType::kU8,
                     peer, kTag});
    }
  }
  if (!ops.empty()) pg.batch_isend_irecv(ops)->wait();
}

// Puts what was received into the state, as a checkpoint load does.
void apply(const State& state, int rank, int world, const json& catalog,
           std::map<std::string, ::torch::Tensor>& got) {
  std::map<std::string, Value> values;
  for (const auto& [name, v] : catalog["values"].items()) {
    if (v.contains("i")) values[name] = v["i"].get<int64_t>();
    if (v.contains("d")) values[name] = v["d"].get<double>();
    if (v.contains("s")) values[name] = v["s"].get<std::string>();
  }
  State::Saved saved;
  saved.has = [&](const std::string& name) { return got.count(name) != 0; };
  saved.read = [&](const std::string& name) {
    auto it = got.find(name);
    TDIST_CHECK(it != got.end(), InvalidArgument, "elastic::recover: the source has no ", name);
    return it->second;
  };
  saved.value = [&](const std::string& name) -> const Value* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  };
  State::LoadTarget target = state.load_target(rank, world, saved);
  ::torch::NoGradGuard no_grad;
  for (TensorEntry& e : target.tensors) e.data.copy_(saved.read(e.name));
  for (auto& fn : target.apply) fn();
}

}  // namespace

Recovery recover(ElasticGroup& job, const State& state, Progress& progress,
                 tdist::torch::DistributedSampler* sampler) {
  for (;;) {
    const Clock::time_point start = Clock::now();
    ProcessGroup& pg = *job.group();
    const int rank = pg.rank();
    const int world = pg.size();
    const State::Snapshot mine = state.snapshot(rank, world);
    for (const TensorEntry& e : mine.tensors) {
      TDIST_CHECK(e.replicated, InvalidArgument, "elastic::recover: ", e.name,
                  " is sharded (fully_shard); no rank holds it whole, so it is recovered from a "
                  "checkpoint (checkpoint.h), not from a peer");
    }
    std::vector<int64_t> steps(static_cast<size_t>(world));
    {
      int64_t step = progress.step;
      pg.all_gather(&step, steps.data(), 1, DType::kI64)->wait();
    }
    const auto best = std::max_element(steps.begin(), steps.end());
    TDIST_CHECK(*best >= 0, InvalidArgument, "elastic::recover (generation ", job.generation(),
                "): no member holds a committed state (every member is a newcomer with step -1)");
    const int source = static_cast<int>(best - steps.begin());

    std::string text;
    if (rank == source) text = catalog_of(mine, progress, sampler).dump();
    broadcast_bytes(pg, text, source);
    const json catalog = json::parse(text);
    const std::string why = rank == source ? "" : difference(mine, catalog);
    const std::vector<std::string> whys = all_gather_bytes(pg, why);
    std::string first_bad;
    for (int r = 0; r < world && first_bad.empty(); ++r) {
      if (!whys[static_cast<size_t>(r)].empty()) first_bad = std::to_string(r);
    }
    if (!why.empty()) {
      TDIST_THROW(InvalidArgument, "elastic::recover (generation ", job.generation(), "): slot ",
                  job.slot(), " (rank ", rank, ") cannot take the state of rank ", source,
                  " (slot ", job.members()[static_cast<size_t>(source)], "): ", why,
                  "; this process must exit");
    }
    if (!first_bad.empty()) {
      TDIST_LOG(kWarn) << "elastic::recover (generation " << job.generation() << "): rank "
                       << first_bad << " holds another state and leaves; reconfiguring without it";
      job.reconfigure();
      continue;
    }

    std::vector<int> behind;
    for (int r = 0; r < world; ++r) {
      if (steps[static_cast<size_t>(r)] < *best) behind.push_back(r);
    }
    Recovery out;
    out.generation = job.generation();
    out.step = *best;
    out.source = source;
    out.received = static_cast<int>(behind.size());
    for (const json& t : catalog["tensors"]) {
      int64_t n = ::torch::elementSize(static_cast<c10::ScalarType>(t["dtype"].get<int>()));
      for (int64_t d : t["shape"].get<std::vector<int64_t>>()) n *= d;
      out.bytes += n;
    }
    if (rank == source) {
      send(pg, host_copies(mine), behind);
    } else if (std::find(behind.begin(), behind.end(), rank) != behind.end()) {
      std::map<std::string, ::torch::Tensor> got = receive(pg, catalog, source);
      apply(state, rank, world, catalog, got);
    }
    progress.step = *best;
    progress.epoch = catalog["epoch"].get<int64_t>();
    progress.taken = 0;
    if (sampler != nullptr) {
      TDIST_CHECK(catalog.contains("mask"), InvalidArgument, "elastic::recover (generation ",
                  job.generation(), "): rank ", source,
                  " passed no sampler, this rank did; every rank must pass one or none");
      sampler->set_world(world, rank);
      sampler->resume(progress.epoch, catalog["mask"].get<std::vector<uint8_t>>());
    }
    out.took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    return out;
  }
}

}  // namespace tdist::elastic
