// fully_shard with ranks as threads (autograd runs each thread's backward on that thread,
// so each rank's end-of-backward callback works as in processes). Every result is checked
// against one process training the same model on the union of the ranks' data.
#include "tdist/torch/fully_shard.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/error.h"

namespace tdist::torch::fully_shard_test {
namespace {

using pg_test::ThreadWorld;
using ::torch::Tensor;
using State = std::map<std::string, Tensor>;

constexpr int64_t kIn = 6;
constexpr int64_t kOut = 3;

// Blocks of Linear + tanh, then a head; the blocks run through their units once wrapped.
struct Net : ::torch::nn::Module {
  Net(int64_t hidden, int blocks_count) {
    int64_t in = kIn;
    for (int i = 0; i < blocks_count; ++i) {
      blocks.push_back(
          register_module("block" + std::to_string(i), ::torch::nn::Linear(in, hidden)));
      in = hidden;
    }
    head = register_module("head", ::torch::nn::Linear(in, kOut));
  }
  Tensor forward(Tensor x) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      x = ::torch::tanh(units.empty() ? blocks[i](x) : units[i](x));
    }
    return head(x);
  }
  std::vector<::torch::nn::Linear> blocks;
  ::torch::nn::Linear head{nullptr};
  std::vector<FullyShardedModule<::torch::nn::Linear>> units;
};

struct Scenario {
  int world = 2;
  int64_t hidden = 7;  // rows that do not divide by the world size
  int blocks = 3;
  int64_t batch = 4;  // per rank
  int steps = 4;
  int micro = 1;  // micro-batches per step, all but the last under no_sync
  bool adam = false;
  bool wrap_blocks = true;
  FullyShardOptions options;
  std::function<void(Net&)> prepare = [](Net&) {};  // before wrapping, on every model
};

State state_of(::torch::nn::Module& m) {
  State out;
  for (const auto& item : m.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

std::unique_ptr<::torch::optim::Optimizer> optimizer(const Scenario& s,
                                                     const std::vector<Tensor>& params) {
  if (s.adam)
    return std::make_unique<::torch::optim::Adam>(params, ::torch::optim::AdamOptions(0.01));
  return std::make_unique<::torch::optim::SGD>(params,
                                               ::torch::optim::SGDOptions(0.1).momentum(0.9));
}

struct Data {
  Tensor xs, ys;  // [steps, micro, world * batch, ...]
};

Data data_for(const Scenario& s) {
  ::torch::manual_seed(7);
  return {::torch::randn({s.steps, s.micro, s.world * s.batch, kIn}),
          ::torch::randn({s.steps, s.micro, s.world * s.batch, kOut})};
}

State reference(const Scenario& s, const Data& d) {
  ::torch::manual_seed(1);
  auto net = std::make_shared<Net>(s.hidden, s.blocks);
  s.prepare(*net);
  auto opt = optimizer(s, net->parameters());
  for (int step = 0; step < s.steps; ++step) {
    opt->zero_grad();
    for (int k = 0; k < s.micro; ++k) {
      ::torch::mse_loss(net->forward(d.xs[step][k]), d.ys[step][k]).backward();
    }
    opt->step();
  }
  return state_of(*net);
}

double max_relative_error(const State& a, const State& b) {
  double worst = 0;
  for (const auto& [name, t] : b) {
    auto it = a.find(name);
    if (it == a.end()) return 1e9;
    const double scale = std::max(t.norm().item<double>(), 1e-12);
    worst = std::max(worst, (it->second.to(t.scalar_type()) - t).norm().item<double>() / scale);
  }
  return worst;
}

// Trains under fully_shard on every rank; `check` sees each rank's model after training.
using Check = std::function<void(int rank, Net&, FullyShardedModule<std::shared_ptr<Net>>&)>;

std::vector<State> train(const Scenario& s, const Data& d, const Check& check = {}) {
  std::vector<State> results(static_cast<size_t>(s.world));
  std::vector<std::shared_ptr<Net>> nets;  // made here: the random generator is global
  for (int r = 0; r < s.world; ++r) {
    ::torch::manual_seed(r == 0 ? 1 : 100 + r);  // rank 0's values must win
    nets.push_back(std::make_shared<Net>(s.hidden, s.blocks));
    s.prepare(*nets.back());
  }
  ThreadWorld world(s.world);
  world.run([&](int r, ProcessGroup&) {
    std::shared_ptr<Net> net = nets[static_cast<size_t>(r)];
    FullyShardOptions options = s.options;
    options.process_group = world.shared(r);
    if (s.wrap_blocks) {
      for (auto& b : net->blocks) net->units.push_back(fully_shard(b, options));
    }
    auto model = fully_shard(net, options);
    auto opt = optimizer(s, net->parameters());
    for (int step = 0; step < s.steps; ++step) {
      opt->zero_grad();
      for (int k = 0; k < s.micro; ++k) {
        auto pass = [&] {
          Tensor out = model(d.xs[step][k].narrow(0, r * s.batch, s.batch)).to(::torch::kFloat);
          ::torch::mse_loss(out, d.ys[step][k].narrow(0, r * s.batch, s.batch)).backward();
        };
        if (k + 1 < s.micro) {
          auto guard = model.no_sync();
          pass();
        } else {
          pass();
        }
      }
      opt->step();
    }
    for (auto& [name, t] : model.full_state_dict()) results[static_cast<size_t>(r)][name] = t;
    if (check) check(r, *net, model);
  });
  return results;
}

void expect_matches(const Scenario& s, double tolerance = 1e-5) {
  const Data d = data_for(s);
  const State ref = reference(s, d);
  const std::vector<State> ranks = train(s, d);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].size(), ref.size()) << "rank " << r;
    EXPECT_LE(max_relative_error(ranks[r], ref), tolerance) << "rank " << r;
  }
}

