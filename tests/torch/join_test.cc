// Join (tdist/torch/join.h) with DistributedDataParallel, ranks as threads over the test
// backend: training on uneven inputs must leave every rank with the same parameters, equal
// to one process training on the batches of the ranks that still had inputs in each
// iteration, averaged over the group's size or over those ranks (what PyTorch's DDP +
// Join computes); throw_on_early_termination, a disabled Join, a rank that leaves by an
// exception, buffers, and a Joinable of the test's own.
#include "tdist/torch/join.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp_test_util.h"
#include "pg/pg_test_util.h"
#include "support/error_of.h"
#include "tdist/error.h"
#include "tdist/torch/ddp.h"

namespace tdist::torch::join_test {
namespace {

using pg_test::ThreadWorld;
using test_support::error_of;
using ::torch::Tensor;
using Params = std::vector<Tensor>;

constexpr int64_t kIn = 6;
constexpr int64_t kHidden = 8;
constexpr int64_t kOut = 3;
constexpr int64_t kBatch = 4;
constexpr double kLr = 0.1;

struct Net : ::torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", ::torch::nn::Linear(kIn, kHidden));
    fc2 = register_module("fc2", ::torch::nn::Linear(kHidden, kOut));
  }
  Tensor forward(const Tensor& x) { return fc2(::torch::relu(fc1(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

using Ddp = DistributedDataParallel<std::shared_ptr<Net>>;

Params snapshot(::torch::nn::Module& m) {
  Params out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Largest |a - b| / |b| over the tensors (norms).
double max_relative_error(const Params& a, const Params& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).norm().item<double>() / b[i].norm().item<double>());
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

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" not in \"" << text << "\"";
}

struct Scenario {
  std::vector<int> steps;  // per rank, inside the Join (one entry per rank: the world size)
  int micro = 1;           // forwards per step, all but the last under no_sync
  int even_after = 0;      // steps every rank runs after the Join ended (no Join)
  bool use_join = true;
  JoinOptions join;
  DDPOptions ddp;
};

struct Outcome {
  Params initial, reference;
  std::vector<Params> ranks;
};

// Inputs and targets: [rank][step][micro] batches.
struct Data {
  std::vector<std::vector<std::vector<Tensor>>> x, y;
};

Data make_data(const Scenario& s) {
  ::torch::manual_seed(7);
  const int total = *std::max_element(s.steps.begin(), s.steps.end()) + s.even_after;
  Data d;
  for (size_t r = 0; r < s.steps.size(); ++r) {
    d.x.emplace_back();
    d.y.emplace_back();
    for (int step = 0; step < total; ++step) {
      d.x[r].emplace_back();
      d.y[r].emplace_back();
      for (int k = 0; k < s.micro; ++k) {
        d.x[r][step].push_back(::torch::randn({kBatch, kIn}));
        d.y[r][step].push_back(::torch::randn({kBatch, kOut}));
      }
    }
  }
  return d;
}

// One process: in each step, the batches of the ranks that still have inputs, their losses
// summed and divided by what DDP divides by.
Params reference_training(const Scenario& s, const Data& d, Params* initial) {
  ::torch::manual_seed(1);
  auto net = std::make_shared<Net>();
  *initial = snapshot(*net);
  ::torch::optim::SGD opt(net->parameters(), kLr);
  const int world = static_cast<int>(s.steps.size());
  const int longest = *std::max_element(s.steps.begin(), s.steps.end());
  for (int step = 0; step < longest + s.even_after; ++step) {
    std::vector<size_t> active;
    for (size_t r = 0; r < s.steps.size(); ++r) {
      if (step >= longest || step < s.steps[r]) active.push_back(r);
    }
    const bool by_world = step >= longest || s.join.divide_by_initial_world_size;
    const double divisor = by_world ? world : static_cast<double>(active.size());
    opt.zero_grad();
    for (int k = 0; k < s.micro; ++k) {
      Tensor loss = ::torch::zeros({});
      for (size_t r : active) {
        loss = loss + ::torch::mse_loss(net->forward(d.x[r][step][k]), d.y[r][step][k]);
      }
      (loss / divisor).backward();
    }
    opt.step();
  }
  return snapshot(*net);
}

// One training step of rank r: micro forwards (all but the last under no_sync), then step().
void train_step(Ddp& ddp, ::torch::optim::Optimizer& opt, const Data& d, size_t r, int step,
                int micro) {
  opt.zero_grad();
  for (int k = 0; k < micro; ++k) {
    auto pass = [&] {
      ::torch::mse_loss(ddp.forward(d.x[r][step][k]), d.y[r][step][k]).backward();
    };
    if (k + 1 < micro) {
      auto guard = ddp.no_sync();
      pass();
    } else {
      pass();
    }
  }
  opt.step();
}

Outcome train(const Scenario& s) {
  const Data d = make_data(s);
  Outcome out;
  out.reference = reference_training(s, d, &out.initial);
  const int world = static_cast<int>(s.steps.size());
  const int longest = *std::max_element(s.steps.begin(), s.steps.end());
  out.ranks.resize(s.steps.size());
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < world; ++r) {
    ::torch::manual_seed(r == 0 ? 1 : 100 + r);  // DDP copies rank 0's parameters
    nets.push_back(std::make_shared<Net>());
  }
  ThreadWorld tw(world);
  tw.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    const std::shared_ptr<Net>& net = nets[ru];
    DDPOptions options = s.ddp;
    options.process_group = tw.shared(r);
    Ddp ddp(net, options);
    ::torch::optim::SGD opt(net->parameters(), kLr);
    if (s.use_join) {
      Join join(ddp, s.join);
      for (int step = 0; step < s.steps[ru]; ++step) train_step(ddp, opt, d, ru, step, s.micro);
    } else {
      for (int step = 0; step < s.steps[ru]; ++step) train_step(ddp, opt, d, ru, step, s.micro);
    }
    for (int e = 0; e < s.even_after; ++e) train_step(ddp, opt, d, ru, longest + e, s.micro);
    out.ranks[ru] = snapshot(*net);
  });
  return out;
}

void expect_matches_reference(const Outcome& o) {
  for (size_t r = 0; r < o.ranks.size(); ++r) {
    EXPECT_TRUE(identical(o.ranks[r], o.ranks[0])) << "rank " << r << " differs from rank 0";
    EXPECT_LE(max_relative_error(o.ranks[r], o.reference), 1e-5) << "rank " << r;
  }
  EXPECT_GT(max_relative_error(o.initial, o.reference), 1e-3);  // it trained at all
}

class JoinTest : public ::testing::TestWithParam<CommOverlap> {
 protected:
  void SetUp() override { ::torch::set_num_threads(1); }
  Scenario base(std::vector<int> steps) const {
    Scenario s;
    s.steps = std::move(steps);
    s.ddp.overlap = GetParam();
    // Several buckets (one per tensor, mostly), rebuilt after the first iteration.
    s.ddp.first_bucket_mb = 1e-4;
    s.ddp.bucket_cap_mb = 1e-4;
    return s;
  }
};

INSTANTIATE_TEST_SUITE_P(Overlap, JoinTest,
                         ::testing::Values(CommOverlap::kDuringBackward,
                                           CommOverlap::kAfterBackward),
                         overlap_name);

// Rank 0 without any batch shadows the first pass too, and then sends its bucket order.
const std::vector<std::vector<int>> kUneven = {{1, 3}, {3, 0}, {0, 1, 5}, {5, 0, 1}, {2, 5, 2}};

TEST_P(JoinTest, UnevenInputsAveragedOverTheGroupMatchOneProcess) {
  for (const std::vector<int>& steps : kUneven) {
    SCOPED_TRACE(::testing::PrintToString(steps));
    Scenario s = base(steps);
    s.even_after = 1;  // the DDP trains on after the Join: its state agrees on every rank
    expect_matches_reference(train(s));
  }
}

TEST_P(JoinTest, UnevenInputsWithTheOtherDdpOptions) {
  // The control vector's used-parameter flags (find_unused_parameters, static_graph) and
  // gradients that are views of the buckets.
  for (int variant = 0; variant < 3; ++variant) {
    for (const std::vector<int>& steps : {std::vector<int>{0, 1, 5}, std::vector<int>{3, 1}}) {
      SCOPED_TRACE(::testing::PrintToString(steps) + " variant " + std::to_string(variant));
      Scenario s = base(steps);
      s.ddp.find_unused_parameters = variant == 0;
      s.ddp.static_graph = variant == 1;
      s.ddp.gradient_as_bucket_view = variant == 2;
      s.join.divide_by_initial_world_size = variant != 1;
      s.even_after = 1;
      expect_matches_reference(train(s));
    }
  }
}

TEST_P(JoinTest, UnevenInputsAveragedOverTheRanksWithInputsMatchOneProcess) {
  for (const std::vector<int>& steps : kUneven) {
    SCOPED_TRACE(::testing::PrintToString(steps));
    Scenario s = base(steps);
    s.join.divide_by_initial_world_size = false;
    s.even_after = 1;
    Outcome o = train(s);
    expect_matches_reference(o);
    // Not what dividing by the group's size gives.
    s.join.divide_by_initial_world_size = true;
    EXPECT_GT(max_relative_error(o.ranks[0], train(s).ranks[0]), 1e-4);
  }
}

TEST_P(JoinTest, NoSyncMicroBatchesAreShadowedPerForward) {
  for (bool by_world : {true, false}) {
    Scenario s = base({1, 3, 0});
    s.micro = 3;
    s.join.divide_by_initial_world_size = by_world;
    s.even_after = 1;
    expect_matches_reference(train(s));
  }
}

TEST_P(JoinTest, EvenInputsGiveWhatDdpGivesWithoutJoin) {
  Scenario s = base({3, 3, 3});
  s.use_join = false;
  const Outcome plain = train(s);
  expect_matches_reference(plain);
  s.use_join = true;
  for (bool enable : {true, false}) {
    for (bool by_world : {true, false}) {
      s.join.enable = enable;
      s.join.divide_by_initial_world_size = by_world;
      const Outcome joined = train(s);
      for (size_t r = 0; r < joined.ranks.size(); ++r) {
        EXPECT_TRUE(identical(joined.ranks[r], plain.ranks[r]))
            << "enable " << enable << ", by world " << by_world << ", rank " << r;
      }
    }
  }
  s.join.enable = true;
  s.join.throw_on_early_termination = true;  // nobody runs out early: nobody throws
  expect_matches_reference(train(s));
}

TEST_P(JoinTest, CommHookRunsOnZerosOnJoinedRanks) {
  // A registered hook ignores divide_by_initial_world_size (as in PyTorch): the built-in
  // allreduce hook averages over the group, joined ranks adding zeros.
  Scenario s = base({2, 0, 4});
  s.join.divide_by_initial_world_size = false;
  const Data d = make_data(s);
  Scenario by_world = s;
  by_world.join.divide_by_initial_world_size = true;
  Params initial;
  const Params reference = reference_training(by_world, d, &initial);
  std::vector<Params> ranks(3);
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < 3; ++r) {
    ::torch::manual_seed(1);
    nets.push_back(std::make_shared<Net>());
  }
  ThreadWorld tw(3);
  tw.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    const std::shared_ptr<Net>& net = nets[ru];
    DDPOptions options = s.ddp;
    options.process_group = tw.shared(r);
    Ddp ddp(net, options);
    ddp.register_comm_hook(allreduce_hook());
    ::torch::optim::SGD opt(net->parameters(), kLr);
    {
      Join join(ddp, s.join);
      for (int step = 0; step < s.steps[ru]; ++step) train_step(ddp, opt, d, ru, step, 1);
    }
    ranks[ru] = snapshot(*net);
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(identical(ranks[r], ranks[0])) << "rank " << r;
    EXPECT_LE(max_relative_error(ranks[r], reference), 1e-5) << "rank " << r;
  }
}

