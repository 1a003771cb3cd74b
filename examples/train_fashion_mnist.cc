// train_fashion_mnist: data-parallel training of a small CNN on Fashion-MNIST with
// DistributedDataParallel and DistributedSampler, the C++ counterpart of a torchrun script.
//
//   tdistrun --standalone --nproc-per-node 2 train_fashion_mnist --epochs 1
//   train_fashion_mnist                  (no launcher: one process, a world-1 group)
//   tdistrun --standalone --nproc-per-node 2 train_fashion_mnist --device cuda [--backend nccl]
//
// Every rank trains on its share of the training set (the sampler) and DDP averages the
// gradients. Rank 0 draws a progress bar on stderr and prints the test accuracy after each
// epoch (the test set is split over the ranks too, counting each image once). Checkpoints
// (tdist::checkpoint: model, optimizer, sampler position, epoch and step, generator) go to
// the folder --checkpoint, after each epoch and, with --checkpoint-every N, every N steps,
// saved in the background while training goes on (the last 2 kept); --resume continues
// from the latest complete one, mid-epoch included, with every remaining sample of the
// epoch read exactly once (on any number of ranks), or starts afresh when there is none.
// Under tdistrun --max-restarts the restarted workers thus pick up where the last
// checkpoint left off. The folder must be visible to every rank. The last line on stdout is
// "test accuracy: NN.N%". Exit status 1 on any error (a missing dataset says which package
// to install), 2 on bad flags. Defaults: 1 epoch, batch 64 per rank, SGD with momentum 0.9
// and lr 0.05 (about 89% after one epoch with 2 ranks). --device cuda trains on each rank's
// GPU, tdist::torch::local_device() (LOCAL_RANK modulo the visible GPUs), over any backend:
// nccl on device memory, the others through pinned host memory.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "fashion_mnist_net.h"
#include "fashion_mnist_progress.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/torch/checkpoint.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/device.h"
#include "tdist/torch/fashion_mnist.h"
#include "tdist/torch/sampler.h"

namespace {

using fashion_mnist::FashionNet;
using tdist::torch::DistributedSampler;
using tdist::torch::FashionMNIST;

struct Flags {
  int epochs = 1;
  int64_t batch_size = 64;  // per rank
  double lr = 0.05;
  std::string backend = "auto";
  std::string device = "cpu";  // or "cuda": this rank's GPU (local_device())
  std::string data = FashionMNIST::kDefaultRoot;
  std::string checkpoint = "./fashion_mnist_ckpt";
  bool resume = false;
  int64_t checkpoint_every = 0;  // steps; 0: after each epoch only
  int64_t max_steps = 0;         // 0: whole epochs
  int64_t seed = 0;
};

constexpr const char* kUsage =
    "usage: train_fashion_mnist [--epochs N] [--batch-size N (per rank)] [--lr X]\n"
    "         [--backend NAME] [--data DIR] [--checkpoint DIR] [--checkpoint-every N]\n"
    "         [--resume] [--max-steps N (per epoch)] [--seed N] [--device cpu|cuda]\n";

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--resume") {
      f.resume = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    char* end = nullptr;
    if (flag == "--epochs") {
      f.epochs = static_cast<int>(std::strtol(v, &end, 10));
    } else if (flag == "--batch-size") {
      f.batch_size = std::strtoll(v, &end, 10);
    } else if (flag == "--lr") {
      f.lr = std::strtod(v, &end);
    } else if (flag == "--max-steps") {
      f.max_steps = std::strtoll(v, &end, 10);
    } else if (flag == "--seed") {
      f.seed = std::strtoll(v, &end, 10);
    } else if (flag == "--backend") {
      f.backend = v;
    } else if (flag == "--device") {
      f.device = v;
      if (f.device != "cpu" && f.device != "cuda") return false;
    } else if (flag == "--data") {
      f.data = v;
    } else if (flag == "--checkpoint") {
      f.checkpoint = v;
    } else if (flag == "--checkpoint-every") {
      f.checkpoint_every = std::strtoll(v, &end, 10);
    } else {
      return false;
    }
    if (end != nullptr && (*end != '\0' || end == v)) return false;
  }
  return f.epochs >= 0 && f.batch_size > 0 && f.lr > 0 && f.max_steps >= 0 &&
         f.checkpoint_every >= 0 && !f.checkpoint.empty();
}

// Under a launcher (WORLD_SIZE set) the ranks meet through env://; alone, the process
// forms a world-1 group on an in-process store, so the same code runs either way.
void join_process_group(const std::string& backend) {
  if (std::getenv("WORLD_SIZE") != nullptr) {
    tdist::init_process_group(backend);
  } else {
    tdist::init_process_group(backend, "env://", 1, 0, tdist::default_pg_timeout(),
                              std::make_shared<tdist::HashStore>());
  }
}

// torch::set_num_threads follows OMP_NUM_THREADS (tdistrun sets 1 per worker, so the
// ranks do not fight over the cores); unset leaves LibTorch's default.
void set_threads_from_env() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  int n = v != nullptr ? std::atoi(v) : 0;
  if (n > 0) torch::set_num_threads(n);
}

struct Accuracy {
  int64_t correct = 0;
  int64_t total = 0;
  double percent() const {
    return total > 0 ? 100.0 * static_cast<double>(correct) / static_cast<double>(total) : 0;
  }
};

