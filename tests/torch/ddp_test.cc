// DistributedDataParallel with ranks as threads over the tcp backend (autograd runs each
// thread's backward on that thread, so per-rank final callbacks work as in processes).
// Every result is checked against one process training on the union of the ranks' data.
#include "tdist/torch/ddp.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ddp_test_util.h"
#include "pg/pg_test_util.h"
#include "tdist/error.h"
#include "tdist/torch/comm_hooks.h"

namespace tdist::torch::ddp_test {
namespace {

using pg_test::ThreadWorld;
using ::torch::Tensor;
using Params = std::vector<Tensor>;

constexpr int64_t kIn = 8;
constexpr int64_t kHidden = 16;
constexpr int64_t kOut = 4;
constexpr double kLr = 0.1;

struct NetOptions {
  int64_t hidden = kHidden;
  bool extra = false;             // a branch forward uses when given a mask
  bool never = false;             // a layer forward never uses
  bool reverse_register = false;  // register fc2 before fc1 (gradient order = registration)
};

struct TestNet : ::torch::nn::Module {
  explicit TestNet(const NetOptions& o) {
    if (o.reverse_register) {
      fc2 = register_module("fc2", ::torch::nn::Linear(o.hidden, kOut));
      fc1 = register_module("fc1", ::torch::nn::Linear(kIn, o.hidden));
    } else {
      fc1 = register_module("fc1", ::torch::nn::Linear(kIn, o.hidden));
      fc2 = register_module("fc2", ::torch::nn::Linear(o.hidden, kOut));
    }
    if (o.extra) extra = register_module("extra", ::torch::nn::Linear(kIn, kOut));
    if (o.never) never = register_module("never", ::torch::nn::Linear(kIn, kOut));
  }
  // extra_mask: per-row weight of the extra branch; undefined leaves the branch out.
  Tensor forward(const Tensor& x, const Tensor& extra_mask) {
    Tensor y = fc2(::torch::relu(fc1(x)));
    if (extra_mask.defined()) y = y + extra_mask * extra(x);
    return y;
  }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr}, extra{nullptr}, never{nullptr};
};

using Ddp = DistributedDataParallel<std::shared_ptr<TestNet>>;

struct Scenario {
  int world = 2;
  int64_t batch = 4;  // per rank
  int steps = 5;
  int micro = 1;  // micro-batches per step; all but the last under no_sync
  NetOptions net;
  DDPOptions ddp;
  std::function<std::shared_ptr<CommHook>()> hook;
  std::function<bool(int rank)> uses_extra = [](int) { return false; };
  std::function<void(int rank, Ddp&)> before_backward = [](int, Ddp&) {};  // after zero_grad
  std::function<void(int rank, Ddp&)> after_step = [](int, Ddp&) {};
};

struct Result {
  Params initial, reference;
  std::vector<Params> ranks;
  std::vector<std::vector<std::vector<std::string>>> buckets_before, buckets_after;
  // char, not bool: the rank threads write their own elements at once, and vector<bool>
  // packs them into shared words (a lost write made rebuilt[r] false at random).
  std::vector<char> rebuilt;
  std::vector<std::vector<bool>> grad_defined;  // per rank and parameter, after training
};

Params snapshot(::torch::nn::Module& m) {
  Params out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// Largest |a - b| / |b| over the tensors (norms), or of the changes from `base` when given.
double max_relative_error(const Params& a, const Params& b, const Params& base = {}) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    Tensor x = base.empty() ? a[i] : a[i] - base[i];
    Tensor y = base.empty() ? b[i] : b[i] - base[i];
    const double scale = y.norm().item<double>();
    if (scale == 0) {
      worst = std::max(worst, x.norm().item<double>());
      continue;
    }
    worst = std::max(worst, (x - y).norm().item<double>() / scale);
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

Result train(const Scenario& s) {
  ::torch::manual_seed(7);
  const int64_t global = s.world * s.batch;
  Tensor xs = ::torch::randn({s.steps, s.micro, global, kIn});
  Tensor ys = ::torch::randn({s.steps, s.micro, global, kOut});
  Tensor mask = ::torch::zeros({global, 1});
  bool any_extra = false;
  for (int r = 0; r < s.world; ++r) {
    if (!s.uses_extra(r)) continue;
    mask.narrow(0, r * s.batch, s.batch).fill_(1);
    any_extra = true;
  }
  ::torch::manual_seed(1);
  auto reference = std::make_shared<TestNet>(s.net);
  std::vector<std::shared_ptr<TestNet>> models;
  for (int r = 0; r < s.world; ++r) {
    ::torch::manual_seed(r == 0 ? 1 : 100 + r);  // DDP must copy rank 0's parameters
    models.push_back(std::make_shared<TestNet>(s.net));
  }
  Result result;
  result.initial = snapshot(*reference);

  ::torch::optim::SGD ref_opt(reference->parameters(), kLr);
  for (int step = 0; step < s.steps; ++step) {
    ref_opt.zero_grad();
    for (int k = 0; k < s.micro; ++k) {
      Tensor out = reference->forward(xs[step][k], any_extra ? mask : Tensor());
      ::torch::mse_loss(out, ys[step][k]).backward();
    }
    ref_opt.step();
  }
  result.reference = snapshot(*reference);

  const auto w = static_cast<size_t>(s.world);
  result.ranks.resize(w);
  result.buckets_before.resize(w);
  result.buckets_after.resize(w);
  result.rebuilt.resize(w);
  result.grad_defined.resize(w);
  ThreadWorld world(s.world);
  world.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    DDPOptions options = s.ddp;
    options.process_group = world.shared(r);
    Ddp ddp(models[ru], options);
    if (s.hook) ddp.register_comm_hook(s.hook());
    result.buckets_before[ru] = ddp.bucket_assignment();
    Tensor my_mask = s.uses_extra(r) ? ::torch::ones({s.batch, 1}) : Tensor();
    ::torch::optim::SGD opt(models[ru]->parameters(), kLr);
    for (int step = 0; step < s.steps; ++step) {
      opt.zero_grad();
      s.before_backward(r, ddp);
      for (int k = 0; k < s.micro; ++k) {
        auto pass = [&] {
          Tensor out = ddp.forward(xs[step][k].narrow(0, r * s.batch, s.batch), my_mask);
          ::torch::mse_loss(out, ys[step][k].narrow(0, r * s.batch, s.batch)).backward();
        };
        if (k + 1 < s.micro) {
          auto guard = ddp.no_sync();
          pass();
        } else {
          pass();
        }
      }
      opt.step();
      s.after_step(r, ddp);
    }
    result.buckets_after[ru] = ddp.bucket_assignment();
    result.rebuilt[ru] = ddp.buckets_rebuilt();
    for (const Tensor& p : models[ru]->parameters()) {
      result.grad_defined[ru].push_back(p.grad().defined());
    }
    result.ranks[ru] = snapshot(*models[ru]);
  });
  return result;
}

