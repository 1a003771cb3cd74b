// fully_shard's bad input in one process: the scenarios of fully_shard_scenarios.h with
// ranks as threads (every rank must raise what the scenario expects; nothing may hang: the
// groups' timeout is short), and the errors a single rank finds alone (world 1).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/torch/fully_shard.h"
#include "torch/fully_shard_scenarios.h"

namespace tdist::torch::fully_shard_errors_test {
namespace {

using fully_shard_scenarios::Net;
using pg_test::ThreadWorld;

// The error's type as the scenarios name it, and its message.
std::pair<std::string, std::string> type_and_message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const DesyncError& x) {
    return {"DesyncError", x.what()};
  } catch (const InvalidArgument& x) {
    return {"InvalidArgument", x.what()};
  } catch (const std::exception& x) {
    return {pg_test::describe(std::current_exception()), x.what()};
  }
}

void expect_scenario(const std::string& name, int world) {
  ThreadWorld threads(world, std::chrono::seconds(10));
  std::vector<std::exception_ptr> errors = threads.run_collect(
      [&](int r, ProcessGroup&) { fully_shard_scenarios::run(name, threads.shared(r)); });
  for (int r = 0; r < world; ++r) {
    const std::exception_ptr& e = errors[static_cast<size_t>(r)];
    if (e == nullptr) {
      ADD_FAILURE() << name << ": rank " << r << " of " << world << " raised nothing";
      continue;
    }
    const auto [type, message] = type_and_message(e);
    const std::string why = fully_shard_scenarios::check(name, r, type, message);
    EXPECT_EQ(why, "") << name << ", rank " << r << " of " << world;
  }
}

TEST(FullyShardErrorsTest, EveryScenarioRaisesOnEveryRankOfTwoThreads) {
  for (const std::string& name : fully_shard_scenarios::names()) expect_scenario(name, 2);
}

TEST(FullyShardErrorsTest, EveryScenarioRaisesOnEveryRankOfThreeThreads) {
  for (const std::string& name : fully_shard_scenarios::names()) expect_scenario(name, 3);
}

// A group of one, for what a rank finds alone.
class FullyShardErrorsSoloTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::torch::manual_seed(0);
    FullyShardOptions options;
    options.process_group = world_.shared(0);
    net_ = std::make_shared<Net>();
    for (auto& b : net_->blocks) net_->units.push_back(fully_shard(b, options));
    model_ = std::make_unique<FullyShardedModule<std::shared_ptr<Net>>>(net_, options);
  }
  ThreadWorld world_{1};
  std::shared_ptr<Net> net_;
  std::unique_ptr<FullyShardedModule<std::shared_ptr<Net>>> model_;
};

template <typename Fn>
std::string invalid_argument_of(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument";
  return "";
}

TEST_F(FullyShardErrorsSoloTest, AParameterGivenOtherDataOfTheSameShapeIsNamed) {
  ::torch::optim::SGD opt(net_->parameters(), ::torch::optim::SGDOptions(0.1));
  fully_shard_scenarios::step(*model_, opt);
  {
    ::torch::NoGradGuard no_grad;
    net_->head->bias.set_data(::torch::zeros_like(net_->head->bias));
  }
  const std::string message =
      invalid_argument_of([&] { fully_shard_scenarios::step(*model_, opt); });
  EXPECT_NE(message.find("parameter 'head.bias' was replaced or resized"), std::string::npos)
      << message;
}

TEST_F(FullyShardErrorsSoloTest, AParameterOfAnotherShapeInsideAUnitIsNamedWithItsPath) {
  {
    ::torch::NoGradGuard no_grad;
    net_->blocks[1]->weight.set_data(::torch::zeros({2, 7}));
  }
  const std::string message = invalid_argument_of([&] { (*model_)(::torch::ones({1, 6})); });
  EXPECT_NE(message.find("parameter 'block1.weight'"), std::string::npos) << message;
}

TEST_F(FullyShardErrorsSoloTest, AnOptimizerOnTheShardsPasses) {
  ::torch::optim::Adam opt(net_->parameters(), ::torch::optim::AdamOptions(0.01));
  fully_shard_scenarios::step(*model_, opt);
  EXPECT_NO_THROW(model_->check_optimizer(opt));
}

TEST_F(FullyShardErrorsSoloTest, AnOptimizerBuiltBeforeWrappingWithoutStateWorks) {
  // fully_shard changes the parameters' data in place: the same tensors, now the shards.
  auto net = std::make_shared<Net>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  auto model = fully_shard_scenarios::wrap(net, world_.shared(0), {0, 1, 2});
  model->check_optimizer(opt);
  fully_shard_scenarios::step(*model, opt);
  EXPECT_NO_THROW(model->check_optimizer(opt));
}

TEST_F(FullyShardErrorsSoloTest, AnOptimizerOnAnotherModelIsRefused) {
  Net other;
  ::torch::optim::SGD opt(other.parameters(), ::torch::optim::SGDOptions(0.1));
  const std::string message = invalid_argument_of([&] { model_->check_optimizer(opt); });
  EXPECT_NE(message.find("parameter 0 of param group 0 ([7, 6] Float) is not a parameter of "
                         "this model"),
            std::string::npos)
      << message;
}

TEST_F(FullyShardErrorsSoloTest, AParameterRegisteredAfterWrappingIsNamed) {
  net_->register_parameter("extra", ::torch::ones({2}));
  ::torch::optim::SGD opt(net_->parameters(), ::torch::optim::SGDOptions(0.1));
  const std::string message = invalid_argument_of([&] { model_->check_optimizer(opt); });
  EXPECT_NE(message.find("parameter 'extra' ([2]) is not sharded"), std::string::npos) << message;
}

}  // namespace
}  // namespace tdist::torch::fully_shard_errors_test
