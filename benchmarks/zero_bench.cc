// zero_bench: memory and step time of DDP + Adam against DDP + ZeroRedundancyOptimizer(Adam)
// on a ~50M-parameter MLP (2048-4096-4096-4096-2048, f32), one fixed random batch per rank,
// MSE loss, 2 warm-up steps, then `steps` timed ones.
//
//   tdistrun --standalone --nproc-per-node 2 zero_bench [--zero] [--bucket-view]
//            [--sync auto|broadcast|allgather] [--steps N] [--batch N] [--backend NAME]
//
// Each rank prints one line:
//   zero-bench rank=0 optimizer=zero sync=allgather bucket_view=1 params_m=50.4
//   state_mb=201.5 peak_rss_mb=1234 step_ms=812.3 optimizer_step_ms=201.2 sync_ms=50.1
// state_mb: the bytes of optimizer state this rank holds (ZeroRedundancyOptimizer::
// state_bytes, or the plain Adam's moments); peak_rss_mb: getrusage's ru_maxrss;
// step_ms: the mean timed step (zero_grad, forward, backward, optimizer step);
// optimizer_step_ms: the mean of the optimizer step alone (ZeRO: its parameter sync
// included); sync_ms (ZeRO): the mean of `steps` further steps without gradients, i.e. the
// parameter sync alone (0 for Adam). Exit status 2 on bad flags, 1 on errors.
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/zero.h"

namespace {

constexpr int kWarmupSteps = 2;

struct Flags {
  bool zero = false;
  bool bucket_view = false;
  std::string sync = "auto";
  int64_t steps = 10;
  int64_t batch = 16;
  std::string backend = "auto";
};

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--zero") {
      f.zero = true;
    } else if (flag == "--bucket-view") {
      f.bucket_view = true;
    } else if (flag == "--sync" && has_value) {
      f.sync = argv[++i];
      if (f.sync != "auto" && f.sync != "broadcast" && f.sync != "allgather") return false;
    } else if (flag == "--steps" && has_value) {
      f.steps = std::atoll(argv[++i]);
    } else if (flag == "--batch" && has_value) {
      f.batch = std::atoll(argv[++i]);
    } else if (flag == "--backend" && has_value) {
      f.backend = argv[++i];
    } else {
      return false;
    }
  }
  return f.steps > 0 && f.batch > 0;
}

struct Mlp : torch::nn::Module {
  Mlp() {
    const int64_t widths[] = {2048, 4096, 4096, 4096, 2048};
    for (size_t i = 0; i + 1 < std::size(widths); ++i) {
      layers->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
      if (i + 2 < std::size(widths)) layers->push_back(torch::nn::ReLU());
    }
    register_module("layers", layers);
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers;
};

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

int64_t adam_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t total = 0;
  for (const auto& entry : optimizer.state()) {
    const auto& s = static_cast<const torch::optim::AdamParamState&>(*entry.second);
    total += bytes_of(s.exp_avg()) + bytes_of(s.exp_avg_sq()) + bytes_of(s.max_exp_avg_sq());
  }
  return total;
}

int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

int bench(const Flags& flags) {
  torch::set_num_threads(1);
  tdist::init_process_group(flags.backend);
  const int rank = tdist::get_rank();
  torch::manual_seed(1);
  auto model = std::make_shared<Mlp>();
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  tdist::torch::DistributedDataParallel<std::shared_ptr<Mlp>> ddp(model);

  auto make_adam = [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(std::move(p), torch::optim::AdamOptions(1e-4));
  };
  std::unique_ptr<torch::optim::Optimizer> plain;
  std::unique_ptr<tdist::torch::ZeroRedundancyOptimizer> zero;
  if (flags.zero) {
    tdist::torch::ZeroOptions options;
    options.parameters_as_bucket_view = flags.bucket_view;
    options.param_sync = flags.sync == "broadcast"   ? tdist::torch::ParamSync::kBroadcast
                         : flags.sync == "allgather" ? tdist::torch::ParamSync::kAllGather
                                                     : tdist::torch::ParamSync::kAuto;
    zero = std::make_unique<tdist::torch::ZeroRedundancyOptimizer>(model->parameters(), make_adam,
                                                                   options);
  } else {
    plain = make_adam(model->parameters());
  }

  torch::manual_seed(100 + static_cast<uint64_t>(rank));
  const torch::Tensor x = torch::randn({flags.batch, 2048});
  const torch::Tensor y = torch::randn({flags.batch, 2048});
  using Clock = std::chrono::steady_clock;
  double step_s = 0;
  double optimizer_s = 0;
  for (int64_t step = 0; step < kWarmupSteps + flags.steps; ++step) {
    const auto start = Clock::now();
    if (zero) {
      zero->zero_grad();
    } else {
      plain->zero_grad();
    }
    torch::mse_loss(ddp.forward(x), y).backward();
    const auto before_step = Clock::now();
    if (zero) {
      zero->step();
    } else {
      plain->step();
    }
    const auto end = Clock::now();
    if (step >= kWarmupSteps) {
      step_s += std::chrono::duration<double>(end - start).count();
      optimizer_s += std::chrono::duration<double>(end - before_step).count();
    }
  }
  // ZeRO's parameter sync alone: steps without gradients (Adam skips every parameter).
  double sync_s = 0;
  if (zero) {
    zero->zero_grad();
    for (int64_t step = 0; step < flags.steps; ++step) {
      const auto start = Clock::now();
      zero->step();
      sync_s += std::chrono::duration<double>(Clock::now() - start).count();
    }
  }
  const int64_t state = zero ? zero->state_bytes() : adam_state_bytes(*plain);
  const char* sync = !zero                                                       ? "-"
                     : zero->param_sync() == tdist::torch::ParamSync::kAllGather ? "allgather"
                                                                                 : "broadcast";
  const auto steps = static_cast<double>(flags.steps);
  std::printf(
      "zero-bench rank=%d optimizer=%s sync=%s bucket_view=%d params_m=%.1f state_mb=%.1f "
      "peak_rss_mb=%.0f step_ms=%.1f optimizer_step_ms=%.1f sync_ms=%.1f\n",
      rank, zero ? "zero" : "adam", sync, flags.bucket_view ? 1 : 0,
      static_cast<double>(params) / 1e6, static_cast<double>(state) / (1 << 20),
      static_cast<double>(peak_rss_kib()) / 1024.0, step_s / steps * 1e3, optimizer_s / steps * 1e3,
      sync_s / steps * 1e3);
  std::fflush(stdout);
  tdist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!parse_flags(argc, argv, flags)) {
    std::fputs(
        "usage: zero_bench [--zero] [--bucket-view] [--sync auto|broadcast|allgather] "
        "[--steps N] [--batch N] [--backend NAME]\n",
        stderr);
    return 2;
  }
  try {
    return bench(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_bench: %s\n", e.what());
    return 1;
  }
}