void expect_matches_reference(const Result& res, double tolerance = 1e-5) {
  for (size_t r = 0; r < res.ranks.size(); ++r) {
    EXPECT_LE(max_relative_error(res.ranks[r], res.reference), tolerance) << "rank " << r;
    EXPECT_TRUE(identical(res.ranks[r], res.ranks[0])) << "rank " << r << " differs from rank 0";
  }
  // The run must have trained at all, or equality would prove nothing.
  EXPECT_GT(max_relative_error(res.initial, res.reference), 1e-3);
}

// Every case runs with the buckets launched during backward and after it.
class DdpTest : public ::testing::TestWithParam<CommOverlap> {
 protected:
  void SetUp() override { ::torch::set_num_threads(1); }
  Scenario base() const {
    Scenario s;
    s.ddp.overlap = GetParam();
    return s;
  }
};

INSTANTIATE_TEST_SUITE_P(Overlap, DdpTest,
                         ::testing::Values(CommOverlap::kDuringBackward,
                                           CommOverlap::kAfterBackward),
                         overlap_name);

TEST_P(DdpTest, MatchesOneProcessWithTheUnionOfTheBatches) {
  expect_matches_reference(train(base()));
}

TEST_P(DdpTest, MatchesWithManySmallBuckets) {
  Scenario s = base();
  s.ddp.first_bucket_mb = 1e-4;  // ~100 bytes: most tensors get a bucket of their own
  s.ddp.bucket_cap_mb = 2e-4;
  Result res = train(s);
  expect_matches_reference(res);
  EXPECT_GE(res.buckets_before[0].size(), 2u);
}

TEST_P(DdpTest, NoSyncAccumulatesMicroBatches) {
  Scenario s = base();
  s.micro = 2;
  expect_matches_reference(train(s));
}

