// fully_shard's handle (fully_shard.h): forwards to its ShardUnit, and the state dicts.
#include "tdist/torch/fully_shard.h"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "shard_unit.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"

namespace tdist::torch {

FullyShardedBase::FullyShardedBase(::torch::nn::Module& module, FullyShardOptions options)
    : unit_(ShardUnit::create(module, std::move(options))) {}

FullyShardedBase::FullyShardedBase(FullyShardedBase&&) noexcept = default;
FullyShardedBase& FullyShardedBase::operator=(FullyShardedBase&&) noexcept = default;
FullyShardedBase::~FullyShardedBase() = default;

FullyShardedBase::NoSyncGuard::NoSyncGuard(std::shared_ptr<ShardUnit> unit)
    : unit_(std::move(unit)), previous_(unit_->set_requires_sync(false)) {}

FullyShardedBase::NoSyncGuard::~NoSyncGuard() { unit_->set_requires_sync(previous_); }

FullyShardedBase::NoSyncGuard FullyShardedBase::no_sync() { return NoSyncGuard(unit_); }

void FullyShardedBase::unshard() { unit_->unshard(); }
void FullyShardedBase::reshard() { unit_->reshard(); }
void FullyShardedBase::pre_forward(const std::vector<::torch::Tensor>& inputs) {
  unit_->pre_forward(inputs);
}
void FullyShardedBase::post_forward(const std::vector<::torch::Tensor>& outputs) {
  unit_->post_forward(outputs);
}
void FullyShardedBase::forward_failed() noexcept { unit_->forward_failed(); }
::torch::Tensor FullyShardedBase::cast_forward_input(const ::torch::Tensor& t) const {
  const std::optional<c10::ScalarType>& dtype = unit_->options().param_dtype;
  if (!dtype || !t.defined() || !at::isFloatingType(t.scalar_type()) || t.scalar_type() == *dtype) {
    return t;
  }
  return t.to(*dtype);
}

ShardMemory FullyShardedBase::memory() const { return unit_->memory(); }
const std::shared_ptr<ProcessGroup>& FullyShardedBase::process_group() const {
  return unit_->group();
}

std::vector<std::pair<std::string, ::torch::Tensor>> FullyShardedBase::full_state_dict(
    bool rank0_only) {
  ::torch::NoGradGuard no_grad;
  const std::shared_ptr<ProcessGroup>& group = unit_->group();
  const int world = group->size();
  std::vector<std::pair<std::string, ::torch::Tensor>> out;
  for (const ShardParam* p : std::as_const(*unit_).all_params()) {
    // This rank's padded shard, gathered from every rank: rows of all, padding last.
    ::torch::Tensor shard = ::torch::zeros({p->chunk_rows(), p->row_numel()}, p->shard().options());
    const int64_t mine = p->rows_of(group->rank());
    shard.narrow(0, 0, mine).copy_(p->shard().reshape({mine, p->row_numel()}));
    ::torch::Tensor gathered =
        ::torch::empty({world * p->chunk_rows(), p->row_numel()}, shard.options());
    all_gather_into_tensor(gathered, shard, group);
    if (rank0_only && group->rank() != 0) continue;
    out.emplace_back(unit_->prefix_of(p) + p->name(),
                     gathered.narrow(0, 0, p->rows()).reshape(p->global_shape()).clone());
  }
  return out;
}

std::vector<ShardedTensor> FullyShardedBase::sharded_state_dict() const {
  const ShardUnit& unit = *unit_;
  const int rank = unit.group()->rank();
  std::vector<ShardedTensor> out;
  for (const ShardParam* p : unit.all_params()) {
    out.push_back({unit.prefix_of(p) + p->name(), p->shard().detach().clone(), p->global_shape(),
                   p->first_row(rank)});
  }
  return out;
}

std::vector<LocalShard> FullyShardedBase::local_shards() const {
  const ShardUnit& unit = *unit_;
  const int rank = unit.group()->rank();
  std::vector<LocalShard> out;
  for (const ShardParam* p : unit.all_params()) {
    out.push_back(
        {{unit.prefix_of(p) + p->name(), p->shard(), p->global_shape(), p->first_row(rank)},
         p->param()});
  }
  return out;
}

void FullyShardedBase::load_full_state_dict(
    const std::vector<std::pair<std::string, ::torch::Tensor>>& state) {
  std::unordered_map<std::string, const ::torch::Tensor*> by_name;
  for (const auto& [name, tensor] : state) by_name[name] = &tensor;
  const int rank = unit_->group()->rank();
  ::torch::NoGradGuard no_grad;
  for (ShardParam* p : unit_->all_params()) {
    const std::string name = unit_->prefix_of(p) + p->name();
    auto it = by_name.find(name);
    TDIST_CHECK(it != by_name.end(), InvalidArgument, "load_full_state_dict: no value for '", name,
                "'");
    const ::torch::Tensor& t = *it->second;
    TDIST_CHECK(t.sizes().vec() == p->global_shape(), InvalidArgument, "load_full_state_dict: '",
                name, "' has shape ", t.sizes(), " but the parameter has ",
                c10::IntArrayRef(p->global_shape()));
    const int64_t mine = p->rows_of(rank);
    p->shard()
        .reshape({mine, p->row_numel()})
        .copy_(t.reshape({p->rows(), p->row_numel()}).narrow(0, p->first_row(rank), mine));
  }
  unit_->reshard_tree();
}

void FullyShardedBase::load_sharded_state_dict(const std::vector<ShardedTensor>& shards) {
  std::unordered_map<std::string, std::vector<const ShardedTensor*>> by_name;
  for (const ShardedTensor& s : shards) by_name[s.name].push_back(&s);
  const int rank = unit_->group()->rank();
  ::torch::NoGradGuard no_grad;
  for (ShardParam* p : unit_->all_params()) {
    const std::string name = unit_->prefix_of(p) + p->name();
    const int64_t first = p->first_row(rank);
    const int64_t mine = p->rows_of(rank);
    ::torch::Tensor dst = p->shard().reshape({mine, p->row_numel()});
    int64_t covered = 0;
    for (const ShardedTensor* s : by_name[name]) {
      TDIST_CHECK(s->global_shape == p->global_shape(), InvalidArgument,
                  "load_sharded_state_dict: '", name, "' has global shape ",
                  c10::IntArrayRef(s->global_shape), " but the parameter has ",
                  c10::IntArrayRef(p->global_shape()));
      const int64_t rows = s->shard.numel() / std::max<int64_t>(1, p->row_numel());
      const int64_t lo = std::max(first, s->offset);
      const int64_t hi = std::min(first + mine, s->offset + rows);
      if (lo >= hi) continue;
      dst.narrow(0, lo - first, hi - lo)
          .copy_(s->shard.reshape({rows, p->row_numel()}).narrow(0, lo - s->offset, hi - lo));
      covered += hi - lo;
    }
    TDIST_CHECK(covered == mine, InvalidArgument, "load_sharded_state_dict: the shards of '", name,
                "' cover ", covered, " of this rank's ", mine, " rows (", first, " to ",
                first + mine, ")");
  }
  unit_->reshard_tree();
}

}  // namespace tdist::torch
