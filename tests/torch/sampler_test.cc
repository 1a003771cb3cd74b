// DistributedSampler: index for index against PyTorch's DistributedSampler (one run of
// tests/torch/py/sampler_indices.py), every sample counted once through the padding
// queries, LibTorch's data loader, copies sharing the epoch, save/load, bad arguments and
// the defaults from the default process group.
#include "tdist/torch/sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tdist/backend.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "tdist/rendezvous.h"
#include "torch_test_paths.h"

namespace tdist::torch::sampler_test {
namespace {

// The table tests/torch/py/sampler_indices.py prints; the two must agree.
constexpr size_t kSizes[] = {0, 1, 7, 1000};
constexpr int kMaxReplicas = 8;
constexpr int64_t kSeeds[] = {0, 1, 1234, -3};
constexpr int64_t kEpochs[] = {0, 1, 5};

struct Case {
  size_t n;
  int replicas;
  int rank;
  bool shuffle;
  bool drop_last;
  int64_t seed;
  int64_t epoch;

  // The line prefix sampler_indices.py prints for this case.
  std::string key() const {
    std::ostringstream out;
    out << n << ' ' << replicas << ' ' << rank << ' ' << shuffle << ' ' << drop_last << ' ' << seed
        << ' ' << epoch;
    return out.str();
  }
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (size_t n : kSizes) {
    for (int replicas = 1; replicas <= kMaxReplicas; ++replicas) {
      for (int rank = 0; rank < replicas; ++rank) {
        for (bool shuffle : {false, true}) {
          for (bool drop_last : {false, true}) {
            for (int64_t seed : kSeeds) {
              for (int64_t epoch : kEpochs) {
                cases.push_back({n, replicas, rank, shuffle, drop_last, seed, epoch});
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

// Runs the Python script once. Returns its lines by case key, or sets *skip to why not.
std::map<std::string, std::vector<size_t>> pytorch_indices(std::string* skip) {
  const std::string command =
      std::string("/usr/bin/python3 ") + TDIST_TEST_SOURCE_DIR + "/py/sampler_indices.py";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *skip = "cannot run " + command;
    return {};
  }
  std::string output;
  char buf[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, got);
  const int status = ::pclose(pipe);
  if (output.rfind("SKIP ", 0) == 0) {
    *skip = output.substr(5);
    return {};
  }
  if (status != 0) {
    *skip = command + " failed (status " + std::to_string(status) +
            "; is /usr/bin/python3 with python3-torch installed?)";
    return {};
  }
  std::map<std::string, std::vector<size_t>> by_key;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(" :");
    if (colon == std::string::npos) continue;
    std::istringstream numbers(line.substr(colon + 2));
    std::vector<size_t>& indices = by_key[line.substr(0, colon)];
    for (size_t i = 0; numbers >> i;) indices.push_back(i);
  }
  return by_key;
}

DistributedSampler make_sampler(const Case& c) {
  DistributedSampler sampler(c.n, {.num_replicas = c.replicas,
                                   .rank = c.rank,
                                   .shuffle = c.shuffle,
                                   .seed = c.seed,
                                   .drop_last = c.drop_last});
  sampler.set_epoch(c.epoch);
  return sampler;
}

// Everything next() hands out until it returns nullopt.
std::vector<size_t> drain(DistributedSampler& sampler, size_t batch_size) {
  std::vector<size_t> out;
  while (auto batch = sampler.next(batch_size)) {
    EXPECT_FALSE(batch->empty());
    EXPECT_LE(batch->size(), batch_size);
    out.insert(out.end(), batch->begin(), batch->end());
  }
  return out;
}

TEST(DistributedSampler, YieldsExactlyWhatPyTorchYields) {
  std::string skip;
  const std::map<std::string, std::vector<size_t>> expected = pytorch_indices(&skip);
  if (!skip.empty()) GTEST_SKIP() << skip;

  const std::vector<Case> cases = all_cases();
  ASSERT_EQ(expected.size(), cases.size()) << "sampler_indices.py's table differs from this one";
  int failures = 0;
  for (const Case& c : cases) {
    auto it = expected.find(c.key());
    ASSERT_NE(it, expected.end()) << "sampler_indices.py printed no case " << c.key();
    DistributedSampler sampler = make_sampler(c);
    const bool same = sampler.size() == it->second.size() && sampler.indices() == it->second &&
                      drain(sampler, 3) == it->second;
    // The first few differing cases say enough; thousands would drown them.
    if (!same && ++failures <= 5) {
      ADD_FAILURE() << "case (n R rank shuffle drop_last seed epoch) " << c.key()
                    << " differs from PyTorch";
    }
  }
  EXPECT_EQ(failures, 0);
}

// Summed over ranks, the first num_real_samples() positions cover each sample once.
TEST(DistributedSampler, RealPositionsCountEverySampleExactlyOnce) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{13}, size_t{1000}}) {
    for (int replicas = 1; replicas <= kMaxReplicas; ++replicas) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "n=" << n << " R=" << replicas << " shuffle="
                                            << shuffle << " drop_last=" << drop_last);
          std::vector<int> seen(n, 0);
          size_t real_total = 0;
          for (int rank = 0; rank < replicas; ++rank) {
            DistributedSampler sampler(n, {.num_replicas = replicas,
                                           .rank = rank,
                                           .shuffle = shuffle,
                                           .seed = 7,
                                           .drop_last = drop_last});
            const size_t real = sampler.num_real_samples();
            ASSERT_LE(real, sampler.size());
            real_total += real;
            for (size_t p = 0; p < sampler.size(); ++p) {
              EXPECT_EQ(sampler.is_padding(p), p >= real) << "position " << p;
              const size_t index = sampler.indices()[p];
              ASSERT_LT(index, n);
              if (!sampler.is_padding(p)) ++seen[index];
            }
          }
          const size_t kept = drop_last ? n / static_cast<size_t>(replicas) * replicas : n;
          EXPECT_EQ(real_total, kept);
          size_t once = 0;
          for (int count : seen) {
            ASSERT_LE(count, 1);
            once += static_cast<size_t>(count);
          }
          EXPECT_EQ(once, kept);
        }
      }
    }
  }
}

TEST(DistributedSampler, PaddingIsTheTailOfTheRanksThatNeedIt) {
  // n = 10 over 4 ranks: 3 positions each; global positions 10 and 11 (ranks 2 and 3,
  // position 2) are padding and repeat order[0] and order[1].
  for (int rank = 0; rank < 4; ++rank) {
    DistributedSampler sampler(10, {.num_replicas = 4, .rank = rank, .shuffle = false});
    EXPECT_EQ(sampler.size(), 3U);
    EXPECT_EQ(sampler.num_real_samples(), rank < 2 ? 3U : 2U);
    EXPECT_EQ(sampler.indices()[2],
              rank < 2 ? static_cast<size_t>(8 + rank) : static_cast<size_t>(rank - 2));
  }
  DistributedSampler cut(10, {.num_replicas = 4, .rank = 3, .shuffle = false, .drop_last = true});
  EXPECT_EQ(cut.indices(), (std::vector<size_t>{3, 7}));
  EXPECT_EQ(cut.num_real_samples(), 2U);
}

// The dataset indices (the TensorDataset holds 0..n-1) of one pass over `loader`.
template <typename Loader>
std::vector<size_t> loader_order(Loader& loader) {
  std::vector<size_t> out;
  for (auto& batch : loader) {
    const ::torch::Tensor data = batch.data;
    EXPECT_LE(data.size(0), 4);
    for (int64_t i = 0; i < data.size(0); ++i)
      out.push_back(static_cast<size_t>(data[i].item<int64_t>()));
  }
  return out;
}

TEST(DistributedSampler, DrivesLibTorchDataLoaderAndSetEpochReachesItsCopy) {
  const int64_t n = 103;
  for (size_t workers : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE(::testing::Message() << "workers=" << workers);
    DistributedSampler sampler(n, {.num_replicas = 3, .rank = 1, .seed = 42});
    auto dataset = ::torch::data::datasets::TensorDataset(::torch::arange(n))
                       .map(::torch::data::transforms::Stack<::torch::data::TensorExample>());
    auto loader = ::torch::data::make_data_loader(
        std::move(dataset), sampler,
        ::torch::data::DataLoaderOptions().batch_size(4).workers(workers));
    const std::vector<size_t> epoch0 = sampler.indices();
    EXPECT_EQ(loader_order(*loader), epoch0);
    EXPECT_EQ(loader_order(*loader), epoch0) << "a second pass over the same epoch";
    sampler.set_epoch(1);
    const std::vector<size_t> epoch1 = sampler.indices();
    EXPECT_NE(epoch1, epoch0);
    EXPECT_EQ(loader_order(*loader), epoch1) << "the loader's copy did not see set_epoch(1)";
  }
}

TEST(DistributedSampler, CopiesShareTheEpochButNotThePosition) {
  DistributedSampler a(50, {.num_replicas = 2, .rank = 0});
  DistributedSampler b = a;
  ASSERT_TRUE(a.next(5).has_value());
  EXPECT_EQ(b.next(50)->size(), 25U) << "b's position moved with a's";
  const std::vector<size_t> epoch0 = b.indices();
  a.set_epoch(3);
  EXPECT_EQ(b.epoch(), 3);
  EXPECT_EQ(b.indices(), epoch0) << "b changes order only at its reset()";
  b.reset();
  EXPECT_EQ(b.indices(), a.indices());
  DistributedSampler moved = std::move(b);
  a.set_epoch(4);
  EXPECT_EQ(moved.epoch(), 4);
  EXPECT_EQ(b.epoch(), 4);  // NOLINT(bugprone-use-after-move): moving copies by design
}

TEST(DistributedSampler, ResetNextAndNewSize) {
  DistributedSampler sampler(10, {.num_replicas = 2, .rank = 1, .shuffle = false});
  EXPECT_EQ(*sampler.next(3), (std::vector<size_t>{1, 3, 5}));
  EXPECT_EQ(*sampler.next(3), (std::vector<size_t>{7, 9}));
  EXPECT_FALSE(sampler.next(3).has_value());
  sampler.reset();
  EXPECT_EQ(*sampler.next(1), (std::vector<size_t>{1}));
  sampler.reset(5);
  EXPECT_EQ(sampler.size(), 3U);
  EXPECT_EQ(sampler.num_real_samples(), 2U);
  EXPECT_EQ(drain(sampler, 10), (std::vector<size_t>{1, 3, 0}));

  DistributedSampler empty(0, {.num_replicas = 3, .rank = 2});
  EXPECT_EQ(empty.size(), 0U);
  EXPECT_EQ(empty.num_real_samples(), 0U);
  EXPECT_FALSE(empty.next(4).has_value());
}

TEST(DistributedSampler, SaveAndLoadResumeTheEpochAndPosition) {
  DistributedSampler sampler(40, {.num_replicas = 2, .rank = 1, .seed = 5});
  sampler.set_epoch(2);
  ASSERT_TRUE(sampler.next(7).has_value());
  std::stringstream stream;
  {
    ::torch::serialize::OutputArchive archive;
    sampler.save(archive);
    archive.save_to(stream);
  }
  const std::vector<size_t> rest = drain(sampler, 100);
  ASSERT_EQ(rest.size(), 13U);

  DistributedSampler resumed(40, {.num_replicas = 2, .rank = 1, .seed = 5});
  {
    ::torch::serialize::InputArchive archive;
    archive.load_from(stream);
    resumed.load(archive);
  }
  EXPECT_EQ(resumed.epoch(), 2);
  EXPECT_EQ(drain(resumed, 4), rest);

  stream.seekg(0);
  DistributedSampler other_size(41, {.num_replicas = 2, .rank = 1, .seed = 5});
  ::torch::serialize::InputArchive archive;
  archive.load_from(stream);
  EXPECT_THROW(other_size.load(archive), InvalidArgument);
}

TEST(DistributedSampler, RejectsBadReplicasAndRanks) {
  try {
    DistributedSampler sampler(10, {.num_replicas = 3, .rank = 3});
    FAIL() << "rank 3 of 3 accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("invalid rank 3, rank should be in the interval [0, 2]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 3, .rank = -1}), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 0, .rank = 0}), InvalidArgument);
}