TEST(FullyShardTest, NestedUnitsTrainAsOneProcessOnAllTheData) { expect_matches({}); }

TEST(FullyShardTest, ThreeRanksWithAdamAndEmptyShards) {
  Scenario s;
  s.world = 3;
  s.hidden = 4;  // chunks of 2 rows: rank 2 holds none of them
  s.adam = true;
  expect_matches(s);
}

TEST(FullyShardTest, KeepingParametersAfterForwardChangesNothing) {
  Scenario s;
  s.options.reshard_after_forward = false;
  expect_matches(s);
}

TEST(FullyShardTest, RootAloneShardsEveryParameter) {
  Scenario s;
  s.wrap_blocks = false;
  expect_matches(s);
}

TEST(FullyShardTest, NoSyncAccumulatesMicroBatches) {
  Scenario s;
  s.micro = 3;
  expect_matches(s);
}

TEST(FullyShardTest, FrozenAndUnusedParametersKeepTheirValues) {
  Scenario s;
  s.prepare = [](Net& net) {
    net.blocks[0]->bias.set_requires_grad(false);             // frozen: gathered, never reduced
    net.register_parameter("unused", ::torch::ones({5, 2}));  // no gradient ever
  };
  expect_matches(s);
}

TEST(FullyShardTest, BFloat16ComputeWithFloatReductionStaysClose) {
  Scenario s;
  s.options.param_dtype = ::torch::kBFloat16;
  s.options.reduce_dtype = ::torch::kFloat;
  const Data d = data_for(s);
  const State ref = reference(s, d);
  const std::vector<State> ranks = train(s, d, [](int, Net& net, auto&) {
    for (const Tensor& p : net.parameters()) EXPECT_EQ(p.scalar_type(), ::torch::kFloat);
  });
  for (const State& r : ranks) EXPECT_LE(max_relative_error(r, ref), 0.05);
  EXPECT_GT(max_relative_error(ranks[0], ref), 0.0);  // it did compute in bf16
}