TEST_P(JoinTest, TrailingNoSyncPassesLeaveTheCountsEqual) {
  // The long rank ends with forwards under no_sync, which the joined rank shadows without a
  // backward; the final sync makes DDP's counts of backward passes agree, so a later
  // synchronized pass finds no desync.
  ThreadWorld tw(2);
  std::vector<Params> ranks(2);
  tw.run([&](int r, ProcessGroup&) {
    auto net = std::make_shared<Net>();
    DDPOptions options;
    options.overlap = GetParam();
    options.process_group = tw.shared(r);
    Ddp ddp(net, options);
    {
      Join join(ddp);
      if (r == 1) {
        ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
        auto guard = ddp.no_sync();
        for (int k = 0; k < 2; ++k) ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
      }
    }
    ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
    for (const Tensor& p : net->parameters()) ranks[static_cast<size_t>(r)].push_back(p.grad());
  });
  ASSERT_EQ(ranks[0].size(), ranks[1].size());
  for (size_t i = 0; i < ranks[0].size(); ++i)
    EXPECT_TRUE(::torch::equal(ranks[0][i], ranks[1][i]));
}

class JoinErrorTest : public ::testing::Test {
 protected:
  void SetUp() override { ::torch::set_num_threads(1); }
};

TEST_F(JoinErrorTest, ThrowOnEarlyTerminationStopsEveryRankInTheSameIteration) {
  const std::vector<int> steps = {4, 2, 3};
  Scenario s;
  s.steps = steps;
  const Data d = make_data(s);
  std::vector<std::string> errors(3);
  std::vector<int> done(3, 0);
  std::vector<Params> ranks(3);
  ThreadWorld tw(3);
  tw.run([&](int r, ProcessGroup& group) {
    const auto ru = static_cast<size_t>(r);
    auto net = std::make_shared<Net>();
    DDPOptions options;
    options.process_group = tw.shared(r);
    Ddp ddp(net, options);
    ::torch::optim::SGD opt(net->parameters(), kLr);
    JoinOptions jo;
    jo.throw_on_early_termination = true;
    errors[ru] = error_of<Error>([&] {
      Join join(ddp, jo);  // rank 1 throws from its destructor
      for (int step = 0; step < steps[ru]; ++step) {
        train_step(ddp, opt, d, ru, step, 1);
        ++done[ru];
      }
    });
    ranks[ru] = snapshot(*net);
    // Every rank stopped at the same point: the group is still in step.
    std::vector<int64_t> one = {1};
    group.all_reduce(one.data(), 1, DType::kI64, ReduceOpKind::kSum)->wait();
    EXPECT_EQ(one[0], 3);
  });
  EXPECT_EQ(done, (std::vector<int>{2, 2, 2}));
  EXPECT_TRUE(
      Contains(errors[0], "Join (rank 0, iteration 3): 1 of 3 ranks have run out of inputs"));
  EXPECT_TRUE(
      Contains(errors[2], "Join (rank 2, iteration 3): 1 of 3 ranks have run out of inputs"));
  EXPECT_TRUE(Contains(errors[1],
                       "Join (rank 1): this rank ran out of inputs after 2 iterations "
                       "while 2 of 3 ranks still have some"));
  for (const std::string& e : errors) EXPECT_TRUE(Contains(e, "throw_on_early_termination"));
  for (size_t r = 0; r < 3; ++r) EXPECT_TRUE(identical(ranks[r], ranks[0])) << "rank " << r;
}