TEST(DistributedSampler, DefaultsComeFromTheDefaultProcessGroup) {
  ASSERT_FALSE(is_initialized());
  EXPECT_THROW(DistributedSampler(10), Error);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2}), Error) << "rank needs the group";

  // World of 3: this thread is rank 1 through init_process_group; ranks 0 and 2 join the
  // same store from threads, as the other processes of a job would.
  constexpr int kWorld = 3;
  const std::chrono::milliseconds timeout(30000);
  auto store = std::make_shared<HashStore>();
  std::promise<void> done;
  std::shared_future<void> done_future = done.get_future().share();
  std::vector<std::thread> others;
  std::vector<std::exception_ptr> errors(kWorld);
  for (int r : {0, 2}) {
    others.emplace_back([&, r] {
      try {
        RendezvousResult joined = rendezvous(store, r, kWorld, timeout);
        std::shared_ptr<ProcessGroup> group =
            backend_factory("tcp")(joined.store, r, kWorld, timeout);
        done_future.wait();
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  try {
    init_process_group("tcp", "env://", kWorld, 1, timeout, store);
    DistributedSampler sampler(10);
    EXPECT_EQ(sampler.num_replicas(), 3);
    EXPECT_EQ(sampler.rank(), 1);
    EXPECT_EQ(sampler.indices().size(), 4U);
    DistributedSampler explicit_rank(10, {.rank = 2, .shuffle = false});
    EXPECT_EQ(explicit_rank.num_replicas(), 3);
    EXPECT_EQ(explicit_rank.indices(), (std::vector<size_t>{2, 5, 8, 1}));
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 1: " << e.what();
  }
  done.set_value();
  if (is_initialized()) destroy_process_group();
  for (std::thread& t : others) t.join();
  for (int r : {0, 2}) {
    if (errors[static_cast<size_t>(r)] == nullptr) continue;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace tdist::torch::sampler_test
