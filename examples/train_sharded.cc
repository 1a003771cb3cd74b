// Sharded training with tdist::torch::fully_shard: a stack of wide Linear blocks trained
// with Adam on a synthetic regression task (learn y = |sin(3x)|), each block a unit,
// so every rank holds 1/world of the parameters, gradients and Adam's state. With the
// defaults (16 blocks of 8192 x 8192, 1.07 G parameters) DDP would need ~17 GiB per rank
// for parameters, gradients and Adam's two moments, more than two ranks get on a 24 GiB
// machine; fully_shard needs about half that at world 2.
//
//   tdistrun --standalone --nproc-per-node 2 train_sharded
//   tdistrun --standalone --nproc-per-node 2 train_sharded --width 1024 --depth 4 --steps 50
//
// Rank 0 shows a progress bar and, at the end, every rank's memory (the parameters and
// gradients it holds: shards under fully_shard; the peak resident memory) and one summary
// line (scripts/bench_sharded.sh reads it). --ddp trains the same model with
// DistributedDataParallel instead, for comparison. --checkpoint DIR --checkpoint-every K
// saves the model and Adam's state (tdist::checkpoint, asynchronously: staged, then written
// while training goes on; the last one kept) every K steps; the summary line then also has
// the saves and the training thread's time blocked per save (scripts/bench_checkpoint.sh).
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fashion_mnist_progress.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/torch/checkpoint.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/fully_shard.h"

namespace {

constexpr const char* kUsage =
    "usage: train_sharded [--width N] [--depth N] [--batch-size N (per rank)] [--steps N]\n"
    "         [--lr X] [--backend NAME] [--bf16] [--ddp] [--checkpoint DIR]\n"
    "         [--checkpoint-every K]\n";

struct Flags {
  int64_t width = 8192;
  int64_t depth = 16;
  int64_t batch_size = 8;
  int64_t steps = 10;
  double lr = 1e-4;
  std::string backend = "shm";
  bool bf16 = false;             // gather and compute in bfloat16, reduce in float32
  bool ddp = false;              // DistributedDataParallel instead, for comparison
  std::string checkpoint;        // a folder: save there
  int64_t checkpoint_every = 0;  // every K steps (0: never)
};

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bf16" || flag == "--ddp") {
      (flag == "--bf16" ? f.bf16 : f.ddp) = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (flag == "--width") {
      f.width = std::atoll(v);
    } else if (flag == "--depth") {
      f.depth = std::atoll(v);
    } else if (flag == "--batch-size") {
      f.batch_size = std::atoll(v);
    } else if (flag == "--steps") {
      f.steps = std::atoll(v);
    } else if (flag == "--lr") {
      f.lr = std::atof(v);
    } else if (flag == "--backend") {
      f.backend = v;
    } else if (flag == "--checkpoint") {
      f.checkpoint = v;
    } else if (flag == "--checkpoint-every") {
      f.checkpoint_every = std::atoll(v);
    } else {
      return false;
    }
  }
  return f.width > 0 && f.depth > 0 && f.batch_size > 0 && f.steps > 0 && f.lr > 0 &&
         f.checkpoint_every >= 0 && (f.checkpoint_every == 0 || !f.checkpoint.empty());
}

// Linear + ReLU blocks of one width; forward calls each through its unit once sharded.
// `built` runs on each block as soon as it exists: fully_shard shards it there, so that no
// rank ever holds more than one whole block (the model may not fit one process).
struct Stack : torch::nn::Module {
  Stack(int64_t width, int64_t depth, const std::function<void(Stack&)>& built) {
    for (int64_t i = 0; i < depth; ++i) {
      blocks.push_back(
          register_module("block" + std::to_string(i), torch::nn::Linear(width, width)));
      built(*this);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      x = torch::relu(units.empty() ? blocks[i](x) : units[i](x));
    }
    return x;
  }
  std::vector<torch::nn::Linear> blocks;
  std::vector<tdist::torch::FullyShardedModule<torch::nn::Linear>> units;
};

