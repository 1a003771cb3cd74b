// ZeroRedundancyOptimizer with ranks as threads, over tcp and shm, worlds 2 and 3. Every
// run is checked against one plain (unsharded) optimizer stepping on the same averaged
// gradients; then the partition, the state bytes, the checkpoints and the errors.
#include "tdist/torch/zero.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/bytes_collectives.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/ddp.h"

namespace tdist::torch::zero_test {
namespace {

using pg_test::ThreadWorld;
using ::torch::Tensor;
using Params = std::vector<Tensor>;

struct Config {
  std::string backend;
  int world;
};

std::string config_name(const ::testing::TestParamInfo<Config>& info) {
  return info.param.backend + "W" + std::to_string(info.param.world);
}

enum class Kind { kSgd, kAdam, kAdamW };

std::unique_ptr<::torch::optim::Optimizer> make_optimizer(Kind kind, std::vector<Tensor> p) {
  namespace optim = ::torch::optim;
  switch (kind) {
    case Kind::kSgd:
      return std::make_unique<optim::SGD>(std::move(p),
                                          optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
    case Kind::kAdam:
      return std::make_unique<optim::Adam>(
          std::move(p), optim::AdamOptions(1e-2).weight_decay(1e-3).amsgrad(true));
    case Kind::kAdamW:
      return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions(1e-2));
  }
  return nullptr;
}

OptimizerFactory factory(Kind kind) {
  return [kind](std::vector<Tensor> p) { return make_optimizer(kind, std::move(p)); };
}

// Uneven sizes, so that the partition is not trivial.
const std::vector<std::vector<int64_t>> kShapes = {{7, 5}, {5},    {13, 3}, {3},
                                                   {32},   {2, 2}, {1},     {16, 4}};

Params random_params(const std::vector<std::vector<int64_t>>& shapes, uint64_t seed) {
  ::torch::manual_seed(seed);
  Params out;
  for (const auto& s : shapes) out.push_back(::torch::randn(s));
  return out;
}

// Leaf copies that require grad (each rank's, and the reference's, own parameters).
Params leaves(const Params& values) {
  Params out;
  for (const Tensor& v : values) out.push_back(v.clone().requires_grad_(true));
  return out;
}

Params snapshot(const Params& params) {
  Params out;
  for (const Tensor& p : params) out.push_back(p.detach().clone());
  return out;
}

// Largest |a - b| / |b| over the tensors (norms).
double max_relative_error(const Params& a, const Params& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = b[i].norm().item<double>();
    const double diff = (a[i] - b[i]).norm().item<double>();
    worst = std::max(worst, scale == 0 ? diff : diff / scale);
  }
  return worst;
}

bool identical(const Params& a, const Params& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!::torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// One plain optimizer over copies of `initial` stepping on `grads` (one list per step).
Params reference_run(Kind kind, const Params& initial, const std::vector<Params>& grads) {
  Params params = leaves(initial);
  auto optimizer = make_optimizer(kind, params);
  for (const Params& step : grads) {
    optimizer->zero_grad();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = step[i].clone();
    optimizer->step();
  }
  return snapshot(params);
}

// Per step, rank and parameter: a gradient (made before the rank threads start, since
// LibTorch's default generator is shared).
using RankGrads = std::vector<std::vector<Params>>;
RankGrads random_grads(const Params& like, int steps, int world, uint64_t seed) {
  ::torch::manual_seed(seed);
  RankGrads out(static_cast<size_t>(steps));
  for (auto& step : out) {
    for (int r = 0; r < world; ++r) {
      Params g;
      for (const Tensor& p : like) g.push_back(::torch::randn(p.sizes()));
      step.push_back(std::move(g));
    }
  }
  return out;
}

// Sets rank r's gradients of `step`, averaged over the ranks; returns them.
Params set_averaged_grads(const Params& params, const Params& mine,
                          const std::shared_ptr<ProcessGroup>& group) {
  Params averaged;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = mine[i].clone();
    all_reduce(g, ReduceOpKind::kAvg, group);
    params[i].mutable_grad() = g;
    averaged.push_back(g.clone());
  }
  return averaged;
}

ZeroOptions options_for(ThreadWorld& world, int rank, bool bucket_view = false,
                        ParamSync sync = ParamSync::kAuto) {
  ZeroOptions o;
  o.process_group = world.shared(rank);
  o.parameters_as_bucket_view = bucket_view;
  o.param_sync = sync;
  return o;
}

class ZeroTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override { ::torch::set_num_threads(1); }
  int world_size() const { return GetParam().world; }
  // Each test's collectives time out after 30 s rather than hang.
  std::unique_ptr<ThreadWorld> make_world() const {
    return std::make_unique<ThreadWorld>(GetParam().world, std::chrono::seconds(30),
                                         GetParam().backend);
  }
};

