// checkpoint_worker: one rank of the distributed checkpoint tests (checkpoint_process_test.cc,
// tests/python/test_checkpoint.py), run under tdistrun (or alone: mode single).
//
//   torch_checkpoint_worker BACKEND MODE ACTION DIR
//     MODE   fully_shard | ddp (replicated) | single (no process group)
//     ACTION save: train 3 steps with Adam, save step 3 to DIR, write DIR/ref-3.txt (the
//                  parameters saved) and DIR/ref-3-next.txt (after one more step);
//            load: load DIR/step-00000003 (or $CKPT_PATH), check the parameters bit for bit
//                  against DIR/ref-3.txt and that the ranks' samplers hold the rest of the
//                  epoch exactly once, take one step, check against ref-3-next.txt within
//                  1e-5 relative;
//            loop: train with an async save after every step (keep_last 2), rank 0 writing
//                  DIR/ref-<step>.txt before each save, each rank its pid to
//                  DIR/pid-<rank>, until killed (at most 10000 steps);
//            verify: load the latest complete checkpoint of DIR and check it against its
//                  ref-<step>.txt;
//            load_model: load the model only from DIR/ckpt (saved by PyTorch:
//                  checkpoint_interop.py save) and check it against DIR/ref-py.txt;
//            save_bad: save where rank 1 alone names a complex tensor (which the format
//                  cannot hold): every rank must fail.
// The model and data are sharded_parity_worker's (tests/torch/fsdp2_parity.py builds the
// same in Python): 3 blocks of Linear(37, 37) + ReLU, then Linear(37, 5); the load side
// starts from other values (zeros) so that only the checkpoint can make them equal.
// Reference files: one line per parameter, "<name> <hex bits of each float>".
// Exit 0 when everything matched; 1 with the difference on stderr otherwise.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tdist/bytes_collectives.h"
#include "tdist/distributed.h"
#include "tdist/torch/checkpoint.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/fully_shard.h"
#include "tdist/torch/sampler.h"
#include "torch/parity_model.h"

namespace {

using namespace parity_model;  // NOLINT(google-build-using-namespace)

constexpr int64_t kSamplerSeed = 7;

// The parity model's parameters, or zeros (the load side: only a checkpoint makes them
// equal).
void init_parameters(Net& net, bool zeros) {
  if (!zeros) {
    parity_model::init_parameters(net);
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& p : net.parameters()) p.zero_();
}

class Job {
 public:
  Job(const std::string& backend, const std::string& mode, bool zeros) : mode_(mode) {
    if (mode != "single") {
      tdist::init_process_group(backend);
      rank_ = tdist::get_rank();
      world_ = tdist::get_world_size();
    }
    net_ = std::make_shared<Net>();
    init_parameters(*net_, zeros);
    if (mode == "fully_shard") {
      for (auto& block : net_->blocks) net_->units.push_back(tdist::torch::fully_shard(block));
      root_.emplace(tdist::torch::fully_shard(net_));
    } else if (mode == "ddp") {
      ddp_.emplace(net_);
    }
    optimizer_ =
        std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(1e-2));
    sampler_.emplace(kGlobalBatch * 10000, tdist::torch::DistributedSamplerOptions{
                                               world_, rank_, true, kSamplerSeed, false});
    add_model(state_);
    if (root_) {
      state_.optimizer(*optimizer_, *root_);
    } else {
      state_.optimizer(*optimizer_, *net_);
    }
    state_.sampler(*sampler_).value("step", &step_).rng();
  }

  void add_model(tdist::checkpoint::State& state) const {
    if (root_) {
      state.module(*root_, *net_);
    } else {
      state.module(*net_);
    }
  }

  void train_step() {
    auto [x, y] = batch(step_, rank_, world_);
    sampler_->next(static_cast<size_t>(kGlobalBatch / world_));
    optimizer_->zero_grad();
    torch::Tensor out = root_ ? (*root_)(x) : ddp_ ? ddp_->forward(x) : net_->forward(x);
    torch::mse_loss(out, y).backward();
    optimizer_->step();
    ++step_;
  }