TEST_F(JoinErrorTest, DisabledJoinLeavesUnevenRanksToTimeOut) {
  ThreadWorld tw(2, std::chrono::seconds(2));
  std::string error;
  tw.run([&](int r, ProcessGroup&) {
    DDPOptions o;
    o.process_group = tw.shared(r);
    Ddp ddp(std::make_shared<Net>(), o);
    JoinOptions jo;
    jo.enable = false;
    Join join(ddp, jo);
    for (int step = 0; step < 1 + r; ++step) {
      if (step == 0) {
        ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
        continue;
      }
      error = error_of<TimeoutError>([&] {
        ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
      });
    }
  });
  EXPECT_TRUE(Contains(error, "DDP forward (rank 1)"));
}

TEST_F(JoinErrorTest, ARankLeavingByAnExceptionFailsTheOthersWithinTheTimeout) {
  // Rank 1 throws in its second iteration. Rank 0 (three batches) is then left alone in its
  // forward; rank 2 (no batch) in the Join's shadowing, from the destructor.
  ThreadWorld tw(3, std::chrono::seconds(2));
  std::vector<std::string> errors(3);
  std::vector<double> seconds(3);
  tw.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    DDPOptions o;
    o.process_group = tw.shared(r);
    Ddp ddp(std::make_shared<Net>(), o);
    const auto start = std::chrono::steady_clock::now();
    auto loop = [&] {
      Join join(ddp);
      for (int step = 0; step < (r == 2 ? 0 : 3); ++step) {
        if (r == 1 && step == 1) throw std::runtime_error("rank 1's data loader failed");
        ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
      }
    };
    // TimeoutError, or PeerError where the other waiting rank's group gave up first.
    errors[ru] = r == 1 ? error_of<std::runtime_error>(loop) : error_of<Error>(loop);
    seconds[ru] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  EXPECT_EQ(errors[1], "rank 1's data loader failed");
  EXPECT_LT(seconds[1], 1.5);  // its Join did not wait for anybody
  EXPECT_TRUE(Contains(errors[0], "rank 0"));
  EXPECT_TRUE(Contains(errors[0], "left its Join by an exception"));
  EXPECT_TRUE(Contains(errors[2], "Join (rank 2, out of inputs after 0 iterations"));
  EXPECT_TRUE(Contains(errors[2], "left its Join by an exception"));
}

