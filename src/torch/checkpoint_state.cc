// checkpoint::State (checkpoint.h): the entries a program names, and what each saves and
// loads.
#include "checkpoint_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tdist/error.h"

namespace tdist::checkpoint {
namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

TensorEntry replicated(std::string name, const ::torch::Tensor& t) {
  return {std::move(name), t, t.sizes().vec(), 0, true};
}

// Tensors, as they are: a module's, a fully_shard model's, single ones.
struct Tensors : State::Entry {
  std::vector<TensorEntry> tensors;
  void snapshot(int, int, State::Snapshot& out) const override {
    out.tensors.insert(out.tensors.end(), tensors.begin(), tensors.end());
  }
  void target(int, int, const Saved&, State::LoadTarget& out) const override {
    out.tensors.insert(out.tensors.end(), tensors.begin(), tensors.end());
  }
};

struct Optim : State::Entry {
  ::torch::optim::Optimizer* opt = nullptr;
  std::vector<OptimParam> params;
  std::string prefix;
  void snapshot(int, int, State::Snapshot& out) const override {
    optimizer_snapshot(*opt, params, prefix, out);
  }
  void target(int, int, const Saved& saved, State::LoadTarget& out) const override {
    optimizer_target(*opt, params, prefix, saved, out);
  }
};

// A rank's row of a [world, n] byte tensor (the sampler's masks, the generators' states).
TensorEntry rank_row(std::string name, const ::torch::Tensor& bytes, int rank, int world) {
  return {std::move(name), bytes.reshape({1, bytes.numel()}), {world, bytes.numel()}, rank, false};
}

// The epoch, the dataset's size, and each rank's consumed_mask() (sampler.h) as a row of
// (dataset size + 7) / 8 bytes: the longest a mask can be, whatever the world size.
struct Sampler : State::Entry {
  tdist::torch::DistributedSampler* sampler = nullptr;
  std::string name;
  int64_t mask_bytes() const { return static_cast<int64_t>((sampler->dataset_size() + 7) / 8); }
  void snapshot(int rank, int world, State::Snapshot& out) const override {
    out.tensors.push_back(
        replicated(name + ".epoch", ::torch::tensor(sampler->epoch(), ::torch::kInt64)));
    out.tensors.push_back(replicated(
        name + ".dataset_size",
        ::torch::tensor(static_cast<int64_t>(sampler->dataset_size()), ::torch::kInt64)));
    const std::vector<uint8_t> mask = sampler->consumed_mask();
    ::torch::Tensor bytes = ::torch::zeros({mask_bytes()}, ::torch::kUInt8);
    std::copy_n(mask.begin(), std::min<size_t>(mask.size(), static_cast<size_t>(mask_bytes())),
                bytes.data_ptr<uint8_t>());
    out.tensors.push_back(rank_row(name + ".consumed", bytes, rank, world));
  }
  void target(int, int, const Saved& saved, State::LoadTarget& out) const override {
    const int64_t epoch = saved.read(name + ".epoch").item<int64_t>();
    const int64_t size = saved.read(name + ".dataset_size").item<int64_t>();
    TDIST_CHECK(size == static_cast<int64_t>(sampler->dataset_size()), InvalidArgument,
                "checkpoint: sampler '", name, "' was saved over a dataset of ", size,
                " samples; this one has ", sampler->dataset_size());
    ::torch::Tensor rows = saved.read(name + ".consumed");
    TDIST_CHECK(rows.dim() == 2 && rows.size(1) == mask_bytes(), InvalidArgument, "checkpoint: '",
                name, ".consumed' is ", rows.sizes(), ", not [ranks, ", mask_bytes(), "]");
    // Every old rank's positions: the OR of their masks (of the dataset's bytes, which
    // resume() takes with or without drop_last).
    std::vector<uint8_t> mask(static_cast<size_t>(mask_bytes()), 0);
    for (int64_t r = 0; r < rows.size(0); ++r) {
      const uint8_t* row = rows[r].data_ptr<uint8_t>();
      for (size_t i = 0; i < mask.size(); ++i) mask[i] |= row[i];
    }
    tdist::torch::DistributedSampler* s = sampler;
    out.apply.push_back([s, epoch, mask] { s->resume(epoch, mask); });
  }
};

struct Rng : State::Entry {
  std::string name;
  static ::torch::Tensor state() {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
  }
  void snapshot(int rank, int world, State::Snapshot& out) const override {
    out.tensors.push_back(rank_row(name + ".cpu", state(), rank, world));
  }
  void target(int rank, int, const Saved& saved, State::LoadTarget& out) const override {
    ::torch::Tensor rows = saved.read(name + ".cpu");
    TDIST_CHECK(rows.dim() == 2 && rows.size(0) > 0 && rows.size(1) == state().numel(),
                InvalidArgument, "checkpoint: '", name, ".cpu' is ", rows.sizes(), ", not [ranks, ",
                state().numel(), "] generator states");
    ::torch::Tensor mine = rows[rank % rows.size(0)].clone();
    out.apply.push_back([mine] {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(mine);
    });
  }
};

template <typename T>
struct Scalar : State::Entry {
  std::string name;
  T* v = nullptr;
  void snapshot(int, int, State::Snapshot& out) const override {
    out.values.emplace_back(name, *v);
  }
  void target(int, int, const Saved& saved, State::LoadTarget& out) const override {
    const Value* got = saved.value(name);
    TDIST_CHECK(got != nullptr, InvalidArgument, "checkpoint: it holds no value '", name, "'");
    TDIST_CHECK(std::holds_alternative<T>(*got), InvalidArgument, "checkpoint: value '", name,
                "' is of another type (int64, double, string) than the state's");
    T* p = v;
    out.apply.push_back([p, value = std::get<T>(*got)] { *p = value; });
  }
};

template <typename E>
std::shared_ptr<E> add(std::vector<std::shared_ptr<const State::Entry>>& entries) {
  auto e = std::make_shared<E>();
  entries.push_back(e);
  return e;
}

template <typename T>
void add_value(std::vector<std::shared_ptr<const State::Entry>>& entries, const std::string& name,
               T* v) {
  TDIST_CHECK(v != nullptr, InvalidArgument, "checkpoint: value '", name, "' is a null pointer");
  auto e = add<Scalar<T>>(entries);
  e->name = name;
  e->v = v;
}

std::vector<OptimParam> replicated_params(const ::torch::nn::Module& m) {
  std::vector<OptimParam> out;
  for (const auto& item : m.named_parameters()) {
    out.push_back({item.value(), replicated(item.key(), item.value())});
  }
  return out;
}

}  // namespace