  // Every parameter whole, by name (collective under fully_shard); empty off rank 0.
  std::vector<std::pair<std::string, torch::Tensor>> full_params() {
    if (root_) return root_->full_state_dict(/*rank0_only=*/true);
    std::vector<std::pair<std::string, torch::Tensor>> out;
    if (rank_ == 0) {
      for (auto& p : net_->named_parameters()) out.emplace_back(p.key(), p.value().detach());
    }
    return out;
  }

  int rank() const { return rank_; }
  int64_t step() const { return step_; }
  const tdist::checkpoint::State& state() const { return state_; }

  // Exactly once: the saving job's ranks read global positions [0, 36) of epoch 0 (3 steps
  // of 12 samples); the loaded samplers of this job's ranks must hold every other sample of
  // the epoch once (padding aside). 0 when they do, else 1 (on every rank).
  int check_sampler() const {
    tdist::torch::DistributedSampler copy = *sampler_;
    copy.reset();
    std::string mine;
    for (size_t p = 0; p < copy.num_real_samples(); ++p) {
      const auto index = static_cast<int64_t>(copy.indices()[p]);
      mine.append(reinterpret_cast<const char*>(&index), sizeof index);
    }
    std::vector<std::string> all = {mine};
    if (mode_ != "single") all = tdist::all_gather_bytes(mine);
    std::vector<int64_t> got;
    for (const std::string& bytes : all) {
      for (size_t i = 0; i + sizeof(int64_t) <= bytes.size(); i += sizeof(int64_t)) {
        int64_t v = 0;
        std::memcpy(&v, bytes.data() + i, sizeof v);
        got.push_back(v);
      }
    }
    const tdist::torch::DistributedSampler whole(sampler_->dataset_size(),
                                                 {1, 0, true, kSamplerSeed, false});
    std::vector<int64_t> want(whole.indices().begin() + 36, whole.indices().end());
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (got == want) return 0;
    std::fprintf(stderr,
                 "checkpoint_worker: after the load the ranks hold %zu samples of the "
                 "epoch's remaining %zu (or others)\n",
                 got.size(), want.size());
    return 1;
  }

 private:
  std::string mode_;
  int rank_ = 0, world_ = 1;
  std::shared_ptr<Net> net_;
  std::optional<tdist::torch::FullyShardedModule<std::shared_ptr<Net>>> root_;
  std::optional<tdist::torch::DistributedDataParallel<std::shared_ptr<Net>>> ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::optional<tdist::torch::DistributedSampler> sampler_;
  int64_t step_ = 0;
  tdist::checkpoint::State state_;
};

void write_ref(const std::string& path,
               const std::vector<std::pair<std::string, torch::Tensor>>& params) {
  std::ofstream out(path + ".part");
  for (const auto& [name, t] : params) {
    out << name;
    torch::Tensor c = t.contiguous();
    for (int64_t i = 0; i < c.numel(); ++i) out << ' ' << hex_bits(c.data_ptr<float>()[i]);
    out << '\n';
  }
  out.close();
  std::rename((path + ".part").c_str(), path.c_str());
}