TEST_P(DdpTest, GradientAsBucketViewGivesIdenticalResults) {
  Scenario s = base();
  Result plain = train(s);
  s.ddp.gradient_as_bucket_view = true;
  std::atomic<bool> all_views{true};  // written by both rank threads
  s.after_step = [&](int, Ddp& ddp) {
    // Every gradient is its slice of the one bucket: they all share its storage.
    const auto& m = *ddp.module();
    for (const Tensor& p : m.parameters()) {
      if (!p.grad().is_alias_of(m.fc1->weight.grad())) all_views = false;
    }
  };
  Result viewed = train(s);
  EXPECT_TRUE(all_views);
  expect_matches_reference(viewed);
  for (size_t r = 0; r < viewed.ranks.size(); ++r) {
    EXPECT_TRUE(identical(viewed.ranks[r], plain.ranks[r])) << "rank " << r;
  }
  // Several buckets, rebuilt after the first step (the views move with them).
  s.ddp.first_bucket_mb = 1e-4;
  s.ddp.bucket_cap_mb = 2e-4;
  s.after_step = [](int, Ddp&) {};
  Result viewed_small = train(s);
  s.ddp.gradient_as_bucket_view = false;
  Result plain_small = train(s);
  for (size_t r = 0; r < viewed.ranks.size(); ++r) {
    EXPECT_TRUE(identical(viewed_small.ranks[r], plain_small.ranks[r])) << "rank " << r;
    EXPECT_TRUE(viewed_small.rebuilt[r]);
  }
}

TEST_P(DdpTest, BucketsAreRebuiltInGradientOrder) {
  Scenario s = base();
  s.net.reverse_register = true;  // initial buckets (reverse registration) start with fc1
  s.ddp.first_bucket_mb = 1e-4;
  s.ddp.bucket_cap_mb = 2e-4;
  Result res = train(s);
  expect_matches_reference(res);
  using Names = std::vector<std::string>;
  for (size_t r = 0; r < res.ranks.size(); ++r) {
    EXPECT_EQ(res.buckets_before[r],
              (std::vector<Names>{{"fc1.bias", "fc1.weight"}, {"fc2.bias", "fc2.weight"}}));
    EXPECT_TRUE(res.rebuilt[r]);
    ASSERT_EQ(res.buckets_after[r].size(), 2u);
    // Backward produces fc2's gradients first.
    for (const std::string& name : res.buckets_after[r][0]) EXPECT_EQ(name.substr(0, 4), "fc2.");
    for (const std::string& name : res.buckets_after[r][1]) EXPECT_EQ(name.substr(0, 4), "fc1.");
    EXPECT_EQ(res.buckets_after[r], res.buckets_after[0]);
  }
}

TEST_P(DdpTest, FindUnusedParametersHandlesParametersUnusedOnSomeOrAllRanks) {
  // Shared buckets, then buckets of one parameter (reduced in place, or in a staging
  // tensor where this rank has no gradient).
  for (double first_mb : {1.0, 1e-4}) {
    Scenario s = base();
    s.net.extra = true;
    s.net.never = true;
    s.ddp.find_unused_parameters = true;
    s.ddp.first_bucket_mb = first_mb;
    s.ddp.bucket_cap_mb = 2 * first_mb;
    s.uses_extra = [](int rank) { return rank == 0; };  // extra: used on rank 0 only
    Result res = train(s);
    expect_matches_reference(res);
    // 'never' got no gradient anywhere: its grad stays undefined, as in the reference.
    for (size_t r = 0; r < res.ranks.size(); ++r) {
      std::vector<bool> expected = {true, true, true, true, true, true, false, false};
      EXPECT_EQ(res.grad_defined[r], expected) << "rank " << r;
      EXPECT_FALSE(res.rebuilt[r]);  // the gradient order may change between iterations
    }
  }
}

// A comm hook that all_reduces as the default one and records, at each launch, whether the
// bucket's buffer is its one parameter's gradient itself and whether fc1.weight (the last
// gradient backward computes) already has its gradient.
struct ProbeHook : CommHook {
  explicit ProbeHook(std::shared_ptr<TestNet> n) : net(std::move(n)) {}
  WorkPtr run(ProcessGroup& group, const GradBucket& bucket) override {
    const Tensor& own = bucket.parameters[0].grad();
    in_place.push_back(bucket.parameters.size() == 1 && own.defined() &&
                       own.data_ptr() == bucket.buffer.data_ptr());
    const Tensor& last = net->fc1->weight.grad();
    fc1_ready.push_back(last.defined() && last.abs().sum().item<double>() > 0);
    return plain->run(group, bucket);
  }
  std::shared_ptr<TestNet> net;
  std::shared_ptr<CommHook> plain = allreduce_hook();
  std::vector<bool> in_place, fc1_ready;
};

