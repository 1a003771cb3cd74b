// sharded_parity_worker: one rank of the parity yardstick (issue 32), run under tdistrun.
// It trains the model of tests/torch/fsdp2_parity.py (same formulas, same output format)
// with tdist::torch::fully_shard or tdist's DDP, so that sharded_parity_test.cc (and
// scripts/bench_sharded.sh parity) can compare both against PyTorch's FSDP2 over gloo.
//
//   tdistrun --standalone --nproc-per-node W torch_sharded_parity_worker
//       BACKEND fully_shard|ddp f32|bf16 sgd|adam OUT_FILE   (one command line)
//
// The model: 3 blocks of Linear(37, 37) + ReLU, then Linear(37, 5) (rows that do not divide
// by 2 or 3, so the shards are padded); each block a unit, then the root. Parameter k
// (in named_parameters order), element i: sin(0.37 i + k) / sqrt(fan_in), computed in
// double (libm) and rounded to float, as the Python side does with math.sin. Step s trains
// on the global samples n = s*12 .. s*12+11, x[n][j] = sin(0.71 n + 0.13 j), y[n][o] =
// 0.5 cos(0.29 n + 0.5 o); rank r takes its slice of 12/W of them; the loss is the MSE over
// the rank's slice (gradients are averaged over ranks). Rank 0 writes OUT_FILE: one line
// per loss, "loss <hex>", then one line per parameter, "param <name> <hex>...", each value
// a float's bits as 8 hex digits (bits preserved).
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/fully_shard.h"
#include "torch/parity_model.h"

namespace {

using namespace parity_model;  // NOLINT(google-build-using-namespace)

constexpr int kSteps = 20;

int run(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr,
                 "usage: sharded_parity_worker BACKEND fully_shard|ddp f32|bf16 sgd|adam OUT\n");
    return 2;
  }
  const std::string backend = argv[1], mode = argv[2], dtype = argv[3], optim = argv[4];
  const std::string out_path = argv[5];
  if ((mode != "fully_shard" && mode != "ddp") || (dtype != "f32" && dtype != "bf16") ||
      (optim != "sgd" && optim != "adam") || (mode == "ddp" && dtype != "f32")) {
    std::fprintf(stderr, "sharded_parity_worker: bad arguments\n");
    return 2;
  }
  torch::set_num_threads(1);
  tdist::init_process_group(backend);
  auto group = tdist::get_default_group();
  const int rank = group->rank();
  const int world = group->size();

  auto net = std::make_shared<Net>();
  init_parameters(*net);
  tdist::torch::FullyShardOptions options;
  if (dtype == "bf16") {
    options.param_dtype = torch::kBFloat16;
    options.reduce_dtype = torch::kFloat;
  }
  std::optional<tdist::torch::FullyShardedModule<std::shared_ptr<Net>>> root;
  std::optional<tdist::torch::DistributedDataParallel<std::shared_ptr<Net>>> ddp;
  if (mode == "ddp") {
    ddp.emplace(net);
  } else {
    for (auto& block : net->blocks) net->units.push_back(tdist::torch::fully_shard(block, options));
    root.emplace(tdist::torch::fully_shard(net, options));
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (optim == "sgd") {
    optimizer = std::make_unique<torch::optim::SGD>(net->parameters(),
                                                    torch::optim::SGDOptions(0.1).momentum(0.9));
  } else {
    optimizer =
        std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-2));
  }

  std::vector<float> losses;
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, rank, world);
    optimizer->zero_grad();
    torch::Tensor out = ddp ? ddp->forward(x) : (*root)(x);
    torch::Tensor loss = torch::mse_loss(out.to(torch::kFloat), y);
    loss.backward();
    optimizer->step();
    losses.push_back(loss.item<float>());
  }

  std::vector<std::pair<std::string, torch::Tensor>> params;
  if (root) {
    params = root->full_state_dict(/*rank0_only=*/true);
  } else {
    for (auto& named : net->named_parameters()) params.emplace_back(named.key(), named.value());
  }
  if (rank == 0) {
    std::ofstream out(out_path);
    for (float l : losses) out << "loss " << hex_bits(l) << "\n";
    for (auto& [name, value] : params) {
      torch::Tensor flat = value.detach().to(torch::kFloat).contiguous().view(-1);
      out << "param " << name;
      for (int64_t i = 0; i < flat.numel(); ++i) out << " " << hex_bits(flat[i].item<float>());
      out << "\n";
    }
    if (!out) {
      std::fprintf(stderr, "sharded_parity_worker: cannot write %s\n", out_path.c_str());
      return 1;
    }
  }
  tdist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "sharded_parity_worker: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sharded_parity_worker: %s\n", e.what());
  }
  return 1;
}