// 0 when `params` match the file (bit for bit, or within `rel` relative), else 1.
int check_ref(const std::string& path,
              const std::vector<std::pair<std::string, torch::Tensor>>& params, double rel) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "checkpoint_worker: no reference %s\n", path.c_str());
    return 1;
  }
  std::map<std::string, torch::Tensor> by_name(params.begin(), params.end());
  size_t k = 0;
  for (std::string line; std::getline(in, line); ++k) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    if (by_name.count(name) == 0) {
      std::fprintf(stderr, "checkpoint_worker: %s: the model has no parameter %s\n", path.c_str(),
                   name.c_str());
      return 1;
    }
    torch::Tensor c = by_name[name].contiguous();
    int64_t i = 0;
    for (std::string hex; words >> hex; ++i) {
      uint32_t bits = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
      float want = 0;
      std::memcpy(&want, &bits, sizeof want);
      const float got = i < c.numel() ? c.data_ptr<float>()[i] : NAN;
      const bool ok = rel == 0 ? std::memcmp(&got, &want, sizeof got) == 0
                               : std::fabs(got - want) <= rel * (std::fabs(want) + 1e-3);
      if (!ok) {
        std::fprintf(stderr, "checkpoint_worker: %s: %s[%lld] is %.9g, expected %.9g\n",
                     path.c_str(), name.c_str(), static_cast<long long>(i), got, want);
        return 1;
      }
    }
    if (i != c.numel()) {
      std::fprintf(stderr, "checkpoint_worker: %s: %s has %lld values, expected %lld\n",
                   path.c_str(), name.c_str(), static_cast<long long>(c.numel()),
                   static_cast<long long>(i));
      return 1;
    }
  }
  if (k != params.size()) {
    std::fprintf(stderr, "checkpoint_worker: %s has %zu parameters, the model %zu\n", path.c_str(),
                 k, params.size());
    return 1;
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(
        stderr,
        "usage: checkpoint_worker BACKEND MODE save|load|loop|verify|load_model|save_bad DIR\n");
    return 2;
  }
  const std::string backend = argv[1], mode = argv[2], action = argv[3], dir = argv[4];
  torch::set_num_threads(1);
  Job job(backend, mode, action != "save" && action != "loop");
  if (action == "save") {
    for (int i = 0; i < 3; ++i) job.train_step();
    tdist::checkpoint::save(dir, job.step(), job.state());
    auto saved = job.full_params();
    job.train_step();
    auto next = job.full_params();
    if (job.rank() == 0) {
      write_ref(dir + "/ref-3.txt", saved);
      write_ref(dir + "/ref-3-next.txt", next);
    }
    return 0;
  }
  if (action == "load" || action == "verify") {
    std::string path = dir + "/step-00000003";
    if (const char* p = std::getenv("CKPT_PATH")) path = p;
    if (action == "verify") path = tdist::checkpoint::latest(dir).value_or(dir + "/none");
    const int64_t step = tdist::checkpoint::load(path, job.state());
    if (step != job.step()) {
      std::fprintf(stderr, "checkpoint_worker: load returned step %lld, the value %lld\n",
                   static_cast<long long>(step), static_cast<long long>(job.step()));
      return 1;
    }
    const std::string ref = dir + "/ref-" + std::to_string(step);
    auto loaded = job.full_params();
    if (job.rank() == 0 && check_ref(ref + ".txt", loaded, 0) != 0) return 1;
    if (action == "verify") return 0;
    if (job.check_sampler() != 0) return 1;
    job.train_step();
    auto next = job.full_params();
    if (job.rank() == 0 && check_ref(ref + "-next.txt", next, 1e-5) != 0) return 1;
    return 0;
  }
  if (action == "save_bad") {
    // Rank 1 alone names a tensor the format cannot hold: every rank must raise, naming it.
    tdist::checkpoint::State state = job.state();
    torch::Tensor bad = torch::zeros({2}, torch::kComplexFloat);
    if (job.rank() == 1) state.tensor("bad", bad);
    tdist::checkpoint::save(dir, 1, state);
    return 0;
  }
  if (action == "load_model") {
    // A checkpoint PyTorch saved (checkpoint_interop.py save): the model only.
    tdist::checkpoint::State model;
    job.add_model(model);
    tdist::checkpoint::load(dir + "/ckpt", model);
    auto loaded = job.full_params();
    return job.rank() == 0 ? check_ref(dir + "/ref-py.txt", loaded, 0) : 0;
  }
  if (action == "loop") {
    std::ofstream(dir + "/pid-" + std::to_string(job.rank())) << ::getpid() << "\n";
    tdist::checkpoint::CheckpointOptions options;
    options.keep_last = 2;
    tdist::checkpoint::Checkpointer ckpt(dir, options);
    for (int i = 0; i < 10000; ++i) {
      job.train_step();
      // The reference first: a save committed just before a kill has its reference.
      auto params = job.full_params();
      if (job.rank() == 0) write_ref(dir + "/ref-" + std::to_string(job.step()) + ".txt", params);
      ckpt.async_save(job.step(), job.state());
      ckpt.wait();
    }
    return 0;
  }
  std::fprintf(stderr, "checkpoint_worker: unknown action %s\n", action.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "checkpoint_worker rank %s: %s\n", rank != nullptr ? rank : "-", e.what());
    return 1;
  }
}
