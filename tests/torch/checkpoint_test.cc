// Distributed checkpoints in one process (checkpoint.h): the round trip of every kind of
// entry, the files PyTorch's reader expects, the commit (replace, keep_last, leftovers),
// asynchronous saves, and bad input, which fails naming the file and the tensor before
// anything is overwritten. The multi-process cases are in checkpoint_process_test.cc.
#include "tdist/torch/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "support/temp_dir.h"
#include "tdist/error.h"
#include "tdist/torch/sampler.h"

namespace tdist::torch::checkpoint_test {
namespace {

namespace ckpt = ::tdist::checkpoint;
using test_support::TempDir;

struct Net : ::torch::nn::Module {
  explicit Net(int64_t width = 6) {
    fc1 = register_module("fc1", ::torch::nn::Linear(5, width));
    fc2 = register_module("fc2", ::torch::nn::Linear(width, 3));
    bn = register_module("bn", ::torch::nn::BatchNorm1d(3));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x) { return bn(fc2(::torch::relu(fc1(x)))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  ::torch::nn::BatchNorm1d bn{nullptr};
};

void train(Net& net, ::torch::optim::Optimizer& opt, int steps) {
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    ::torch::Tensor x = ::torch::sin(::torch::arange(40, ::torch::kFloat).reshape({8, 5}) + i);
    net.forward(x).pow(2).mean().backward();
    opt.step();
  }
}

// Every parameter and buffer of `a` equals `b`'s, bit for bit.
void expect_same(Net& a, Net& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  for (const auto& item : pa) EXPECT_TRUE(item.value().equal(pb[item.key()])) << item.key();
  auto ba = a.named_buffers(), bb = b.named_buffers();
  for (const auto& item : ba) EXPECT_TRUE(item.value().equal(bb[item.key()])) << item.key();
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("other exception: ") + e.what();
  }
  return "no exception";
}

TEST(Checkpoint, RoundTripOfModelOptimizerValuesAndGenerator) {
  TempDir dir;
  ::torch::manual_seed(1);
  Net a;
  ::torch::optim::Adam opt_a(a.parameters(), ::torch::optim::AdamOptions(1e-2));
  train(a, opt_a, 3);
  int64_t step = 3;
  double lr = 0.25;
  std::string note = "hello";
  ::torch::manual_seed(42);
  ckpt::State sa;
  sa.module(a, "model").optimizer(opt_a, a).value("step", &step).value("lr", &lr);
  sa.value("note", &note).rng();
  ckpt::save(dir.path(), step, sa);
  const ::torch::Tensor after_saving = ::torch::rand({4});
  train(a, opt_a, 1);  // the reference: one more step

  ::torch::manual_seed(7);
  Net b;
  ::torch::optim::Adam opt_b(b.parameters(), ::torch::optim::AdamOptions(1e-2));
  int64_t step_b = 0;
  double lr_b = 0;
  std::string note_b;
  ckpt::State sb;
  sb.module(b, "model").optimizer(opt_b, b).value("step", &step_b).value("lr", &lr_b);
  sb.value("note", &note_b).rng();
  ASSERT_EQ(ckpt::latest(dir.path()), dir.path() + "/step-00000003");
  EXPECT_EQ(ckpt::resume(dir.path(), sb), 3);
  EXPECT_EQ(step_b, 3);
  EXPECT_EQ(lr_b, 0.25);
  EXPECT_EQ(note_b, "hello");
  EXPECT_TRUE(::torch::rand({4}).equal(after_saving)) << "the generator was not restored";
  train(b, opt_b, 1);  // Adam's moments and step came back (created in a fresh optimizer)
  expect_same(a, b);
}

TEST(Checkpoint, FilesAreSafetensorsWithPyTorchsShardingMetadata) {
  TempDir dir;
  Net a;
  ckpt::State s;
  s.module(a);
  ckpt::save(dir.path(), 12, s);
  const std::string folder = dir.path() + "/step-00000012";
  std::ifstream in(folder + "/shard-00001-model-00001-of-00001.safetensors", std::ios::binary);
  ASSERT_TRUE(in);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ(n % 8, 0u);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_NE(header.find("\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[6,5]"), std::string::npos)
      << header;
  EXPECT_NE(header.find("DCP_SHARDING_INFO"), std::string::npos) << header;
  EXPECT_NE(header.find("\"DCP_VERSION\":\"1.0\""), std::string::npos) << header;
  EXPECT_NE(header.find("bn.num_batches_tracked"), std::string::npos) << header;
  EXPECT_TRUE(std::filesystem::exists(folder + "/tdist.json"));
}

TEST(Checkpoint, ShardsOfOneRankLoadWhole) {
  // Rows 2..4 of a [5, 3] tensor saved as a shard, with rows 0..1 as another entry's: a
  // load of the whole needs both pieces, so it fails naming the rows missing.
  TempDir dir;
  ::torch::Tensor rows = ::torch::arange(9, ::torch::kFloat).reshape({3, 3});
  ckpt::State s;
  s.shard("t", rows, {5, 3}, 2);
  ckpt::save(dir.path(), 0, s);
  ::torch::Tensor whole = ::torch::zeros({5, 3});
  ckpt::State w;
  w.tensor("t", whole);
  const std::string msg = message_of([&] { ckpt::load(dir.path() + "/step-00000000", w); });
  EXPECT_NE(msg.find("'t' cover 9 of the 15 elements"), std::string::npos) << msg;
  EXPECT_TRUE(whole.equal(::torch::zeros({5, 3})));
  ::torch::Tensor mine = ::torch::zeros({2, 3});
  ckpt::State part;
  part.shard("t", mine, {5, 3}, 3);
  ckpt::load(dir.path() + "/step-00000000", part);
  EXPECT_TRUE(mine.equal(rows.narrow(0, 1, 2)));
}

TEST(Checkpoint, BadInputFailsNamingFileAndTensorAndChangesNothing) {
  TempDir dir;
  ::torch::manual_seed(3);
  Net a;
  ckpt::State sa;
  sa.module(a);
  ckpt::save(dir.path(), 1, sa);
  const std::string folder = dir.path() + "/step-00000001";
  const std::string file = folder + "/shard-00001-model-00001-of-00001.safetensors";

  ::torch::manual_seed(4);
  Net b;
  std::map<std::string, ::torch::Tensor> before;
  for (const auto& item : b.named_parameters()) before[item.key()] = item.value().clone();
  auto unchanged = [&] {
    for (const auto& item : b.named_parameters()) {
      EXPECT_TRUE(item.value().equal(before[item.key()])) << item.key() << " was overwritten";
    }
  };
  // Another model (a wider fc1): shapes differ.
  Net wide(8);
  ckpt::State sw;
  sw.module(wide);
  std::string msg = message_of([&] { ckpt::load(folder, sw); });
  EXPECT_NE(msg.find("'fc1.weight' is saved with shape [6, 5] but the state's is [8, 5]"),
            std::string::npos)
      << msg;
  // A tensor the checkpoint lacks.
  ::torch::Tensor extra = ::torch::zeros({2});
  ckpt::State sx;
  sx.module(b).tensor("extra", extra);
  msg = message_of([&] { ckpt::load(folder, sx); });
  EXPECT_NE(msg.find("holds no tensor 'extra'"), std::string::npos) << msg;
  unchanged();
  // Another dtype.
  ::torch::Tensor wrong = ::torch::zeros({6, 5}, ::torch::kDouble);
  ckpt::State sd;
  sd.tensor("fc1.weight", wrong);
  msg = message_of([&] { ckpt::load(folder, sd); });
  EXPECT_NE(msg.find("'fc1.weight' is saved as Float but the state's is Double"), std::string::npos)
      << msg;
  // A truncated file.
  const auto size = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, size - 4);
  ckpt::State sb;
  sb.module(b);
  msg = message_of([&] { ckpt::load(folder, sb); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  unchanged();
  // A missing file.
  std::filesystem::remove(file);
  msg = message_of([&] { ckpt::load(folder, sb); });
  EXPECT_NE(msg.find(file + " is missing"), std::string::npos) << msg;
  unchanged();
  // A folder with no checkpoint.
  TempDir empty;
  EXPECT_FALSE(ckpt::latest(empty.path()));
  EXPECT_FALSE(ckpt::resume(empty.path(), sb));
  msg = message_of([&] { ckpt::load(empty.path(), sb); });
  EXPECT_NE(msg.find("holds no checkpoint"), std::string::npos) << msg;
  unchanged();
}

TEST(Checkpoint, CommitReplacesKeepsLastAndIgnoresLeftovers) {
  TempDir dir;
  ::torch::Tensor t = ::torch::zeros({4});
  ckpt::State s;
  s.tensor("t", t);
  ckpt::CheckpointOptions options;
  options.keep_last = 2;
  ckpt::Checkpointer c(dir.path(), options);
  // A save that died before its commit: a temporary folder, and a folder without an index.
  std::filesystem::create_directories(dir.path() + "/step-00000009.tmp.1.2");
  std::filesystem::create_directories(dir.path() + "/step-00000099");
  for (int step = 1; step <= 4; ++step) {
    t.fill_(step);
    c.save(step, s);
  }
  EXPECT_EQ(ckpt::latest(dir.path()), dir.path() + "/step-00000004");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/step-00000002"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/step-00000003"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/step-00000009.tmp.1.2"));
  t.fill_(40);
  c.save(4, s);  // the same step again: replaced
  t.zero_();
  EXPECT_EQ(c.resume(s), 4);
  EXPECT_TRUE(t.equal(::torch::full({4}, 40.0f)));
}

TEST(Checkpoint, AsyncSaveWritesTheStateAsItWasAndSurfacesErrors) {
  TempDir dir;
  ::torch::Tensor t = ::torch::full({1 << 20}, 1.0f);
  ckpt::State s;
  s.tensor("t", t);
  ckpt::Checkpointer c(dir.path());
  c.async_save(5, s);
  t.fill_(2);  // after async_save returned: not in the checkpoint
  c.wait();
  c.async_save(6, s);
  c.async_save(7, s);  // waits for 6 first
  c.wait();
  ::torch::Tensor back = ::torch::zeros({1 << 20});
  ckpt::State r;
  r.tensor("t", back);
  EXPECT_EQ(ckpt::load(dir.path() + "/step-00000005", r), 5);
  EXPECT_TRUE(back.equal(::torch::full({1 << 20}, 1.0f)));
  EXPECT_EQ(ckpt::load(dir.path() + "/step-00000007", r), 7);
  EXPECT_TRUE(back.equal(::torch::full({1 << 20}, 2.0f)));

  // A folder that cannot be made (a file is in the way): the error comes from wait(), and
  // from the next async_save when nobody waited.
  const std::string blocked = dir.write("file", "x") + "/sub";
  ckpt::Checkpointer bad(blocked);
  bad.async_save(1, s);
  EXPECT_THROW(bad.wait(), Error);
  bad.async_save(2, s);
  EXPECT_THROW(bad.async_save(3, s), Error);  // 2's error; 3 did not start
  EXPECT_NO_THROW(bad.wait());
}

TEST(Checkpoint, ValuesAndEntriesAreChecked) {
  TempDir dir;
  ::torch::Tensor t = ::torch::zeros({2});
  int64_t n = 1;
  ckpt::State dup;
  dup.tensor("x", t).value("x", &n);
  std::string msg = message_of([&] { ckpt::save(dir.path(), 1, dup); });
  EXPECT_NE(msg.find("names 'x' twice"), std::string::npos) << msg;
  ckpt::State ok;
  ok.value("n", &n);
  ckpt::save(dir.path(), 1, ok);
  double d = 0;
  ckpt::State other;
  other.value("n", &d);
  msg = message_of([&] { ckpt::load(dir.path() + "/step-00000001", other); });
  EXPECT_NE(msg.find("value 'n' is of another type"), std::string::npos) << msg;
  EXPECT_THROW(ckpt::State().shard("s", ::torch::zeros({3, 2}), {2, 2}, 0), InvalidArgument);
  EXPECT_THROW(ckpt::save(dir.path(), -1, ok), InvalidArgument);
}

}  // namespace
}  // namespace tdist::torch::checkpoint_test