INSTANTIATE_TEST_SUITE_P(Backends, ZeroTest,
                         ::testing::Values(Config{"tcp", 2}, Config{"tcp", 3}, Config{"shm", 2},
                                           Config{"shm", 3}),
                         config_name);

struct Case {
  Kind kind;
  bool bucket_view;
  ParamSync sync;
  const char* name;
};

TEST_P(ZeroTest, MatchesAPlainOptimizerOnTheAveragedGradients) {
  constexpr int kSteps = 4;
  const int world = world_size();
  const Case cases[] = {
      {Kind::kSgd, false, ParamSync::kBroadcast, "SGD, broadcast"},
      {Kind::kSgd, true, ParamSync::kAllGather, "SGD, bucket view, all_gather"},
      {Kind::kAdam, false, ParamSync::kAllGather, "Adam, all_gather"},
      {Kind::kAdam, true, ParamSync::kBroadcast, "Adam, bucket view, broadcast"},
      {Kind::kAdamW, false, ParamSync::kAuto, "AdamW"},
      {Kind::kAdamW, true, ParamSync::kAuto, "AdamW, bucket view"},
  };
  auto tw = make_world();
  const Params initial = random_params(kShapes, 3);
  const RankGrads grads = random_grads(initial, kSteps, world, 11);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Params> averaged(kSteps);
    std::vector<Params> results(static_cast<size_t>(world));
    tw->run([&](int r, ProcessGroup&) {
      Params params = leaves(initial);
      ZeroRedundancyOptimizer zero(params, factory(c.kind),
                                   options_for(*tw, r, c.bucket_view, c.sync));
      for (int s = 0; s < kSteps; ++s) {
        zero.zero_grad();
        Params avg = set_averaged_grads(
            params, grads[static_cast<size_t>(s)][static_cast<size_t>(r)], tw->shared(r));
        if (r == 0) averaged[static_cast<size_t>(s)] = std::move(avg);
        zero.step();
      }
      results[static_cast<size_t>(r)] = snapshot(params);
    });
    const Params reference = reference_run(c.kind, initial, averaged);
    ASSERT_GT(max_relative_error(initial, reference), 1e-3);  // it trained at all
    for (int r = 0; r < world; ++r) {
      EXPECT_LE(max_relative_error(results[static_cast<size_t>(r)], reference), 1e-6)
          << "rank " << r;
      EXPECT_TRUE(identical(results[static_cast<size_t>(r)], results[0])) << "rank " << r;
    }
  }
}