// A line of /proc/self/status in MiB ("VmHWM": peak resident memory).
double status_mib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::atof(line.c_str() + std::strlen(key) + 1) / 1024.0;
  }
  return 0;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

int train(const Flags& flags) {
  if (std::getenv("WORLD_SIZE") != nullptr) {
    tdist::init_process_group(flags.backend);
  } else {
    tdist::init_process_group(flags.backend, "env://", 1, 0, tdist::default_pg_timeout(),
                              std::make_shared<tdist::HashStore>());
  }
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t != nullptr && std::atoi(t) > 0) {
    torch::set_num_threads(std::atoi(t));
  }
  auto group = tdist::get_default_group();
  const int rank = group->rank();
  const int world = group->size();
  const double params = static_cast<double>(flags.depth) * flags.width * (flags.width + 1);
  if (rank == 0) {
    std::printf(
        "%.0f M parameters; DDP with Adam would hold %.1f GiB per rank, fully_shard "
        "%.1f GiB (world %d)\n",
        params / 1e6, gib(params * 16), gib(params * 16 / world), world);
    std::fflush(stdout);
  }

  const double baseline_mib = status_mib("VmRSS:");  // the process before the model
  tdist::torch::FullyShardOptions options;
  if (flags.bf16) {
    options.param_dtype = torch::kBFloat16;
    options.reduce_dtype = torch::kFloat;
  }
  torch::manual_seed(1);
  auto model = std::make_shared<Stack>(flags.width, flags.depth, [&](Stack& stack) {
    if (!flags.ddp) stack.units.push_back(tdist::torch::fully_shard(stack.blocks.back(), options));
  });
  std::optional<tdist::torch::FullyShardedModule<std::shared_ptr<Stack>>> root;
  std::optional<tdist::torch::DistributedDataParallel<std::shared_ptr<Stack>>> ddp;
  if (flags.ddp) {
    ddp.emplace(model);
  } else {
    root.emplace(tdist::torch::fully_shard(model, options));
  }
  auto forward = [&](const torch::Tensor& x) { return flags.ddp ? ddp->forward(x) : (*root)(x); };
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(flags.lr));
  tdist::checkpoint::State state;
  if (root) {
    state.module(*root, *model).optimizer(optimizer, *root);
  } else {
    state.module(*model).optimizer(optimizer, *model);
  }
  std::optional<tdist::checkpoint::Checkpointer> checkpointer;
  if (flags.checkpoint_every > 0)
    checkpointer.emplace(flags.checkpoint, tdist::checkpoint::CheckpointOptions{.keep_last = 1});
  int64_t saves = 0;
  double blocked = 0;

  // The task: y = |sin(3x)|, elementwise; each rank its own batches.
  torch::manual_seed(100 + rank);
  fashion_mnist::ProgressBar bar(stderr, 1, 1, flags.steps);
  double smoothed = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < flags.steps; ++step) {
    if (step == 1) start = std::chrono::steady_clock::now();  // the first step warms up
    torch::Tensor x = torch::randn({flags.batch_size, flags.width});
    torch::Tensor y = torch::sin(3 * x).abs();
    optimizer.zero_grad();
    torch::Tensor loss = torch::mse_loss(forward(x).to(torch::kFloat), y);
    loss.backward();
    optimizer.step();
    torch::Tensor mean = loss.detach().clone();
    tdist::torch::all_reduce(mean, tdist::ReduceOpKind::kAvg);
    smoothed = step == 0 ? mean.item<double>() : 0.8 * smoothed + 0.2 * mean.item<double>();
    if (rank == 0) bar.update(step + 1, (step + 1) * flags.batch_size * world, smoothed);
    if (checkpointer && (step + 1) % flags.checkpoint_every == 0) {
      checkpointer->async_save(step + 1, state);
      ++saves;
      blocked += checkpointer->last_blocking_seconds();
    }
  }
  if (rank == 0) bar.finish();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (checkpointer) checkpointer->wait();  // after the timing: the last save's tail

  // Every rank's memory, printed by rank 0: the parameters' and gradients' bytes (the
  // shards under fully_shard) and the peak RSS.
  int64_t param_bytes = 0, grad_bytes = 0;
  for (const torch::Tensor& p : model->parameters()) {
    param_bytes += static_cast<int64_t>(p.nbytes());
    if (p.grad().defined()) grad_bytes += static_cast<int64_t>(p.grad().nbytes());
  }
  const double peak_mib = status_mib("VmHWM:");
  torch::Tensor mine =
      torch::tensor({static_cast<double>(param_bytes), static_cast<double>(grad_bytes), peak_mib,
                     peak_mib - baseline_mib},
                    torch::kDouble);
  torch::Tensor all = torch::empty({world, 4}, torch::kDouble);
  tdist::torch::all_gather_into_tensor(all, mine);
  if (rank == 0) {
    double peak = 0, peak_net = 0;
    for (int r = 0; r < world; ++r) {
      std::printf(
          "rank %d: parameters %.2f GiB, gradients %.2f GiB, Adam state ~%.2f GiB, "
          "peak RSS %.2f GiB (%.2f GiB above the process before the model)\n",
          r, gib(all[r][0].item<double>()), gib(all[r][1].item<double>()),
          gib(2 * all[r][0].item<double>()), all[r][2].item<double>() / 1024.0,
          all[r][3].item<double>() / 1024.0);
      peak = std::max(peak, all[r][2].item<double>());
      peak_net = std::max(peak_net, all[r][3].item<double>());
    }
    // One line for scripts/bench_sharded.sh (timed from the second step).
    const double timed = static_cast<double>(std::max<int64_t>(1, flags.steps - 1));
    std::printf(
        "sharded-%s world=%d params=%.0f step_ms=%.1f samples_per_s=%.1f "
        "peak_rss_mib=%.0f peak_above_baseline_mib=%.0f final_loss=%.4f saves=%lld "
        "save_block_ms=%.1f\n",
        flags.ddp ? "ddp" : "fully_shard", world, params, 1e3 * seconds / timed,
        timed * static_cast<double>(flags.batch_size * world) / seconds, peak, peak_net, smoothed,
        static_cast<long long>(saves),
        saves > 0 ? 1e3 * blocked / static_cast<double>(saves) : 0.0);
  }
  tdist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Flags flags;
  if (!parse_flags(argc, argv, flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // Gradients and Adam's temporaries of 1-64 MiB come and go every step (fully_shard keeps
  // its own buffers in a pool). glibc serves blocks under its mmap threshold (which grows
  // to 32 MiB as big blocks are freed) from its heap and keeps them when freed: ~200 MiB
  // more per rank here. A fixed threshold returns every big block at once, but then each
  // step faults its fresh pages in again, 4 KiB at a time (1.4x slower at 34M parameters);
  // backed by transparent huge pages (glibc's hugetlb tunable, for the kernel's madvise
  // mode), it costs little. Tunables are read when a program starts: set them, start again.
  if (std::getenv("TDIST_EXAMPLE_MALLOC") == nullptr) {
    const char* had = std::getenv("GLIBC_TUNABLES");
    std::string tunables = "glibc.malloc.mmap_threshold=1048576:glibc.malloc.hugetlb=1";
    if (had != nullptr && *had != '\0') tunables = std::string(had) + ":" + tunables;
    setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
    setenv("TDIST_EXAMPLE_MALLOC", "1", 1);
    execv("/proc/self/exe", argv);  // returns only if it failed: go on as we are
  }
  try {
    return train(flags);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "train_sharded: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_sharded: %s\n", e.what());
  }
  return 1;
}
