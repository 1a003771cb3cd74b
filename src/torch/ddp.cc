#include "tdist/torch/ddp.h"

#include <c10/core/GradMode.h>

#include <unordered_set>

#include "ddp_sync.h"
#include "reducer.h"
#include "tdist/device.h"
#include "tdist/distributed.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

// Each distinct tensor once: a parameter shared by two submodules keeps its first name.
std::vector<NamedTensor> unique_tensors(
    const ::torch::OrderedDict<std::string, ::torch::Tensor>& dict) {
  std::unordered_set<const void*> seen;
  std::vector<NamedTensor> out;
  for (const auto& item : dict) {
    if (seen.insert(item.value().unsafeGetTensorImpl()).second) {
      out.push_back({item.key(), item.value()});
    }
  }
  return out;
}

// `device`: the first parameter's (every parameter and buffer must be there).
void check_supported(const NamedTensor& t, const char* kind, const c10::Device& device) {
  TDIST_CHECK(t.tensor.device().is_cpu() || (TDIST_TORCH_CUDA && t.tensor.device().is_cuda()),
              InvalidArgument, "DDP: ", kind, " '", t.name, "' is on ", t.tensor.device(),
              "; tdist takes CPU", TDIST_TORCH_CUDA ? " and CUDA" : "",
              " tensors (tdist_torch was built against a LibTorch ",
              TDIST_TORCH_CUDA ? "with" : "without", " CUDA)");
  TDIST_CHECK(t.tensor.device() == device, InvalidArgument, "DDP: ", kind, " '", t.name, "' is on ",
              t.tensor.device(), " but the first parameter is on ", device,
              "; the module must be on one device");
  TDIST_CHECK(t.tensor.layout() == ::torch::kStrided, InvalidArgument, "DDP: ", kind, " '", t.name,
              "' is not a dense tensor");
  try {
    to_dtype(t.tensor.scalar_type());
  } catch (const InvalidArgument& e) {
    TDIST_THROW(InvalidArgument, "DDP: ", kind, " '", t.name, "': ", e.what());
  }
}

}  // namespace

DistributedDataParallelBase::NoSyncGuard::NoSyncGuard(DistributedDataParallelBase& owner)
    : owner_(owner), previous_(owner.require_sync_) {
  owner_.require_sync_ = false;
}

DistributedDataParallelBase::NoSyncGuard::~NoSyncGuard() { owner_.require_sync_ = previous_; }

DistributedDataParallelBase::DistributedDataParallelBase(::torch::nn::Module& module,
                                                         DDPOptions options)
    : options_(std::move(options)),
      group_(options_.process_group != nullptr ? options_.process_group : get_default_group()) {
  options_.process_group = group_;
  TDIST_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_mb > 0, InvalidArgument,
              "DDP: bucket_cap_mb and first_bucket_mb must be positive (got ",
              options_.bucket_cap_mb, " and ", options_.first_bucket_mb, ")");
  std::vector<NamedTensor> params = unique_tensors(module.named_parameters());
  std::vector<NamedTensor> buffers = unique_tensors(module.named_buffers());
  const c10::Device device = params.empty() ? c10::Device(c10::kCPU) : params[0].tensor.device();
  device_ = device;
  for (const NamedTensor& p : params) check_supported(p, "parameter", device);
  for (const NamedTensor& b : buffers) check_supported(b, "buffer", device);
  TDIST_CHECK(device.is_cuda() || (group_->memory_kinds() & memory_bit(MemoryKind::kHost)) != 0,
              InvalidArgument, "DDP: the ", group_->backend_name(),
              " group takes CUDA tensors only, but the module is on ", device,
              "; move it to the group's device first (tdist::torch::local_device())");

  std::vector<NamedTensor> all = params;
  for (const NamedTensor& b : buffers) all.push_back({b.name + " (buffer)", b.tensor});
  verify_same_shapes(*group_, all);
  for (const NamedTensor& t : all) state_.push_back(t.tensor);
  broadcast_coalesced(*group_, state_, /*root=*/0);

  for (const NamedTensor& b : buffers) buffers_.push_back(b.tensor);
  std::vector<NamedTensor> trainable;
  for (NamedTensor& p : params) {
    if (p.tensor.requires_grad()) trainable.push_back(std::move(p));
  }
  reducer_ = std::make_unique<Reducer>(std::move(trainable), group_, options_);
}

DistributedDataParallelBase::~DistributedDataParallelBase() = default;

void DistributedDataParallelBase::register_comm_hook(std::shared_ptr<CommHook> hook) {
  reducer_->set_comm_hook(std::move(hook));
}

std::vector<std::vector<std::string>> DistributedDataParallelBase::bucket_assignment() const {
  return reducer_->bucket_assignment();
}

bool DistributedDataParallelBase::buckets_rebuilt() const { return reducer_->buckets_rebuilt(); }

CommOverlap DistributedDataParallelBase::comm_overlap() const { return reducer_->comm_overlap(); }

void DistributedDataParallelBase::pre_forward() {
  const bool grad_mode = c10::GradMode::is_enabled();
  average_over_ = 0;
  // Under a Join the buffers come from the highest rank that still has inputs (rank 0 may
  // have joined). The Join's messages explain its own failures.
  const int buffers_from = join_context() != nullptr ? join_forward_step(grad_mode) : 0;
  try {
    if (grad_mode) reducer_->prepare_for_forward();
    if (options_.broadcast_buffers) broadcast_coalesced(*group_, buffers_, buffers_from);
  } catch (const Error& e) {
    if (!is_communication_error(e)) throw;
    rethrow_with_context(
        std::current_exception(),
        ::tdist::detail::str_cat("DDP forward (rank ", group_->rank(),
                                 "): synchronizing with the other ranks failed; most likely the "
                                 "ranks ran different numbers of iterations (the others never "
                                 "joined this forward), or a rank failed: "));
  }
}

bool DistributedDataParallelBase::wants_outputs() const {
  return c10::GradMode::is_enabled() && require_sync_ && reducer_->needs_outputs();
}

void DistributedDataParallelBase::post_forward(const std::vector<::torch::Tensor>& outputs) {
  if (!c10::GradMode::is_enabled()) return;
  if (require_sync_) {
    reducer_->prepare_for_backward(outputs, average_over_);
  } else {
    reducer_->prepare_for_local_backward();
  }
}

}  // namespace tdist::torch
