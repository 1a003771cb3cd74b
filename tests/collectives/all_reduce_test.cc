// all_reduce: every algorithm x world 1..8 x dtype x op x count against a reference fold
// computed another way, on N ranks as threads over MemComm; in place and out of place;
// identical bits on every rank; the ring's bounded scratch.
#include "collectives/all_reduce.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/detail.h"
#include "collectives/mem_comm.h"

namespace tdist::coll {
namespace {

using testing::compare;
using testing::make_input;
using testing::reference_reduce;
using testing::run_ranks_ok;

constexpr Algorithm kAlgos[] = {Algorithm::kRing, Algorithm::kHalvingDoubling,
                                Algorithm::kRecursiveDoubling};

Deadline op_deadline() { return Deadline::after(std::chrono::seconds(60)); }

class AllReduceTest : public ::testing::TestWithParam<std::tuple<Algorithm, int>> {};

// Every dtype and op, counts 0, 1, 3 and 1023, with a 64-byte chunk so that the
// pipelines run many chunks and wrap their scratch slots.
TEST_P(AllReduceTest, EveryDtypeOpAndCount) {
  const auto [algo, world] = GetParam();
  const coll::CollectiveSettings settings = testing::chunk_settings(64);
  run_ranks_ok(world, [&, algo = algo, world = world](transport::Comm& comm) {
    uint64_t seq = 0;
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : testing::ops_for(dtype)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}}) {
          const std::string what = std::string(dtype_name(dtype)) + " " +
                                   std::string(reduce_op_name(op.kind)) + " count " +
                                   std::to_string(count);
          const std::vector<uint8_t> want = reference_reduce(world, count, dtype, op);
          const std::vector<uint8_t> input = make_input(comm.rank(), count, dtype, op.kind);
          const bool in_place = (seq % 2) == 0;
          std::vector<uint8_t> send = input;
          std::vector<uint8_t> recv(input.size(), 0xCD);
          Ctx ctx{comm, seq++, op_deadline(), settings};
          if (in_place) {
            all_reduce(ctx, send.data(), send.data(), count, dtype, op, algo);
            recv = send;
          } else {
            all_reduce(ctx, send.data(), recv.data(), count, dtype, op, algo);
            ASSERT_EQ(send, input) << what << ": send was modified";
          }
          auto bad = compare(dtype, recv.data(), want.data(), count);
          ASSERT_FALSE(bad) << what << (in_place ? " in place" : "") << ": " << *bad;
        }
      }
    }
  });
}

// Every rank ends with the same bits, and large vectors (many default-size chunks,
// uneven blocks) are right.
class AllReduceLargeTest : public AllReduceTest {};

TEST_P(AllReduceLargeTest, LargeVectorsAreIdenticalOnEveryRank) {
  const auto [algo, world] = GetParam();
  const size_t count = (size_t{1} << 20) + 1;
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(world));
  for (ReduceOp op : {ReduceOp(ReduceOpKind::kSum), ReduceOp(ReduceOpKind::kAvg)}) {
    const std::vector<uint8_t> want = reference_reduce(world, count, DType::kF32, op);
    run_ranks_ok(world, [&, algo = algo](transport::Comm& comm) {
      std::vector<uint8_t> send = make_input(comm.rank(), count, DType::kF32, op.kind);
      std::vector<uint8_t> recv(send.size());
      all_reduce(Ctx{comm, 7, op_deadline()}, send.data(), recv.data(), count, DType::kF32, op,
                 algo);
      results[static_cast<size_t>(comm.rank())] = std::move(recv);
    });
    for (int r = 0; r < world; ++r) {
      auto bad = compare(DType::kF32, results[r].data(), want.data(), count);
      ASSERT_FALSE(bad) << "rank " << r << " " << reduce_op_name(op.kind) << ": " << *bad;
      ASSERT_EQ(results[r], results[0]) << "rank " << r << " differs from rank 0";
    }
  }
}

// Random (non-integer) floats: the association order differs by algorithm, so compare
// with a tolerance, and insist on identical bits across ranks.
TEST_P(AllReduceTest, RandomFloatsWithinTolerance) {
  const auto [algo, world] = GetParam();
  const size_t count = 4099;
  auto value = [](int r, size_t i) {
    return std::sin(static_cast<double>(i) * 0.37 + r * 1.3) * 100.0 + 0.125 * r;
  };
  std::vector<double> want(count, 0);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) want[i] += value(r, i);
  }
  std::vector<std::vector<double>> results(static_cast<size_t>(world));
  const coll::CollectiveSettings settings = testing::chunk_settings(1000);
  run_ranks_ok(world, [&, algo = algo](transport::Comm& comm) {
    std::vector<double> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = value(comm.rank(), i);
    all_reduce(Ctx{comm, 1, op_deadline(), settings}, data.data(), data.data(), count, DType::kF64,
               ReduceOpKind::kSum, algo);
    results[static_cast<size_t>(comm.rank())] = std::move(data);
  });
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_NEAR(results[r][i], want[i], 1e-9 * (1 + std::fabs(want[i]))) << "element " << i;
    }
    ASSERT_EQ(0, std::memcmp(results[r].data(), results[0].data(), count * sizeof(double)));
  }
}

