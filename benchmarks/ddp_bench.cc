// ddp_bench: step time, samples/s and peak RSS of training with tdist's
// DistributedDataParallel, on the models PyTorch's anchors time and set up as they do
// (../shared/anchors/torch_ddp_mlp.py and torch_ddp.py): one fixed random batch per rank,
// cross-entropy, SGD lr 0.01, 3 warm-up steps, then `steps` timed ones.
//
//   ddp_bench --model mlp|cnn|fashion [--steps N] [--batch N] [--backend NAME]
//             [--overlap auto|during|after] [--bucket-view | --manual | --interleave ROUNDS]
//   tdistrun --standalone --nproc-per-node 2 ddp_bench --model mlp
//
// Models: mlp = 784-2048-2048-10 (5.8M parameters, 23 MB of gradients), cnn = the classic
// MNIST example network of torch_ddp.py (1.2M parameters), fashion = train_fashion_mnist's
// FashionNet. Default batch per rank: 32 for mlp, 64 otherwise.
// Alone (no WORLD_SIZE) it trains the plain module with no DDP and no process group, as
// the anchors do for world 1; under a launcher every rank wraps it in DDP (backend `auto`
// unless --backend names another; --bucket-view sets gradient_as_bucket_view, --overlap
// DDPOptions::overlap), or with --manual trains the plain module and all_reduces each
// gradient in place after backward: no buckets, no overlap, no copies, the baseline DDP's
// overhead is measured against. Rank 0 prints one line:
//   tdist-ddp model=mlp world=2 batch_per_rank=32 step_ms=12.3 samples_per_s=5203
//   median_step_ms=12.10 overlap=after peak_rss_mb=412
// (one line) where step_ms and samples_per_s come from the mean step time (as the anchors
// report it), median_step_ms is rank 0's median step, overlap is when DDP launched its
// buckets (comm_overlap(); "-" without DDP), and peak_rss_mb is the largest ru_maxrss
// (getrusage) over the ranks. Exit status 2 on bad flags, 1 on errors.
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fashion_mnist_net.h"
#include "tdist/distributed.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/ddp.h"

namespace {

constexpr int kWarmupSteps = 3;

// torch_ddp.py's Net, layer for layer.
class AnchorNet : public torch::nn::Module {
 public:
  AnchorNet()
      : conv1_(register_module("conv1", torch::nn::Conv2d(1, 32, 3))),
        conv2_(register_module("conv2", torch::nn::Conv2d(32, 64, 3))),
        fc1_(register_module("fc1", torch::nn::Linear(9216, 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(conv1_->forward(x));
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);
    return fc2_->forward(torch::relu(fc1_->forward(torch::flatten(x, 1))));
  }

 private:
  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};

struct Flags {
  std::string model;
  int64_t steps = 20;
  int64_t batch = 0;  // 0: the model's default
  bool bucket_view = false;
  bool manual = false;
  tdist::torch::CommOverlap overlap = tdist::torch::CommOverlap::kAuto;
  int64_t interleave = 0;  // rounds of the interleaved comparison; 0: off
  std::string backend = "auto";
};

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--bucket-view") {
      f.bucket_view = true;
    } else if (flag == "--manual") {
      f.manual = true;
    } else if (i + 1 < argc && flag == "--overlap") {
      const std::string when = argv[++i];
      if (when == "during") {
        f.overlap = tdist::torch::CommOverlap::kDuringBackward;
      } else if (when == "after") {
        f.overlap = tdist::torch::CommOverlap::kAfterBackward;
      } else if (when != "auto") {
        return false;
      }
    } else if (i + 1 < argc && flag == "--model") {
      f.model = argv[++i];
    } else if (i + 1 < argc && flag == "--steps") {
      f.steps = std::atoll(argv[++i]);
    } else if (i + 1 < argc && flag == "--backend") {
      f.backend = argv[++i];
    } else if (i + 1 < argc && flag == "--batch") {
      f.batch = std::atoll(argv[++i]);
    } else if (i + 1 < argc && flag == "--interleave") {
      f.interleave = std::atoll(argv[++i]);
    } else {
      return false;
    }
  }
  if (f.batch == 0) f.batch = f.model == "mlp" ? 32 : 64;
  return (f.model == "mlp" || f.model == "cnn" || f.model == "fashion") && f.steps > 0 &&
         f.batch > 0 && f.interleave >= 0 && f.bucket_view + f.manual + (f.interleave > 0) <= 1;
}

struct StepTimes {
  double mean_s = 0;          // of the timed steps
  double median_s = 0;        // less sensitive to other work on the machine
  const char* overlap = "-";  // DDP's comm_overlap()
};