TEST_F(JoinErrorTest, InvalidJoins) {
  ThreadWorld tw(2);
  ThreadWorld other(1);
  tw.run([&](int r, ProcessGroup&) {
    DDPOptions o;
    o.process_group = tw.shared(r);
    Ddp ddp(std::make_shared<Net>(), o);
    EXPECT_TRUE(Contains(error_of<InvalidArgument>([] { Join join({}); }), "at least one"));
    EXPECT_TRUE(Contains(error_of<InvalidArgument>([&] { Join join({ddp, ddp}); }), "twice"));
    {
      Join join(ddp);
      EXPECT_TRUE(
          Contains(error_of<InvalidArgument>([&] { Join inner(ddp); }), "already in another Join"));
      join.finish();  // every rank: nobody has inputs
    }
    if (r == 0) {
      DDPOptions lone;
      lone.process_group = other.shared(0);
      Ddp solo(std::make_shared<Net>(), lone);
      EXPECT_TRUE(Contains(error_of<InvalidArgument>([&] {
                             Join join({ddp, solo});
                           }),
                           "different process groups"));
    }
  });
}

// BatchNorm's statistics: under a Join they come from the highest rank that still has
// inputs (rank 2 here, which never joins early), and the final sync copies that rank's.
TEST_F(JoinErrorTest, BuffersFollowTheHighestRankWithInputs) {
  struct BnNet : ::torch::nn::Module {
    BnNet() {
      bn = register_module("bn", ::torch::nn::BatchNorm1d(kIn));
      fc = register_module("fc", ::torch::nn::Linear(kIn, kOut));
    }
    Tensor forward(const Tensor& x) { return fc(bn(x)); }
    ::torch::nn::BatchNorm1d bn{nullptr};
    ::torch::nn::Linear fc{nullptr};
  };
  const std::vector<int> steps = {5, 1, 5};
  ::torch::manual_seed(3);
  std::vector<std::vector<Tensor>> xs(3);
  for (size_t r = 0; r < 3; ++r) {
    for (int i = 0; i < 5; ++i) xs[r].push_back(::torch::randn({kBatch, kIn}) * (1.0 + r));
  }
  ::torch::nn::BatchNorm1d reference(kIn);
  for (const Tensor& x : xs[2]) reference(x);
  std::vector<std::shared_ptr<BnNet>> nets = {std::make_shared<BnNet>(), std::make_shared<BnNet>(),
                                              std::make_shared<BnNet>()};
  ThreadWorld tw(3);
  tw.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    DDPOptions o;
    o.process_group = tw.shared(r);
    DistributedDataParallel ddp(nets[ru], o);
    ::torch::optim::SGD opt(nets[ru]->parameters(), kLr);
    Join join(ddp);
    for (int i = 0; i < steps[ru]; ++i) {
      opt.zero_grad();
      ddp.forward(xs[ru][static_cast<size_t>(i)]).sum().backward();
      opt.step();
    }
  });
  for (size_t r = 0; r < 3; ++r) {
    const auto& bn = nets[r]->bn;
    EXPECT_TRUE(::torch::allclose(bn->running_mean, reference->running_mean)) << "rank " << r;
    EXPECT_TRUE(::torch::allclose(bn->running_var, reference->running_var)) << "rank " << r;
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 5) << "rank " << r;
    EXPECT_TRUE(identical(snapshot(*nets[r]), snapshot(*nets[0]))) << "rank " << r;
  }
}