// One synchronized step of TestNet on each of 2 ranks with `options`; the probe of rank 0.
std::shared_ptr<ProbeHook> probe_one_step(DDPOptions options, const NetOptions& net = {}) {
  std::vector<std::shared_ptr<ProbeHook>> probes(2);
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    auto model = std::make_shared<TestNet>(net);
    DDPOptions o = options;
    o.process_group = world.shared(r);
    Ddp ddp(model, o);
    auto probe = std::make_shared<ProbeHook>(model);
    ddp.register_comm_hook(probe);
    ddp.forward(::torch::randn({3, kIn}), Tensor()).sum().backward();
    probes[static_cast<size_t>(r)] = probe;
  });
  return probes[0];
}

TEST_P(DdpTest, OverlapDecidesWhenBucketsStart) {
  // Buckets [fc2.bias, fc2.weight] then [fc1.bias, fc1.weight]: during backward the first
  // starts before fc1 has its gradients, after backward only once every gradient is there.
  DDPOptions options;
  options.overlap = GetParam();
  options.first_bucket_mb = 1e-4;
  options.bucket_cap_mb = 1e-4;
  const bool during = GetParam() == CommOverlap::kDuringBackward;
  EXPECT_EQ(probe_one_step(options)->fc1_ready, (std::vector<bool>{!during, true}));
}

TEST(DdpAutoOverlapTest, WithoutACoreToSpareBucketsStartAfterBackward) {
  ::torch::set_num_threads(1);
  const char* previous = std::getenv("LOCAL_WORLD_SIZE");
  const std::string saved = previous != nullptr ? previous : "";
  ::setenv("LOCAL_WORLD_SIZE", "100000", 1);  // more local ranks than any host has cores
  DDPOptions options;                         // overlap kAuto
  options.first_bucket_mb = 1e-4;
  options.bucket_cap_mb = 1e-4;
  std::vector<bool> ready = probe_one_step(options)->fc1_ready;
  if (previous != nullptr) {
    ::setenv("LOCAL_WORLD_SIZE", saved.c_str(), 1);
  } else {
    ::unsetenv("LOCAL_WORLD_SIZE");
  }
  EXPECT_EQ(ready, (std::vector<bool>{true, true}));
}

TEST_P(DdpTest, LargeGradientsAreReducedInPlace) {
  // fc1.weight (512 KiB) and fc2.weight (256 KiB) get buckets of their own, launched in
  // the order they fill up; the small biases share one.
  DDPOptions options;
  options.overlap = GetParam();
  NetOptions wide;
  wide.hidden = 16384;
  EXPECT_EQ(probe_one_step(options, wide)->in_place, (std::vector<bool>{true, false, true}));
  Scenario s = base();
  s.net = wide;
  s.steps = 2;
  Result res = train(s);
  expect_matches_reference(res);
  using Names = std::vector<std::string>;
  EXPECT_EQ(res.buckets_before[0],
            (std::vector<Names>{{"fc2.weight"}, {"fc2.bias", "fc1.bias"}, {"fc1.weight"}}));
}

TEST_P(DdpTest, GradientsStayTheUsersOwnTensors) {
  // Without gradient_as_bucket_view no gradient shares memory with another or with DDP: a
  // gradient the user keeps after setting grads to none is never written again.
  Scenario s = base();
  s.net.hidden = 16384;  // fc1.weight and fc2.weight are reduced in place
  s.net.extra = true;    // and 'extra' too (buckets of one), on rank 0 only
  s.ddp.find_unused_parameters = true;
  s.uses_extra = [](int rank) { return rank == 0; };
  s.ddp.first_bucket_mb = 1e-4;
  s.ddp.bucket_cap_mb = 1e-4;
  std::vector<std::vector<Tensor>> kept(2), copies(2);
  std::atomic<bool> shared{false};
  s.after_step = [&](int r, Ddp& ddp) {
    const auto ru = static_cast<size_t>(r);
    std::vector<Tensor> params = ddp.module()->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (params[i].grad().defined() && params[j].grad().defined() &&
            params[i].grad().is_alias_of(params[j].grad())) {
          shared = true;
        }
      }
      if (kept[ru].size() < params.size()) {  // the first step's gradients
        kept[ru].push_back(params[i].grad());
        copies[ru].push_back(params[i].grad().defined() ? params[i].grad().clone() : Tensor());
      }
    }
    for (Tensor& p : params) p.mutable_grad().reset();  // zero_grad(set_to_none)
  };
  expect_matches_reference(train(s));
  EXPECT_FALSE(shared);
  for (size_t r = 0; r < 2; ++r) {
    for (size_t i = 0; i < kept[r].size(); ++i) {
      if (!kept[r][i].defined()) continue;
      EXPECT_TRUE(::torch::equal(kept[r][i], copies[r][i])) << "rank " << r << " param " << i;
    }
  }
}