RowRange rows_of(const TensorEntry& e) {
  const int64_t rows = e.global_shape.empty() ? 1 : e.global_shape[0];
  if (e.replicated) return {0, rows};
  if (e.global_shape.empty()) return {0, e.data.numel()};
  return {e.offset, e.data.dim() == 0 ? 1 : e.data.size(0)};
}

State& State::module(const ::torch::nn::Module& m, const std::string& prefix) {
  auto e = add<Tensors>(entries_);
  for (const auto& item : m.named_parameters()) {
    e->tensors.push_back(replicated(join(prefix, item.key()), item.value()));
  }
  for (const auto& item : m.named_buffers()) {
    e->tensors.push_back(replicated(join(prefix, item.key()), item.value()));
  }
  return *this;
}

State& State::module(const tdist::torch::FullyShardedBase& handle, const ::torch::nn::Module& m,
                     const std::string& prefix) {
  auto e = add<Tensors>(entries_);
  for (tdist::torch::LocalShard& s : handle.local_shards()) {
    e->tensors.push_back(
        {join(prefix, s.rows.name), s.rows.shard, s.rows.global_shape, s.rows.offset, false});
  }
  for (const auto& item : m.named_buffers()) {
    e->tensors.push_back(replicated(join(prefix, item.key()), item.value()));
  }
  return *this;
}

State& State::optimizer(::torch::optim::Optimizer& opt, const ::torch::nn::Module& m,
                        const std::string& prefix) {
  auto e = add<Optim>(entries_);
  e->opt = &opt;
  e->params = replicated_params(m);
  e->prefix = prefix.empty() ? "" : prefix + ".";
  return *this;
}

State& State::optimizer(::torch::optim::Optimizer& opt,
                        const tdist::torch::FullyShardedBase& handle, const std::string& prefix) {
  auto e = add<Optim>(entries_);
  e->opt = &opt;
  for (tdist::torch::LocalShard& s : handle.local_shards()) {
    e->params.push_back(
        {s.param, {s.rows.name, s.rows.shard, s.rows.global_shape, s.rows.offset, false}});
  }
  e->prefix = prefix.empty() ? "" : prefix + ".";
  return *this;
}

State& State::sampler(tdist::torch::DistributedSampler& s, const std::string& name) {
  auto e = add<Sampler>(entries_);
  e->sampler = &s;
  e->name = name;
  return *this;
}

State& State::rng(const std::string& name) {
  add<Rng>(entries_)->name = name;
  return *this;
}

State& State::tensor(const std::string& name, const ::torch::Tensor& t) {
  TDIST_CHECK(t.defined(), InvalidArgument, "checkpoint: tensor '", name, "' is undefined");
  add<Tensors>(entries_)->tensors.push_back(replicated(name, t));
  return *this;
}

State& State::shard(const std::string& name, const ::torch::Tensor& rows,
                    std::vector<int64_t> global_shape, int64_t offset) {
  TDIST_CHECK(rows.defined() && rows.dim() >= 1 &&
                  static_cast<size_t>(rows.dim()) == global_shape.size() && offset >= 0 &&
                  offset + rows.size(0) <= global_shape[0],
              InvalidArgument, "checkpoint: shard '", name, "' of ", rows.sizes(), " at row ",
              offset, " does not fit a tensor of ", c10::IntArrayRef(global_shape));
  for (size_t d = 1; d < global_shape.size(); ++d) {
    TDIST_CHECK(rows.size(static_cast<int64_t>(d)) == global_shape[d], InvalidArgument,
                "checkpoint: shard '", name, "' of ", rows.sizes(),
                " must hold whole rows of a tensor of ", c10::IntArrayRef(global_shape));
  }
  add<Tensors>(entries_)->tensors.push_back({name, rows, std::move(global_shape), offset, false});
  return *this;
}

State& State::value(const std::string& name, int64_t* v) {
  add_value(entries_, name, v);
  return *this;
}
State& State::value(const std::string& name, double* v) {
  add_value(entries_, name, v);
  return *this;
}
State& State::value(const std::string& name, std::string* v) {
  add_value(entries_, name, v);
  return *this;
}

State::Snapshot State::snapshot(int rank, int world) const {
  Snapshot out;
  for (const auto& e : entries_) e->snapshot(rank, world, out);
  return out;
}

State::LoadTarget State::load_target(int rank, int world, const Saved& saved) const {
  LoadTarget out;
  for (const auto& e : entries_) e->target(rank, world, saved, out);
  return out;
}

}  // namespace tdist::checkpoint
