// DistributedDataParallel's errors, with ranks as threads over the tcp backend: each must
// be raised on the rank(s) and by the call ddp.h promises, and name what went wrong.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/error.h"
#include "tdist/torch/comm_hooks.h"
#include "tdist/torch/ddp.h"

namespace tdist::torch::ddp_errors_test {
namespace {

using pg_test::ThreadWorld;
using ::torch::Tensor;

struct Net : ::torch::nn::Module {
  explicit Net(int64_t hidden = 6, bool with_unused = false) {
    fc1 = register_module("fc1", ::torch::nn::Linear(4, hidden));
    fc2 = register_module("fc2", ::torch::nn::Linear(hidden, 2));
    if (with_unused) head = register_module("head", ::torch::nn::Linear(4, 2));
  }
  Tensor forward(const Tensor& x) { return fc2(::torch::relu(fc1(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
};

using Ddp = DistributedDataParallel<std::shared_ptr<Net>>;

DDPOptions on(ThreadWorld& world, int rank) {
  DDPOptions options;
  options.process_group = world.shared(rank);
  return options;
}

// gtest without gmock: a failure message that shows the whole text.
::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" not in \"" << text << "\"";
}

// What `fn` threw (or "" when nothing), after checking the type.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return e.what();
  }
  return "";
}

class DdpErrorTest : public ::testing::Test {
 protected:
  void SetUp() override { ::torch::set_num_threads(1); }
};

TEST_F(DdpErrorTest, ShapeMismatchIsListedByNameOnEveryRank) {
  ThreadWorld world(2);
  std::vector<std::string> errors(2);
  world.run([&](int r, ProcessGroup&) {
    auto net = std::make_shared<Net>(r == 0 ? 6 : 7);
    errors[static_cast<size_t>(r)] = error_of<InvalidArgument>([&] { Ddp ddp(net, on(world, r)); });
  });
  for (const std::string& e : errors) {
    EXPECT_TRUE(Contains(e, "'fc1.weight': rank 0 has Float [6, 4], rank 1 has Float [7, 4]"));
    EXPECT_TRUE(Contains(e, "'fc2.weight': rank 0 has Float [2, 6], rank 1 has Float [2, 7]"));
  }
}

TEST_F(DdpErrorTest, ConstructionCopiesRankZerosParameters) {
  ThreadWorld world(2);
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < 2; ++r) {
    ::torch::manual_seed(r);
    nets.push_back(std::make_shared<Net>());
  }
  ASSERT_FALSE(::torch::equal(nets[0]->fc1->weight, nets[1]->fc1->weight));
  world.run([&](int r, ProcessGroup&) { Ddp ddp(nets[static_cast<size_t>(r)], on(world, r)); });
  for (size_t i = 0; i < nets[0]->parameters().size(); ++i) {
    EXPECT_TRUE(::torch::equal(nets[0]->parameters()[i], nets[1]->parameters()[i]));
  }
}

TEST_F(DdpErrorTest, ParameterWithoutGradientIsNamedAtTheEndOfBackward) {
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    Ddp ddp(std::make_shared<Net>(6, /*with_unused=*/true), on(world, r));
    Tensor loss = ddp.forward(::torch::randn({3, 4})).sum();  // forward is fine
    std::string e = error_of<Error>([&] { loss.backward(); });
    EXPECT_TRUE(Contains(e, "these parameters got no gradient: 'head.weight', 'head.bias'"));
    EXPECT_TRUE(Contains(e, "find_unused_parameters"));
  });
}

TEST_F(DdpErrorTest, SecondBackwardBeforeTheFirstFinishedIsAnError) {
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    auto net = std::make_shared<Net>();
    Ddp ddp(net, on(world, r));
    Tensor x = ::torch::randn({3, 4});
    Tensor hidden = ::torch::relu(net->fc1(x));
    // fc2's gradients are ready when backward reaches `hidden`; a backward started from
    // there (reentrant) gives fc2 a second gradient in the same pass.
    hidden.register_hook([&](const Tensor& g) {
      ::torch::AutoGradMode grad_mode(true);  // backward runs its hooks without it
      net->fc2(hidden.detach()).sum().backward();
      return g;
    });
    ddp.forward(x);  // arms the pass; the loss below reuses the module directly
    Tensor loss = net->fc2(hidden).sum();
    std::string e = error_of<Error>([&] { loss.backward(); });
    EXPECT_TRUE(Contains(e, "'fc2."));
    EXPECT_TRUE(Contains(e, "a second backward pass started before the first finished"));
    // The next forward says the pass never finished; the one after works again.
    e = error_of<Error>([&] { ddp.forward(x); });
    EXPECT_TRUE(Contains(e, "did not finish"));
    ddp.forward(x).sum().backward();
  });
}

TEST_F(DdpErrorTest, DifferentNumbersOfBackwardPassesAreDetected) {
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    Ddp ddp(std::make_shared<Net>(), on(world, r));
    for (int k = 0; k < 1 + r; ++k) {  // rank 1 accumulates one micro-batch more
      auto guard = ddp.no_sync();
      ddp.forward(::torch::randn({3, 4})).sum().backward();
    }
    Tensor loss = ddp.forward(::torch::randn({3, 4})).sum();
    std::string e = error_of<DesyncError>([&] { loss.backward(); });
    EXPECT_TRUE(Contains(e, "ranks ran different numbers of backward passes"));
    EXPECT_TRUE(Contains(e, r == 0 ? "this rank ran 2, all ranks between 2 and 3"
                                   : "this rank ran 3, all ranks between 2 and 3"));
  });
}

TEST_F(DdpErrorTest, ARankLeftAloneSaysWhy) {
  // After one iteration the extra forward waits in the bucket rebuild; after two, the extra
  // backward waits in the gradient reduction. Either way the group's timeout ends the
  // wait with an explanation.
  for (int common : {1, 2}) {
    ThreadWorld world(2, std::chrono::seconds(2));
    world.run([&](int r, ProcessGroup&) {
      Ddp ddp(std::make_shared<Net>(), on(world, r));
      for (int i = 0; i < common; ++i) ddp.forward(::torch::randn({3, 4})).sum().backward();
      if (r == 0) return;  // rank 1 runs one iteration more
      std::string e = error_of<TimeoutError>([&] {
        ddp.forward(::torch::randn({3, 4})).sum().backward();
      });
      EXPECT_TRUE(Contains(e, common == 1 ? "DDP forward" : "DDP synchronized backward pass 3"));
      EXPECT_TRUE(Contains(e, "most likely the ranks ran different numbers of"));
    });
  }
}

TEST_F(DdpErrorTest, CommHookOnlyBeforeTheFirstSynchronizedPass) {
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    Ddp ddp(std::make_shared<Net>(), on(world, r));
    EXPECT_TRUE(
        Contains(error_of<InvalidArgument>([&] { ddp.register_comm_hook(nullptr); }), "null hook"));
    ddp.forward(::torch::randn({3, 4})).sum().backward();
    EXPECT_TRUE(Contains(error_of<Error>([&] { ddp.register_comm_hook(fp16_compress_hook()); }),
                         "before the first synchronized backward"));
    EXPECT_TRUE(Contains(error_of<InvalidArgument>([&] {
                           PowerSGDOptions o;
                           o.start_powerSGD_iter = 1;
                           powerSGD_hook(o);
                         }),
                         "start_powerSGD_iter must be >= 2"));
  });
}

}  // namespace
}  // namespace tdist::torch::ddp_errors_test
