// Trains a small model with the installed tdist::torch::DistributedDataParallel, as an
// outside program would: run it under a launcher (tdistrun --nproc-per-node 2), or alone
// (a world-1 group). Every rank takes its own synthetic batches, DDP averages the
// gradients, so after the SGD steps every rank must hold the same parameters: each rank
// prints "rank R/W: checksum C" and then compares its parameters with rank 0's (exit
// status 1 when they differ). The last line of rank 0 is "consumer_torch ok".
#include <tdist/distributed.h>
#include <tdist/hash_store.h>
#include <tdist/torch/collectives.h>
#include <tdist/torch/ddp.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <vector>

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 16;

// All parameters in one flat tensor (module order).
torch::Tensor flat_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& p : module.parameters()) flat.push_back(p.detach().reshape(-1));
  return torch::cat(flat);
}

int run() {
  if (std::getenv("WORLD_SIZE") != nullptr) {
    tdist::init_process_group("auto");
  } else {
    tdist::init_process_group("auto", "env://", 1, 0, tdist::default_pg_timeout(),
                              std::make_shared<tdist::HashStore>());
  }
  const int rank = tdist::get_rank();
  const int world = tdist::get_world_size();

  // Different initial parameters on each rank: DDP's construction broadcasts rank 0's.
  torch::manual_seed(1 + rank);
  torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(),
                              torch::nn::Linear(16, 2));
  tdist::torch::DistributedDataParallel ddp(model);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));

  torch::manual_seed(100 + rank);  // each rank its own data
  for (int step = 0; step < kSteps; ++step) {
    torch::Tensor x = torch::randn({kBatch, 8});
    torch::Tensor y = (x.sum(1) > 0).to(torch::kLong);
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(ddp.forward(x), y);
    loss.backward();
    optimizer.step();
  }

  const torch::Tensor mine = flat_parameters(*model);
  std::printf("rank %d/%d: checksum %.9g\n", rank, world,
              mine.to(torch::kDouble).sum().item<double>());
  std::fflush(stdout);
  torch::Tensor root = mine.clone();
  tdist::torch::broadcast(root, 0);
  const bool same = torch::equal(root, mine);
  if (!same) std::fprintf(stderr, "rank %d: parameters differ from rank 0's\n", rank);
  torch::Tensor all_same = torch::tensor({same ? 1 : 0}, torch::kInt);
  tdist::torch::all_reduce(all_same, tdist::ReduceOpKind::kMin);
  tdist::destroy_process_group();
  if (all_same.item<int>() != 1) return 1;
  if (rank == 0) std::printf("consumer_torch ok\n");
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_torch: %s\n", e.what());
    return 1;
  }
}