struct Net : ::torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", ::torch::nn::Linear(8, 32));
    fc2 = register_module("fc2", ::torch::nn::Linear(32, 16));
    fc3 = register_module("fc3", ::torch::nn::Linear(16, 4));
  }
  Tensor forward(const Tensor& x) { return fc3(::torch::relu(fc2(::torch::relu(fc1(x))))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

TEST_P(ZeroTest, WithDdpMatchesAPlainOptimizer) {
  constexpr int kSteps = 4;
  constexpr int64_t kBatch = 5;  // per rank
  const int world = world_size();
  const Case cases[] = {
      {Kind::kAdam, false, ParamSync::kAuto, "Adam"},
      {Kind::kSgd, true, ParamSync::kAuto, "SGD, bucket view"},
  };
  auto tw = make_world();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ::torch::manual_seed(5);
    const Tensor xs = ::torch::randn({kSteps, world * kBatch, 8});
    const Tensor ys = ::torch::randn({kSteps, world * kBatch, 4});
    std::vector<std::shared_ptr<Net>> models;
    for (int r = 0; r < world; ++r) {
      ::torch::manual_seed(100 + static_cast<uint64_t>(r));  // DDP copies rank 0's
      models.push_back(std::make_shared<Net>());
    }
    const Params initial = snapshot(models[0]->parameters());
    std::vector<Params> grads(kSteps);
    std::vector<Params> results(static_cast<size_t>(world));
    tw->run([&](int r, ProcessGroup&) {
      DDPOptions ddp_options;
      ddp_options.process_group = tw->shared(r);
      DistributedDataParallel<std::shared_ptr<Net>> ddp(models[static_cast<size_t>(r)],
                                                        ddp_options);
      ZeroRedundancyOptimizer zero(ddp.module()->parameters(), factory(c.kind),
                                   options_for(*tw, r, c.bucket_view, c.sync));
      for (int s = 0; s < kSteps; ++s) {
        zero.zero_grad();
        const Tensor x = xs[s].narrow(0, r * kBatch, kBatch);
        const Tensor y = ys[s].narrow(0, r * kBatch, kBatch);
        ::torch::mse_loss(ddp.forward(x), y).backward();
        if (r == 0) {
          for (const Tensor& p : ddp.module()->parameters()) {
            grads[static_cast<size_t>(s)].push_back(p.grad().clone());
          }
        }
        zero.step();
      }
      results[static_cast<size_t>(r)] = snapshot(ddp.module()->parameters());
    });
    const Params reference = reference_run(c.kind, initial, grads);
    ASSERT_GT(max_relative_error(initial, reference), 1e-3);
    for (int r = 0; r < world; ++r) {
      EXPECT_LE(max_relative_error(results[static_cast<size_t>(r)], reference), 1e-6)
          << "rank " << r;
      EXPECT_TRUE(identical(results[static_cast<size_t>(r)], results[0])) << "rank " << r;
    }
  }
}

TEST_P(ZeroTest, PartitionIsTorchsGreedyOneOnEveryRank) {
  const int world = world_size();
  // numel 3, 10, 5, 8, 6: dealt largest first to the rank with the smallest total.
  const std::vector<int> expected =
      world == 2 ? std::vector<int>{1, 0, 0, 1, 1} : std::vector<int>{1, 0, 2, 1, 2};
  auto tw = make_world();
  std::vector<std::vector<int>> owners(static_cast<size_t>(world));
  std::vector<std::vector<std::vector<size_t>>> partitions(static_cast<size_t>(world));
  std::vector<std::string> foreign(static_cast<size_t>(world));
  tw->run([&](int r, ProcessGroup&) {
    Params params = leaves(random_params({{3}, {10}, {5}, {8}, {6}}, 1));
    ZeroRedundancyOptimizer zero(params, factory(Kind::kAdam), options_for(*tw, r));
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(zero.rank_of(params[i]), zero.rank_of(i));
      owners[static_cast<size_t>(r)].push_back(zero.rank_of(i));
    }
    partitions[static_cast<size_t>(r)] = zero.partition();
    try {
      zero.rank_of(::torch::zeros({3}));
    } catch (const InvalidArgument& e) {
      foreign[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(owners[static_cast<size_t>(r)], expected) << "rank " << r;
    EXPECT_EQ(partitions[static_cast<size_t>(r)], partitions[0]) << "rank " << r;
    EXPECT_NE(foreign[static_cast<size_t>(r)].find("not one of the parameters"), std::string::npos);
  }
  // Within a rank, largest first.
  const std::vector<std::vector<size_t>> want2 = {{1, 2}, {3, 4, 0}};
  const std::vector<std::vector<size_t>> want3 = {{1}, {3, 0}, {4, 2}};
  EXPECT_EQ(partitions[0], world == 2 ? want2 : want3);
}

TEST_P(ZeroTest, EachRankHoldsAboutOneWorldthOfTheState) {
  const int world = world_size();
  // 12 parameters of one size: an even split for 2 and 3 ranks.
  const Params even = random_params(std::vector<std::vector<int64_t>>(12, {64, 8}), 2);
  const Params uneven = random_params(kShapes, 2);
  auto tw = make_world();
  for (const Params* initial : {&even, &uneven}) {
    int64_t elements = 0;
    int64_t largest = 0;
    for (const Tensor& p : *initial) {
      elements += p.numel();
      largest = std::max(largest, p.numel());
    }
    const int64_t full = 2 * 4 * elements;  // Adam: exp_avg and exp_avg_sq, f32
    std::vector<int64_t> before(static_cast<size_t>(world)), after(static_cast<size_t>(world));
    tw->run([&](int r, ProcessGroup&) {
      Params params = leaves(*initial);
      ZeroRedundancyOptimizer zero(
          params,
          [](std::vector<Tensor> p) {
            return std::make_unique<::torch::optim::Adam>(std::move(p),
                                                          ::torch::optim::AdamOptions(1e-3));
          },
          options_for(*tw, r));
      before[static_cast<size_t>(r)] = zero.state_bytes();
      for (Tensor& p : params) p.mutable_grad() = ::torch::ones_like(p);
      zero.step();
      after[static_cast<size_t>(r)] = zero.state_bytes();
    });
    int64_t sum = 0;
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(before[static_cast<size_t>(r)], 0);
      sum += after[static_cast<size_t>(r)];
      // Greedy: no rank exceeds an even share by more than its largest parameter.
      EXPECT_LE(after[static_cast<size_t>(r)], full / world + 2 * 4 * largest) << "rank " << r;
      if (initial == &even) {
        EXPECT_EQ(after[static_cast<size_t>(r)], full / world);
      }
    }
    EXPECT_EQ(sum, full);
  }
}

TEST_P(ZeroTest, RanksWithoutParametersTakePart) {
  const int world = world_size();
  // world - 1 parameters: the last rank owns none.
  const Params initial =
      random_params(std::vector<std::vector<int64_t>>(static_cast<size_t>(world - 1), {6}), 4);
  const RankGrads grads = random_grads(initial, 2, world, 9);
  auto tw = make_world();
  for (bool bucket_view : {false, true}) {
    std::vector<Params> averaged(2), results(static_cast<size_t>(world));
    std::vector<int64_t> bytes(static_cast<size_t>(world));
    tw->run([&](int r, ProcessGroup&) {
      Params params = leaves(initial);
      ZeroRedundancyOptimizer zero(params, factory(Kind::kAdam), options_for(*tw, r, bucket_view));
      EXPECT_EQ(zero.partition()[static_cast<size_t>(world - 1)].size(), 0u);
      for (size_t s = 0; s < 2; ++s) {
        zero.zero_grad();
        Params avg = set_averaged_grads(params, grads[s][static_cast<size_t>(r)], tw->shared(r));
        if (r == 0) averaged[s] = std::move(avg);
        zero.step();
      }
      bytes[static_cast<size_t>(r)] = zero.state_bytes();
      results[static_cast<size_t>(r)] = snapshot(params);
    });
    const Params reference = reference_run(Kind::kAdam, initial, averaged);
    for (int r = 0; r < world; ++r) {
      EXPECT_LE(max_relative_error(results[static_cast<size_t>(r)], reference), 1e-6);
    }
    EXPECT_EQ(bytes[static_cast<size_t>(world - 1)], 0);
  }
}

// consolidate_state_dict to the last rank, torch::save, then the file loaded (a) into a
// ZeroRedundancyOptimizer on every rank and (b) into a plain optimizer: stepping either
// on the same gradients must give what the original gives.
TEST_P(ZeroTest, ConsolidatedStateRoundTrips) {
  constexpr int kBefore = 3;
  constexpr int kAfter = 2;
  const int world = world_size();
  const int to = world - 1;
  const Params initial = random_params(kShapes, 6);
  const RankGrads grads = random_grads(initial, kBefore + kAfter, world, 13);
  auto tw = make_world();
  for (Kind kind : {Kind::kAdam, Kind::kSgd}) {
    std::vector<Params> after_grads(kAfter);
    std::vector<Params> finals(static_cast<size_t>(world)), reloaded(static_cast<size_t>(world));
    std::vector<std::string> not_consolidated(static_cast<size_t>(world));
    std::vector<int64_t> bytes(static_cast<size_t>(world)),
        bytes_loaded(static_cast<size_t>(world));
    Params checkpoint_params;
    std::string file;
    tw->run([&](int r, ProcessGroup& pg) {
      const auto ru = static_cast<size_t>(r);
      Params params = leaves(initial);
      ZeroRedundancyOptimizer zero(params, factory(kind), options_for(*tw, r));
      auto train = [&](ZeroRedundancyOptimizer& z, Params& ps, int from, int count) {
        for (int s = from; s < from + count; ++s) {
          z.zero_grad();
          Params avg = set_averaged_grads(ps, grads[static_cast<size_t>(s)][ru], tw->shared(r));
          if (r == 0 && s >= kBefore)
            after_grads[static_cast<size_t>(s - kBefore)] = std::move(avg);
          z.step();
        }
      };
      train(zero, params, 0, kBefore);
      const Params at_checkpoint = snapshot(params);
      zero.consolidate_state_dict(to);
      std::string bytes_of_file;
      if (r == to) {
        std::ostringstream out;
        ::torch::save(zero.state_dict(), out);
        bytes_of_file = out.str();
        file = bytes_of_file;
        checkpoint_params = at_checkpoint;
      } else {
        try {
          zero.state_dict();
        } catch (const Error& e) {
          not_consolidated[ru] = e.what();
        }
      }
      broadcast_bytes(pg, bytes_of_file, to);
      bytes[ru] = zero.state_bytes();
      train(zero, params, kBefore, kAfter);
      finals[ru] = snapshot(params);

      // Another sharding (bucket view, all_gather) of the same parameters, from the file.
      Params params2 = leaves(at_checkpoint);
      ZeroRedundancyOptimizer zero2(params2, factory(kind),
                                    options_for(*tw, r, true, ParamSync::kAllGather));
      ::torch::serialize::InputArchive archive;
      archive.load_from(bytes_of_file.data(), bytes_of_file.size());
      zero2.load_state_dict(archive);
      bytes_loaded[ru] = zero2.state_bytes();
      train(zero2, params2, kBefore, kAfter);
      reloaded[ru] = snapshot(params2);
    });
    for (int r = 0; r < world; ++r) {
      const auto ru = static_cast<size_t>(r);
      EXPECT_TRUE(identical(reloaded[ru], finals[ru])) << "rank " << r;
      EXPECT_EQ(bytes_loaded[ru], bytes[ru]) << "rank " << r;
      if (r != to) {
        EXPECT_NE(not_consolidated[ru].find("consolidate_state_dict(" + std::to_string(r) + ")"),
                  std::string::npos)
            << not_consolidated[ru];
      }
    }
    EXPECT_GT(bytes[0], 0);
    // The file is a plain optimizer's: torch::load into one over the same parameters.
    Params plain_params = leaves(checkpoint_params);
    auto plain = make_optimizer(kind, plain_params);
    std::istringstream in(file);
    ::torch::load(*plain, in);
    for (const Params& g : after_grads) {
      plain->zero_grad();
      for (size_t i = 0; i < plain_params.size(); ++i)
        plain_params[i].mutable_grad() = g[i].clone();
      plain->step();
    }
    EXPECT_LE(max_relative_error(snapshot(plain_params), finals[0]), 1e-6);
  }
}

// ---- errors: InvalidArgument on every rank ------------------------------------------

// What each rank's construction threw (InvalidArgument expected; "" when nothing).
std::vector<std::string> construction_errors(
    ThreadWorld& tw, const std::function<Params(int)>& params_of,
    const std::function<OptimizerFactory(int)>& factory_of = [](int) {
      return factory(Kind::kAdam);
    }) {
  std::vector<std::string> errors(static_cast<size_t>(tw.size()));
  tw.run([&](int r, ProcessGroup&) {
    try {
      ZeroRedundancyOptimizer zero(params_of(r), factory_of(r), options_for(tw, r));
    } catch (const InvalidArgument& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  return errors;
}

::testing::AssertionResult AllContain(const std::vector<std::string>& texts,
                                      const std::string& part) {
  for (size_t r = 0; r < texts.size(); ++r) {
    if (texts[r].find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "rank " << r << ": \"" << part << "\" not in \"" << texts[r] << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST_P(ZeroTest, DifferentShapesAreRefusedOnEveryRank) {
  auto tw = make_world();
  const auto errors = construction_errors(*tw, [](int r) {
    return leaves({::torch::zeros({2, 3}), ::torch::zeros({4 + r})});
  });
  EXPECT_TRUE(AllContain(errors, "parameter lists differ"));
  EXPECT_TRUE(AllContain(errors, "'parameter #1': rank 0 has Float [4], rank 1 has Float [5]"));
}

TEST_P(ZeroTest, EmptyParameterListsAreRefusedOnEveryRank) {
  auto tw = make_world();
  EXPECT_TRUE(
      AllContain(construction_errors(*tw, [](int) { return Params{}; }), "empty parameter list"));
  // One rank alone: the others learn it too.
  EXPECT_TRUE(
      AllContain(construction_errors(
                     *tw, [](int r) { return r == 1 ? Params{} : leaves({::torch::zeros({3})}); }),
                 "rank 1: got an empty parameter list"));
}

TEST_P(ZeroTest, OtherBadParametersAreRefusedOnEveryRank) {
  auto tw = make_world();
  EXPECT_TRUE(
      AllContain(construction_errors(
                     *tw,
                     [](int) {
                       return leaves({::torch::zeros({3}), ::torch::zeros({3}, ::torch::kDouble)});
                     }),
                 "parameter #1 is Double but parameter #0 is Float"));
  const Tensor shared = ::torch::zeros({3}).requires_grad_(true);
  EXPECT_TRUE(AllContain(construction_errors(*tw,
                                             [&](int) {
                                               return Params{shared, shared};
                                             }),
                         "parameter #1 is given twice"));
  EXPECT_TRUE(AllContain(construction_errors(*tw,
                                             [](int r) {
                                               Tensor leaf =
                                                   ::torch::zeros({3}).requires_grad_(true);
                                               return r == 0 ? Params{leaf * 2} : Params{leaf};
                                             }),
                         "rank 0: parameter #0 is not a leaf tensor"));
}

TEST_P(ZeroTest, BadFactoriesAreRefusedOnEveryRank) {
  auto tw = make_world();
  auto params = [](int) { return leaves({::torch::zeros({3}), ::torch::zeros({4})}); };
  EXPECT_TRUE(AllContain(construction_errors(*tw, params,
                                             [](int r) -> OptimizerFactory {
                                               if (r != 1) return factory(Kind::kSgd);
                                               return [](std::vector<Tensor>) { return nullptr; };
                                             }),
                         "rank 1: the optimizer factory returned null"));
  EXPECT_TRUE(AllContain(construction_errors(*tw, params,
                                             [](int) -> OptimizerFactory {
                                               return [](std::vector<Tensor>) {
                                                 return make_optimizer(
                                                     Kind::kSgd,
                                                     {::torch::zeros({1}).requires_grad_(true)});
                                               };
                                             }),
                         "it must optimize exactly those it is given"));
  EXPECT_TRUE(AllContain(construction_errors(*tw, params,
                                             [](int) -> OptimizerFactory {
                                               return [](std::vector<Tensor> p) {
                                                 return std::make_unique<::torch::optim::SGD>(
                                                     std::move(p), ::torch::optim::SGDOptions(-1));
                                               };
                                             }),
                         "the optimizer factory threw"));
}

TEST_P(ZeroTest, BadCheckpointCallsAreRefused) {
  auto tw = make_world();
  const int world = world_size();
  std::vector<std::string> range(static_cast<size_t>(world)), type(static_cast<size_t>(world)),
      count(static_cast<size_t>(world));
  tw->run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    Params params = leaves({::torch::zeros({3}), ::torch::zeros({4})});
    ZeroRedundancyOptimizer zero(params, factory(Kind::kAdam), options_for(*tw, r));
    try {
      zero.consolidate_state_dict(world);
    } catch (const InvalidArgument& e) {
      range[ru] = e.what();
    }
    Params other = leaves({::torch::zeros({3}), ::torch::zeros({4})});
    try {
      zero.load_state_dict(*make_optimizer(Kind::kSgd, other));
    } catch (const InvalidArgument& e) {
      type[ru] = e.what();
    }
    try {
      zero.load_state_dict(*make_optimizer(Kind::kAdam, {other[0]}));
    } catch (const InvalidArgument& e) {
      count[ru] = e.what();
    }
  });
  EXPECT_TRUE(AllContain(range, "is not in the group"));
  EXPECT_TRUE(AllContain(type,
                         "the state is a torch::optim::SGD but the factory makes a "
                         "torch::optim::Adam"));
  EXPECT_TRUE(AllContain(count, "the state is of 1 parameters, this optimizer has 2"));
}

}  // namespace
}  // namespace tdist::torch::zero_test