const char* overlap_name(tdist::torch::CommOverlap overlap) {
  switch (overlap) {
    case tdist::torch::CommOverlap::kAuto:
      return "auto";
    case tdist::torch::CommOverlap::kDuringBackward:
      return "during";
    case tdist::torch::CommOverlap::kAfterBackward:
      return "after";
  }
  return "?";
}

// Times `steps` steps: `forward` maps the batch to logits, `after_backward` runs between
// backward and the optimizer step.
template <typename Forward, typename AfterBackward>
StepTimes time_steps(torch::nn::Module& module, Forward&& forward, AfterBackward&& after_backward,
                     const Flags& flags) {
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({flags.batch, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {flags.batch}, torch::kLong);
  torch::optim::SGD optimizer(module.parameters(), 0.01);
  std::vector<double> steps;
  auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < flags.steps + kWarmupSteps; ++i) {
    const auto step_start = std::chrono::steady_clock::now();
    if (i == kWarmupSteps) start = step_start;
    optimizer.zero_grad();
    torch::nn::functional::cross_entropy(forward(x), y).backward();
    after_backward();
    optimizer.step();
    if (i >= kWarmupSteps) {
      steps.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count());
    }
  }
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  std::sort(steps.begin(), steps.end());
  return {elapsed.count() / static_cast<double>(flags.steps), steps[steps.size() / 2]};
}

// Times `model` plain (world 1), with manual all_reduce or under DDP.
template <typename Handle>
StepTimes run(Handle model, const Flags& flags, int world) {
  auto plain = [&](const torch::Tensor& x) { return model->forward(x); };
  auto nothing = [] {};
  if (world == 1) return time_steps(*model, plain, nothing, flags);
  if (flags.manual) {
    auto reduce_grads = [&] {
      for (const torch::Tensor& p : model->parameters()) {
        tdist::torch::all_reduce(p.grad(), tdist::ReduceOpKind::kAvg);
      }
    };
    return time_steps(*model, plain, reduce_grads, flags);
  }
  tdist::torch::DDPOptions options;
  options.gradient_as_bucket_view = flags.bucket_view;
  options.overlap = flags.overlap;
  tdist::torch::DistributedDataParallel ddp(model, options);
  auto wrapped = [&](const torch::Tensor& x) { return ddp.forward(x); };
  StepTimes times = time_steps(*model, wrapped, nothing, flags);
  times.overlap = overlap_name(ddp.comm_overlap());
  return times;
}

// --interleave: the variants take turns within one job, kTurnSteps steps each per round
// (the first kWarmupTurns rounds are warm-up), so that other work on the machine slows
// them alike. Rank 0 prints, per variant, the median step and its ratio to `plain`:
//   plain       the model without any communication (the ceiling of this job)
//   manual      each gradient all_reduced in place after backward (--manual)
//   ddp         DDP as configured (--overlap, default auto; the line says what it resolved to)
//   ddp-after   DDP, buckets launched at the end of backward (CommOverlap::kAfterBackward)
//   ddp-during  DDP, buckets launched during backward (CommOverlap::kDuringBackward)
//   ddp-view    DDP with gradient_as_bucket_view (overlap as --overlap says)
constexpr int kTurnSteps = 5;
constexpr int kWarmupTurns = 2;