TEST(FullyShardTest, ShardsHoldTheirRowsAndMemoryIsAWorldsShare) {
  Scenario s;
  s.world = 3;
  s.steps = 1;
  const Data d = data_for(s);
  train(s, d, [&](int r, Net& net, auto& model) {
    // Rows of 7 over 3 ranks: 3, 3, 1.
    const int64_t rows = r < 2 ? 3 : 1;
    EXPECT_EQ(net.blocks[1]->weight.sizes(), (std::vector<int64_t>{rows, 7}));
    EXPECT_TRUE(net.blocks[1]->weight.grad().defined());
    const ShardMemory m = model.memory();  // the root: the head's 3 rows, one each
    EXPECT_EQ(m.sharded_params, (1 * 7 + 1) * 4);
    EXPECT_EQ(m.full_params, 0);
    std::vector<ShardedTensor> shards = model.sharded_state_dict();
    ASSERT_EQ(shards.size(), 8u);  // 3 blocks and the head, weight and bias each
    for (const ShardedTensor& t : shards) {
      EXPECT_EQ(t.offset, t.global_shape[0] == 7 ? 3 * r : r) << t.name;
    }
  });
}

TEST(FullyShardTest, StateDictsRoundTripAcrossWorldSizes) {
  Scenario s2;
  s2.world = 2;
  const Data d = data_for(s2);
  std::vector<ShardedTensor> saved;  // every rank's shards of world 2
  State full;
  std::mutex mu;
  train(s2, d, [&](int r, Net&, auto& model) {
    auto whole = model.full_state_dict();  // collective
    std::lock_guard<std::mutex> lock(mu);
    for (ShardedTensor& t : model.sharded_state_dict()) saved.push_back(std::move(t));
    if (r == 0) {
      for (auto& [name, t] : whole) full[name] = t;
    }
  });
  // Loaded by 3 ranks from the shards, and by 3 ranks from the whole tensors.
  for (bool sharded : {true, false}) {
    Scenario s3;
    s3.world = 3;
    s3.steps = 0;
    std::vector<std::shared_ptr<Net>> nets;
    for (int r = 0; r < 3; ++r) nets.push_back(std::make_shared<Net>(s3.hidden, s3.blocks));
    ThreadWorld world(3);
    world.run([&](int r, ProcessGroup&) {
      std::shared_ptr<Net> net = nets[static_cast<size_t>(r)];
      FullyShardOptions options;
      options.process_group = world.shared(r);
      for (auto& b : net->blocks) net->units.push_back(fully_shard(b, options));
      auto model = fully_shard(net, options);
      if (sharded) {
        model.load_sharded_state_dict(saved);
      } else {
        model.load_full_state_dict({full.begin(), full.end()});
      }
      State loaded;
      for (auto& [name, t] : model.full_state_dict()) loaded[name] = t;
      EXPECT_EQ(max_relative_error(loaded, full), 0.0) << "rank " << r;
    });
  }
}

TEST(FullyShardTest, AParameterReplacedOutsideTheUnitIsNamed) {
  Scenario s;
  s.steps = 1;
  const Data d = data_for(s);
  train(s, d, [&](int, Net& net, auto& model) {
    ::torch::NoGradGuard no_grad;
    net.blocks[2]->weight.set_data(::torch::zeros({7, 7}));
    try {
      model(::torch::zeros({1, kIn}));
      ADD_FAILURE() << "forward accepted a replaced parameter";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'block2.weight'"), std::string::npos) << e.what();
    }
  });
}

TEST(FullyShardTest, RanksWithDifferentModelsFailOnEveryRank) {
  ThreadWorld world(2);
  std::vector<std::shared_ptr<Net>> nets{std::make_shared<Net>(7, 2), std::make_shared<Net>(8, 2)};
  std::vector<std::exception_ptr> errors = world.run_collect([&](int r, ProcessGroup&) {
    std::shared_ptr<Net> net = nets[static_cast<size_t>(r)];
    FullyShardOptions options;
    options.process_group = world.shared(r);
    auto model = fully_shard(net, options);
  });
  for (const std::exception_ptr& e : errors) {
    ASSERT_NE(e, nullptr);
    try {
      std::rethrow_exception(e);
    } catch (const DesyncError& ex) {  // the ranks wrap different modules
      EXPECT_NE(std::string(ex.what()).find("'block0.weight' [7, 6]"), std::string::npos)
          << ex.what();
      EXPECT_NE(std::string(ex.what()).find("'block0.weight' [8, 6]"), std::string::npos)
          << ex.what();
    }
  }
}

}  // namespace
}  // namespace tdist::torch::fully_shard_test