std::string param_name(const ::testing::TestParamInfo<AllReduceTest::ParamType>& p) {
  return std::string(algorithm_name(std::get<0>(p.param))) + "_world" +
         std::to_string(std::get<1>(p.param));
}

INSTANTIATE_TEST_SUITE_P(AlgosAndWorlds, AllReduceTest,
                         ::testing::Combine(::testing::ValuesIn(kAlgos), ::testing::Range(1, 9)),
                         param_name);
INSTANTIATE_TEST_SUITE_P(AlgosAndWorlds, AllReduceLargeTest,
                         ::testing::Combine(::testing::ValuesIn(kAlgos),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         param_name);

// The ring's scratch is a few chunks whatever the vector and world size.
TEST(AllReduceMemory, RingScratchIsBoundedByChunks) {
  const coll::CollectiveSettings settings = testing::chunk_settings(4096);
  for (int world : {2, 3, 8}) {
    for (size_t count : {size_t{1000}, size_t{1} << 18, size_t{1} << 20}) {
      std::vector<size_t> peaks(static_cast<size_t>(world));
      run_ranks_ok(world, [&](transport::Comm& comm) {
        std::vector<float> data(count, 1.0f);
        detail::reset_scratch_peak();
        all_reduce(Ctx{comm, 0, op_deadline(), settings}, data.data(), data.data(), count,
                   DType::kF32, ReduceOpKind::kSum, Algorithm::kRing);
        peaks[static_cast<size_t>(comm.rank())] = detail::scratch_peak_bytes();
        EXPECT_EQ(data[count / 2], static_cast<float>(world));
      });
      for (size_t peak : peaks) {
        EXPECT_LE(peak, detail::kPipelineDepth * 4096) << "world " << world << " count " << count;
      }
    }
  }
}

// Two ranks out of place: the peer's half is staged in a few chunks of scratch and reduced
// from there with `send` read where it is, which stays as it was.
TEST(AllReduceMemory, TwoRanksOutOfPlaceStageInBoundedScratchAndKeepSend) {
  const coll::CollectiveSettings settings = testing::chunk_settings(4096);
  const size_t count = (size_t{1} << 18) + 3;
  run_ranks_ok(2, [&](transport::Comm& comm) {
    std::vector<float> send(count);
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<float>(i % 97 + comm.rank());
    const std::vector<float> before = send;
    std::vector<float> recv(count, -1.0f);
    detail::reset_scratch_peak();
    all_reduce(Ctx{comm, 0, op_deadline(), settings}, send.data(), recv.data(), count, DType::kF32,
               ReduceOpKind::kSum, Algorithm::kRing);
    EXPECT_LE(detail::scratch_peak_bytes(), detail::kPipelineDepth * 4096);
    EXPECT_EQ(send, before);
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[i], static_cast<float>(2 * (i % 97) + 1)) << "element " << i;
    }
  });
}

// Halving-doubling and recursive doubling pipeline through the same bounded scratch.
TEST(AllReduceMemory, OtherAlgorithmsScratchIsBoundedByChunks) {
  const coll::CollectiveSettings settings = testing::chunk_settings(4096);
  for (Algorithm algo : {Algorithm::kHalvingDoubling, Algorithm::kRecursiveDoubling}) {
    for (int world : {2, 5, 8}) {
      const size_t count = size_t{1} << 19;
      run_ranks_ok(world, [&](transport::Comm& comm) {
        std::vector<float> data(count, 2.0f);
        detail::reset_scratch_peak();
        all_reduce(Ctx{comm, 0, op_deadline(), settings}, data.data(), data.data(), count,
                   DType::kF32, ReduceOpKind::kSum, algo);
        EXPECT_LE(detail::scratch_peak_bytes(), detail::kPipelineDepth * 4096);
        EXPECT_EQ(data[count - 1], 2.0f * world);
      });
    }
  }
}

TEST(AllReduce, PremulSumScalesOnlyTheOwnContributionAndKeepsSend) {
  for (Algorithm algo : kAlgos) {
    run_ranks_ok(4, [&](transport::Comm& comm) {
      const std::vector<float> input(10, static_cast<float>(comm.rank() + 1));
      std::vector<float> send = input;
      std::vector<float> recv(10);
      all_reduce(Ctx{comm, 0, op_deadline()}, send.data(), recv.data(), 10, DType::kF32,
                 ReduceOp::premul_sum(3.0), algo);
      EXPECT_EQ(send, input);
      for (float v : recv) EXPECT_EQ(v, 3.0f * (1 + 2 + 3 + 4));
    });
  }
}

TEST(AllReduce, BadOpForDtypeIsInvalidArgumentBeforeSending) {
  run_ranks_ok(2, [](transport::Comm& comm) {
    float x = 1;
    EXPECT_THROW(
        all_reduce(Ctx{comm, 0, op_deadline()}, &x, &x, 1, DType::kF32, ReduceOpKind::kBand),
        InvalidArgument);
    EXPECT_THROW(all_reduce(Ctx{comm, 0, op_deadline()}, &x, &x, 1, DType::kF32, ReduceOpKind::kSum,
                            Algorithm::kChain),
                 InvalidArgument);
    EXPECT_EQ(comm.error(), nullptr);
  });
}

}  // namespace
}  // namespace tdist::coll