// A Joinable of the test's own beside DDP: an all_reduce of each iteration's loss.
class LossSum : public Joinable {
 public:
  explicit LossSum(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}
  double add(double loss) {
    notify_join_context();  // not the first Joinable: nothing
    std::vector<double> v = {loss};
    group_->all_reduce(v.data(), 1, DType::kF64, ReduceOpKind::kSum)->wait();
    return v[0];
  }
  std::unique_ptr<JoinHook> join_hook(const JoinOptions&) override {
    struct Hook : JoinHook {
      explicit Hook(LossSum& o) : owner(o) {}
      void main_hook() override {
        std::vector<double> zero = {0.0};
        owner.group_->all_reduce(zero.data(), 1, DType::kF64, ReduceOpKind::kSum)->wait();
        ++owner.shadowed;
      }
      void post_hook(bool is_last_joiner) override { owner.last_joiner = is_last_joiner; }
      LossSum& owner;
    };
    return std::make_unique<Hook>(*this);
  }
  std::shared_ptr<ProcessGroup> join_process_group() const override { return group_; }
  c10::Device join_device() const override { return c10::Device(c10::kCPU); }

  int shadowed = 0;
  bool last_joiner = false;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

TEST_F(JoinErrorTest, JoinablesOfYourOwnAreShadowedToo) {
  const std::vector<int> steps = {3, 1, 3};
  std::vector<std::vector<double>> sums(3);
  std::vector<int> shadowed(3);
  std::vector<char> last(3);
  ThreadWorld tw(3);
  tw.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    DDPOptions o;
    o.process_group = tw.shared(r);
    Ddp ddp(std::make_shared<Net>(), o);
    LossSum losses(tw.shared(r));
    {
      Join join({ddp, losses});
      for (int i = 0; i < steps[ru]; ++i) {
        ddp.forward(::torch::randn({kBatch, kIn})).sum().backward();
        sums[ru].push_back(losses.add(1.0 + r));
      }
    }
    shadowed[ru] = losses.shadowed;
    last[ru] = losses.last_joiner;
  });
  EXPECT_EQ(sums[0], (std::vector<double>{6, 4, 4}));  // rank 1's 2.0 only while it has data
  EXPECT_EQ(sums[2], sums[0]);
  EXPECT_EQ(sums[1], (std::vector<double>{6}));
  EXPECT_EQ(shadowed, (std::vector<int>{0, 2, 0}));
  EXPECT_EQ(last, (std::vector<char>{1, 0, 1}));
}

}  // namespace
}  // namespace tdist::torch::join_test
