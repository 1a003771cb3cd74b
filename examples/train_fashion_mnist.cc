// train_fashion_mnist: data-parallel training of a small CNN on Fashion-MNIST with
// DistributedDataParallel and DistributedSampler, the C++ counterpart of a torchrun script.
//
//   tdistrun --standalone --nproc-per-node 2 train_fashion_mnist --epochs 1
//   train_fashion_mnist                  (no launcher: one process, a world-1 group)
//   tdistrun --standalone --nproc-per-node 2 train_fashion_mnist --device cuda [--backend nccl]
//
// Every rank trains on its share of the training set (the sampler) and DDP averages the
// gradients. Rank 0 draws a progress bar on stderr, prints the test accuracy after each
// epoch (the test set is split over the ranks too, counting each image once) and saves a
// checkpoint (model, optimizer, epochs done); --resume continues with the next epoch
// (every rank reads the checkpoint, so its path must be visible to all of them). The last
// line on stdout is "test accuracy: NN.N%". Exit status 1 on any error (a missing dataset
// says which package to install), 2 on bad flags. Defaults: 1 epoch, batch 64 per rank,
// SGD with momentum 0.9 and lr 0.05 (about 89% after one epoch with 2 ranks). --device cuda
// trains on each rank's GPU, tdist::torch::local_device() (LOCAL_RANK modulo the visible
// GPUs), over any backend: nccl on device memory, the others through pinned host memory.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "fashion_mnist_net.h"
#include "fashion_mnist_progress.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
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
  std::string checkpoint = "./fashion_mnist.ckpt";
  bool resume = false;
  int64_t max_steps = 0;  // 0: whole epochs
  int64_t seed = 0;
};

constexpr const char* kUsage =
    "usage: train_fashion_mnist [--epochs N] [--batch-size N (per rank)] [--lr X]\n"
    "         [--backend NAME] [--data DIR] [--checkpoint PATH] [--resume]\n"
    "         [--max-steps N (per epoch)] [--seed N] [--device cpu|cuda]\n";

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
    } else {
      return false;
    }
    if (end != nullptr && (*end != '\0' || end == v)) return false;
  }
  return f.epochs >= 0 && f.batch_size > 0 && f.lr > 0 && f.max_steps >= 0;
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

// The checkpoint holds the model, the optimizer and the number of epochs done. It is
// written to a temporary name and renamed, so a crash never leaves a torn file.
void save_checkpoint(const std::string& path, FashionNet& model, torch::optim::Optimizer& opt,
                     int64_t epochs_done) {
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  torch::serialize::OutputArchive opt_archive(archive.compilation_unit());
  model.save(model_archive);
  opt.save(opt_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", opt_archive);
  archive.write("epochs_done", torch::tensor(epochs_done));
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  archive.save_to(tmp);
  std::filesystem::rename(tmp, path);
}

// Every rank loads the checkpoint (DDP then starts from rank 0's copy anyway); returns
// the epochs done.
int64_t load_checkpoint(const std::string& path, FashionNet& model, torch::optim::Optimizer& opt,
                        torch::Device device) {
  TDIST_CHECK(std::filesystem::exists(path), tdist::Error, "--resume: no checkpoint at ", path);
  torch::serialize::InputArchive archive;
  archive.load_from(path, device);
  torch::serialize::InputArchive model_archive;
  torch::serialize::InputArchive opt_archive;
  archive.read("model", model_archive);
  archive.read("optimizer", opt_archive);
  model.load(model_archive);
  opt.load(opt_archive);
  torch::Tensor epochs_done;
  archive.read("epochs_done", epochs_done);
  return epochs_done.item<int64_t>();
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

// One epoch of at most `steps` steps. The bar (shown when `show`) gets the global
// samples/s and rank 0's training loss, smoothed.
template <typename Ddp, typename Loader>
void run_epoch(Ddp& ddp, torch::optim::Optimizer& optimizer, Loader& loader, int64_t steps,
               int world, torch::Device device, fashion_mnist::ProgressBar bar, bool show) {
  int64_t step = 0;
  int64_t samples = 0;
  double smoothed_loss = 0;
  for (auto& batch : loader) {
    if (step == steps) break;
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
  int64_t epochs_done =
      flags.resume ? load_checkpoint(flags.checkpoint, *model, optimizer, device) : 0;
  Accuracy accuracy;
  {
    tdist::torch::DistributedDataParallel ddp(model);
    DistributedSampler sampler(train_set.size().value(), {.seed = flags.seed});
    auto loader = torch::data::make_data_loader(train_set.map(torch::data::transforms::Stack<>()),
                                                sampler, flags.batch_size);
    int64_t steps =
        (static_cast<int64_t>(sampler.size()) + flags.batch_size - 1) / flags.batch_size;
    if (flags.max_steps > 0) steps = std::min(steps, flags.max_steps);
    if (rank == 0 && epochs_done > 0) {
      std::printf("resumed from %s after %lld epoch(s)\n", flags.checkpoint.c_str(),
                  static_cast<long long>(epochs_done));
    }
    for (int64_t epoch = epochs_done; epoch < flags.epochs; ++epoch) {
      sampler.set_epoch(epoch);
      run_epoch(
          ddp, optimizer, *loader, steps, world, device,
          fashion_mnist::ProgressBar(stderr, static_cast<int>(epoch + 1), flags.epochs, steps),
          rank == 0);
      accuracy = evaluate(*model, test_set, device);
      if (rank == 0) {
        save_checkpoint(flags.checkpoint, *model, optimizer, epoch + 1);
        std::printf("epoch %lld/%d: test accuracy %.1f%% (%lld images), checkpoint %s\n",
                    static_cast<long long>(epoch + 1), flags.epochs, accuracy.percent(),
                    static_cast<long long>(accuracy.total), flags.checkpoint.c_str());
        std::fflush(stdout);
      }
    }
    if (epochs_done >= flags.epochs) accuracy = evaluate(*model, test_set, device);
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