TEST_P(DdpTest, NonContiguousGradientsAreReducedThroughAStagingTensor) {
  // Gradients accumulate into whatever tensor param.grad() holds: here a column-major one.
  for (double first_mb : {1.0, 1e-4}) {
    Scenario s = base();
    s.ddp.first_bucket_mb = first_mb;
    s.ddp.bucket_cap_mb = first_mb;
    std::atomic<bool> strided{true};
    s.before_backward = [&](int, Ddp& ddp) {
      Tensor& g = ddp.module()->fc1->weight.mutable_grad();
      g = ::torch::empty_strided({kHidden, kIn}, {1, kHidden}).zero_();  // column-major
    };
    s.after_step = [&](int, Ddp& ddp) {
      if (ddp.module()->fc1->weight.grad().is_contiguous()) strided = false;
    };
    expect_matches_reference(train(s));
    EXPECT_TRUE(strided);  // the gradient kept its layout
  }
}

TEST_P(DdpTest, StaticGraphSearchesOnceAndRebuilds) {
  Scenario s = base();
  s.net.extra = true;
  s.net.never = true;
  s.ddp.static_graph = true;
  s.uses_extra = [](int) { return true; };
  Result res = train(s);
  expect_matches_reference(res);
  for (size_t r = 0; r < res.ranks.size(); ++r) EXPECT_TRUE(res.rebuilt[r]);
}

TEST_P(DdpTest, Fp16AndBf16HooksStayWithinTheirPrecision) {
  // The change of the parameters over 5 steps, compared with full precision: float16
  // keeps 11 significant bits (5e-4 relative per value), bfloat16 8 (4e-3).
  Scenario s = base();
  s.hook = [] { return fp16_compress_hook(); };
  Result fp16 = train(s);
  for (size_t r = 0; r < fp16.ranks.size(); ++r) {
    const double error = max_relative_error(fp16.ranks[r], fp16.reference, fp16.initial);
    EXPECT_LE(error, 5e-3) << "rank " << r;
    EXPECT_GT(error, 0) << "no rounding at all: was the gradient compressed?";
    EXPECT_TRUE(identical(fp16.ranks[r], fp16.ranks[0]));
  }
  s.hook = [] { return bf16_compress_hook(); };
  Result bf16 = train(s);
  for (size_t r = 0; r < bf16.ranks.size(); ++r) {
    EXPECT_LE(max_relative_error(bf16.ranks[r], bf16.reference, bf16.initial), 3e-2);
  }
}

TEST_P(DdpTest, UserCommHookIsUsed) {
  // A hook that sums instead of averaging: the steps come out world-size times larger.
  struct SumHook : CommHook {
    WorkPtr run(ProcessGroup& group, const GradBucket& bucket) override {
      ++runs;
      return group.all_reduce(bucket.buffer.data_ptr(), static_cast<size_t>(bucket.buffer.numel()),
                              DType::kF32, ReduceOpKind::kSum);
    }
    int runs = 0;
  };
  std::vector<std::shared_ptr<SumHook>> hooks;
  Scenario s = base();
  s.steps = 1;
  s.hook = [&] {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    hooks.push_back(std::make_shared<SumHook>());
    return hooks.back();
  };
  Result res = train(s);
  Params doubled;
  for (size_t i = 0; i < res.reference.size(); ++i) {
    doubled.push_back(res.initial[i] + 2 * (res.reference[i] - res.initial[i]));
  }
  EXPECT_LE(max_relative_error(res.ranks[0], doubled), 1e-5);
  for (const auto& h : hooks) EXPECT_EQ(h->runs, 1);
}