template <typename Handle>
void interleave(const std::function<Handle()>& make, const Flags& flags, int rank) {
  using Ddp = tdist::torch::DistributedDataParallel<Handle>;
  struct Variant {
    std::string name;
    Handle model;
    std::unique_ptr<Ddp> ddp;
    std::unique_ptr<torch::optim::SGD> optimizer;
    std::vector<double> steps;
  };
  std::vector<Variant> variants;
  for (const char* name : {"plain", "manual", "ddp", "ddp-after", "ddp-during", "ddp-view"}) {
    Variant v{name, make(), nullptr, nullptr, {}};
    const std::string n = name;
    if (n.starts_with("ddp")) {
      tdist::torch::DDPOptions options;
      options.overlap = n == "ddp-after"    ? tdist::torch::CommOverlap::kAfterBackward
                        : n == "ddp-during" ? tdist::torch::CommOverlap::kDuringBackward
                                            : flags.overlap;
      options.gradient_as_bucket_view = n == "ddp-view";
      v.ddp = std::make_unique<Ddp>(v.model, options);
    }
    v.optimizer = std::make_unique<torch::optim::SGD>(v.model->parameters(), 0.01);
    variants.push_back(std::move(v));
  }
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({flags.batch, 1, 28, 28});
  torch::Tensor y = torch::randint(0, 10, {flags.batch}, torch::kLong);
  for (int64_t round = 0; round < flags.interleave + kWarmupTurns; ++round) {
    for (Variant& v : variants) {
      for (int i = 0; i < kTurnSteps; ++i) {
        const auto start = std::chrono::steady_clock::now();
        v.optimizer->zero_grad();
        torch::Tensor logits = v.ddp ? v.ddp->forward(x) : v.model->forward(x);
        torch::nn::functional::cross_entropy(logits, y).backward();
        if (v.name == "manual") {
          for (const torch::Tensor& p : v.model->parameters()) {
            tdist::torch::all_reduce(p.grad(), tdist::ReduceOpKind::kAvg);
          }
        }
        v.optimizer->step();
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        if (round >= kWarmupTurns) v.steps.push_back(took.count());
      }
    }
  }
  if (rank != 0) return;
  double plain = 0;
  for (Variant& v : variants) {
    std::sort(v.steps.begin(), v.steps.end());
    const double median = v.steps[v.steps.size() / 2];
    if (v.name == "plain") plain = median;
    std::printf(
        "tdist-ddp-interleaved model=%s variant=%s median_step_ms=%.2f vs_plain=%.3f "
        "overlap=%s\n",
        flags.model.c_str(), v.name.c_str(), median * 1e3, median / plain,
        v.ddp ? overlap_name(v.ddp->comm_overlap()) : "-");
  }
}

// The model, built the same way each time (seed 0).
template <typename Handle>
std::function<Handle()> factory(std::function<Handle()> make) {
  return [make] {
    torch::manual_seed(0);
    return make();
  };
}

template <typename Handle>
StepTimes time_or_interleave(const std::function<Handle()>& make, const Flags& flags, int world,
                             int rank) {
  if (flags.interleave == 0) return run(make(), flags, world);
  interleave(make, flags, rank);
  return {};
}

StepTimes time_model(const Flags& flags, int world, int rank) {
  if (flags.model == "mlp") {
    namespace nn = torch::nn;
    return time_or_interleave(factory<nn::Sequential>([] {
                                return nn::Sequential(nn::Flatten(), nn::Linear(784, 2048),
                                                      nn::ReLU(), nn::Linear(2048, 2048),
                                                      nn::ReLU(), nn::Linear(2048, 10));
                              }),
                              flags, world, rank);
  }
  if (flags.model == "cnn") {
    return time_or_interleave(
        factory<std::shared_ptr<AnchorNet>>([] { return std::make_shared<AnchorNet>(); }), flags,
        world, rank);
  }
  return time_or_interleave(factory<std::shared_ptr<fashion_mnist::FashionNet>>(
                                [] { return std::make_shared<fashion_mnist::FashionNet>(); }),
                            flags, world, rank);
}

int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

int bench(const Flags& flags) {
  torch::set_num_threads(1);
  int world = 1;
  int rank = 0;
  if (std::getenv("WORLD_SIZE") != nullptr) {
    tdist::init_process_group(flags.backend);
    world = tdist::get_world_size();
    rank = tdist::get_rank();
  }
  if (flags.interleave > 0 && world == 1) {
    std::fputs("ddp_bench: --interleave compares communication: run it under a launcher\n", stderr);
    return 2;
  }
  const StepTimes times = time_model(flags, world, rank);
  const double step_s = times.mean_s;
  torch::Tensor rss = torch::tensor({peak_rss_kib()});
  if (world > 1) {
    tdist::torch::all_reduce(rss, tdist::ReduceOpKind::kMax);
    tdist::destroy_process_group();
  }
  if (rank == 0 && flags.interleave == 0) {
    std::printf(
        "tdist-ddp model=%s world=%d batch_per_rank=%lld step_ms=%.1f samples_per_s=%.0f "
        "median_step_ms=%.2f overlap=%s peak_rss_mb=%.0f\n",
        flags.model.c_str(), world, static_cast<long long>(flags.batch), step_s * 1e3,
        static_cast<double>(world * flags.batch) / step_s, times.median_s * 1e3, times.overlap,
        static_cast<double>(rss.item<int64_t>()) / 1024.0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!parse_flags(argc, argv, flags)) {
    std::fputs(
        "usage: ddp_bench --model mlp|cnn|fashion [--steps N] [--batch N] [--backend NAME] "
        "[--overlap auto|during|after] [--bucket-view | --manual | --interleave ROUNDS]\n",
        stderr);
    return 2;
  }
  try {
    return bench(flags);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_bench: %s\n", e.what());
  }
  return 1;
}