// Test accuracy over the whole test set, split across the ranks. The sampler pads ranks
// to equal length by repeating samples; only each rank's first num_real_samples()
// positions are counted, so every image counts exactly once.
Accuracy evaluate(FashionNet& model, FashionMNIST test, torch::Device device) {
  torch::NoGradGuard no_grad;
  model.eval();
  DistributedSampler sampler(test.size().value(), {.shuffle = false});
  auto real = static_cast<int64_t>(sampler.num_real_samples());
  auto loader = torch::data::make_data_loader(test.map(torch::data::transforms::Stack<>()), sampler,
                                              /*batch_size=*/250);
  int64_t position = 0;
  int64_t correct = 0;
  for (auto& batch : *loader) {
    int64_t n = batch.data.size(0);
    int64_t keep = std::clamp<int64_t>(real - position, 0, n);
    torch::Tensor hits = model.forward(batch.data.to(device)).argmax(1).eq(batch.target.to(device));
    correct += hits.slice(0, 0, keep).sum().item<int64_t>();
    position += n;
  }
  model.train();
  torch::Tensor counts = torch::tensor({correct, std::min(position, real)}).to(device);
  tdist::torch::all_reduce(counts);  // CUDA: the current stream waits; .cpu() then syncs
  counts = counts.cpu();
  return {counts[0].item<int64_t>(), counts[1].item<int64_t>()};
}

// One epoch of at most `steps` steps; after_step() after each. The bar (shown when `show`)
// gets the global samples/s and rank 0's training loss, smoothed.
template <typename Ddp, typename Loader, typename AfterStep>
void run_epoch(Ddp& ddp, torch::optim::Optimizer& optimizer, Loader& loader, int64_t steps,
               int world, torch::Device device, fashion_mnist::ProgressBar bar, bool show,
               AfterStep after_step) {
  int64_t step = 0;
  int64_t samples = 0;
  double smoothed_loss = 0;
  if (steps == 0) return;
  for (auto& batch : loader) {
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(ddp.forward(batch.data.to(device)),
                                                              batch.target.to(device));
    loss.backward();
    optimizer.step();
    ++step;
    samples += batch.data.size(0) * world;  // every rank's batch has the same size
    if (show) {
      double l = loss.item<double>();
      smoothed_loss = step == 1 ? l : 0.95 * smoothed_loss + 0.05 * l;
      bar.update(step, samples, smoothed_loss);
    }
    after_step();
    if (step == steps) break;
  }
  if (show) bar.finish();
}

int train(const Flags& flags) {
  // Load the data first: a missing dataset should fail before anyone waits for peers.
  FashionMNIST train_set(flags.data, FashionMNIST::Mode::kTrain);
  FashionMNIST test_set(flags.data, FashionMNIST::Mode::kTest);
  set_threads_from_env();
  join_process_group(flags.backend);
  const int rank = tdist::get_rank();
  const int world = tdist::get_world_size();

  const torch::Device device =
      flags.device == "cuda" ? tdist::torch::local_device() : torch::Device(torch::kCPU);
  torch::manual_seed(flags.seed);
  auto model = std::make_shared<FashionNet>();
  model->to(device);  // before the optimizer takes the parameters
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9));
  DistributedSampler sampler(train_set.size().value(), {.seed = flags.seed});
  // What a checkpoint holds; the loop below keeps epoch, epoch_step and global_step current.
  int64_t epoch = 0, epoch_step = 0, global_step = 0;
  tdist::checkpoint::State state;
  state.module(*model).optimizer(optimizer, *model).sampler(sampler);
  state.value("epoch", &epoch).value("epoch_step", &epoch_step).rng();
  tdist::checkpoint::Checkpointer checkpointer(flags.checkpoint, {.keep_last = 2});
  if (flags.resume) {
    if (auto step = checkpointer.resume(state)) {
      global_step = *step;
      if (rank == 0) {
        std::printf("resumed from %s at step %lld: %lld epoch(s) and %lld step(s) done\n",
                    flags.checkpoint.c_str(), static_cast<long long>(global_step),
                    static_cast<long long>(epoch), static_cast<long long>(epoch_step));
      }
    } else if (rank == 0) {
      std::printf("no checkpoint in %s: starting afresh\n", flags.checkpoint.c_str());
    }
  }
  Accuracy accuracy;
  bool evaluated = false;
  {
    tdist::torch::DistributedDataParallel ddp(model);
    auto loader = torch::data::make_data_loader(train_set.map(torch::data::transforms::Stack<>()),
                                                sampler, flags.batch_size);
    for (; epoch < flags.epochs; ++epoch, epoch_step = 0) {
      sampler.set_epoch(epoch);  // keeps a resumed epoch's order (the rest of it)
      int64_t steps =
          (static_cast<int64_t>(sampler.size()) + flags.batch_size - 1) / flags.batch_size;
      if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps - epoch_step);
      run_epoch(
          ddp, optimizer, *loader, steps, world, device,
          fashion_mnist::ProgressBar(stderr, static_cast<int>(epoch + 1), flags.epochs, steps),
          rank == 0, [&] {
            ++epoch_step;
            ++global_step;
            if (flags.checkpoint_every > 0 && global_step % flags.checkpoint_every == 0) {
              checkpointer.async_save(global_step, state);
            }
          });
      accuracy = evaluate(*model, test_set, device);
      evaluated = true;
      ++epoch;  // the checkpoint of the epoch's end: the next epoch, at its start
      epoch_step = 0;
      checkpointer.async_save(global_step, state);
      --epoch;
      if (rank == 0) {
        std::printf("epoch %lld/%d: test accuracy %.1f%% (%lld images), checkpoint %s\n",
                    static_cast<long long>(epoch + 1), flags.epochs, accuracy.percent(),
                    static_cast<long long>(accuracy.total), flags.checkpoint.c_str());
        std::fflush(stdout);
      }
    }
    checkpointer.wait();
    if (!evaluated) accuracy = evaluate(*model, test_set, device);
  }
  tdist::destroy_process_group();
  if (rank == 0) std::printf("test accuracy: %.1f%%\n", accuracy.percent());
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
  try {
    return train(flags);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
  }
  return 1;
}