TEST_P(DdpTest, BuffersFollowRankZeroAndTupleOutputsAreSearched) {
  struct BnNet : ::torch::nn::Module {
    BnNet() {
      fc = register_module("fc", ::torch::nn::Linear(4, 3));
      bn = register_module("bn", ::torch::nn::BatchNorm1d(3));
      extra = register_module("extra", ::torch::nn::Linear(4, 2));
    }
    std::tuple<Tensor, Tensor> forward(const Tensor& x) { return {bn(fc(x)), extra(x)}; }
    ::torch::nn::Linear fc{nullptr}, extra{nullptr};
    ::torch::nn::BatchNorm1d bn{nullptr};
  };
  std::vector<std::shared_ptr<BnNet>> nets = {std::make_shared<BnNet>(), std::make_shared<BnNet>()};
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    DDPOptions options;
    options.overlap = GetParam();
    options.process_group = world.shared(r);
    // Both outputs feed the loss: had the search missed the tuple's second tensor, 'extra'
    // would count as unused and then get a gradient after all (an error).
    options.find_unused_parameters = true;
    BnNet& net = *nets[static_cast<size_t>(r)];
    DistributedDataParallel ddp(nets[static_cast<size_t>(r)], options);
    if (r == 0) net.bn->running_mean.fill_(3.0);  // reaches rank 1 at the next forward
    net.bn->eval();                               // forward leaves the statistics alone
    auto [y, z] = ddp.forward(::torch::randn({5, 4}));
    EXPECT_TRUE(::torch::equal(net.bn->running_mean, ::torch::full({3}, 3.0))) << "rank " << r;
    (y.sum() + z.sum()).backward();
  });
  for (size_t i = 0; i < nets[0]->parameters().size(); ++i) {
    EXPECT_TRUE(::torch::equal(nets[0]->parameters()[i].grad(), nets[1]->parameters()[i].grad()));
  }
}

TEST_P(DdpTest, PowerSgdConverges) {
  // Linear regression onto a 16x32 matrix, compressed to rank 2 from the third step.
  constexpr int kSteps = 80;
  constexpr int64_t kBatch = 16;
  constexpr double kRegressionLr = 2.0;
  ::torch::manual_seed(3);
  Tensor target = ::torch::randn({16, 32}) / 6;
  Tensor xs = ::torch::randn({kSteps, 2 * kBatch, 32});
  Tensor ys = ::torch::matmul(xs, target.t());
  auto make = [](uint64_t seed) {
    ::torch::manual_seed(seed);
    return ::torch::nn::Linear(::torch::nn::LinearOptions(32, 16).bias(false));
  };
  ::torch::nn::Linear reference = make(1);
  ::torch::optim::SGD ref_opt(reference->parameters(), kRegressionLr);
  for (int step = 0; step < kSteps; ++step) {
    ref_opt.zero_grad();
    ::torch::mse_loss(reference(xs[step]), ys[step]).backward();
    ref_opt.step();
  }
  std::vector<::torch::nn::Linear> models = {make(1), make(2)};
  std::vector<double> first_loss(2), last_loss(2);
  ThreadWorld world(2);
  world.run([&](int r, ProcessGroup&) {
    const auto ru = static_cast<size_t>(r);
    DDPOptions options;
    options.overlap = GetParam();
    options.process_group = world.shared(r);
    DistributedDataParallel ddp(models[ru], options);
    static_assert(std::is_same_v<decltype(ddp), DistributedDataParallel<::torch::nn::Linear>>);
    PowerSGDOptions psgd;
    psgd.matrix_approximation_rank = 2;
    psgd.start_powerSGD_iter = 2;
    ddp.register_comm_hook(powerSGD_hook(psgd));
    ::torch::optim::SGD opt(models[ru]->parameters(), kRegressionLr);
    for (int step = 0; step < kSteps; ++step) {
      opt.zero_grad();
      Tensor loss = ::torch::mse_loss(ddp(xs[step].narrow(0, r * kBatch, kBatch)),
                                      ys[step].narrow(0, r * kBatch, kBatch));
      loss.backward();
      opt.step();
      if (step == 0) first_loss[ru] = loss.item<double>();
      last_loss[ru] = loss.item<double>();
    }
  });
  EXPECT_LT(last_loss[0], 0.1 * first_loss[0]);
  EXPECT_TRUE(::torch::equal(models[0]->weight, models[1]->weight));
  // Compressed: not what exact averaging gives.
  EXPECT_GT((models[0]->weight - reference->weight).norm().item<double>(), 1e-4);
}

}  // namespace
}  // namespace tdist::torch::ddp_test
