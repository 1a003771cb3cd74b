// broadcast, reduce, all_gatherv, gather, scatter, reduce_scatter, all_to_allv and
// barrier: every algorithm x world 1..8 against references computed directly, on N ranks
// as threads over MemComm; failures (a missing rank, a size mismatch) become errors on
// every rank, never hangs.
#include "collectives/collectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/mem_comm.h"

namespace tdist::coll {
namespace {

using testing::compare;
using testing::make_input;
using testing::reference_reduce;
using testing::run_ranks;
using testing::run_ranks_ok;

Deadline op_deadline() { return Deadline::after(std::chrono::seconds(60)); }

// Bytes that identify (rank, index).
std::vector<uint8_t> pattern(int rank, size_t bytes, int salt = 0) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + rank * 101 + salt);
  return out;
}

constexpr size_t kCounts[] = {0, 1, 3, 1023};

class WorldTest : public ::testing::TestWithParam<int> {};

std::string world_name(const ::testing::TestParamInfo<int>& p) {
  return "world" + std::to_string(p.param);
}

TEST_P(WorldTest, Broadcast) {
  const int world = GetParam();
  const coll::CollectiveSettings settings = testing::chunk_settings(100);
  run_ranks_ok(world, [&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (Algorithm algo : algorithms_for(Collective::kBroadcast)) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}, size_t{70000}}) {
        for (int root = 0; root < world; ++root) {
          std::vector<uint8_t> data =
              comm.rank() == root ? pattern(root, bytes) : std::vector<uint8_t>(bytes, 0);
          broadcast(Ctx{comm, seq++, op_deadline(), settings}, data.data(), bytes, root, algo);
          ASSERT_EQ(data, pattern(root, bytes))
              << algorithm_name(algo) << " bytes " << bytes << " root " << root;
        }
      }
    }
  });
}

TEST_P(WorldTest, Reduce) {
  const int world = GetParam();
  const coll::CollectiveSettings settings = testing::chunk_settings(64);
  run_ranks_ok(world, [&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (Algorithm algo : algorithms_for(Collective::kReduce)) {
      for (DType dtype : kAllDTypes) {
        for (ReduceOp op : testing::ops_for(dtype)) {
          for (size_t count : kCounts) {
            const int root = static_cast<int>(seq % static_cast<uint64_t>(world));
            const std::vector<uint8_t> input = make_input(comm.rank(), count, dtype, op.kind);
            std::vector<uint8_t> send = input;
            std::vector<uint8_t> recv(input.size(), 0xAB);
            const bool in_place = comm.rank() == root && seq % 3 == 0;
            void* out = comm.rank() == root ? (in_place ? send.data() : recv.data()) : nullptr;
            reduce(Ctx{comm, seq++, op_deadline(), settings}, send.data(), out, count, dtype, op,
                   root, algo);
            const std::string what = std::string(algorithm_name(algo)) + " " +
                                     std::string(dtype_name(dtype)) + " " +
                                     std::string(reduce_op_name(op.kind)) + " count " +
                                     std::to_string(count) + " root " + std::to_string(root);
            if (comm.rank() != root) {
              ASSERT_EQ(send, input) << what << ": send modified";
              continue;
            }
            const std::vector<uint8_t> want = reference_reduce(world, count, dtype, op);
            auto bad = compare(dtype, in_place ? send.data() : recv.data(), want.data(), count);
            ASSERT_FALSE(bad) << what << ": " << *bad;
            if (!in_place) {
              ASSERT_EQ(send, input) << what << ": send modified";
            }
          }
        }
      }
    }
  });
}

TEST_P(WorldTest, ReduceScatter) {
  const int world = GetParam();
  const coll::CollectiveSettings settings = testing::chunk_settings(64);
  run_ranks_ok(world, [&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (DType dtype : kAllDTypes) {
      const size_t es = dtype_size(dtype);
      for (ReduceOp op : testing::ops_for(dtype)) {
        for (size_t count : kCounts) {
          const size_t total = count * static_cast<size_t>(world);
          const std::vector<uint8_t> input = make_input(comm.rank(), total, dtype, op.kind);
          const std::vector<uint8_t> want = reference_reduce(world, total, dtype, op);
          std::vector<uint8_t> send = input;
          std::vector<uint8_t> recv(count * es, 0xEE);
          const bool in_place = seq % 2 == 1;
          uint8_t* out = in_place ? send.data() + comm.rank() * count * es : recv.data();
          reduce_scatter(Ctx{comm, seq++, op_deadline(), settings}, send.data(), out, count, dtype,
                         op);
          const std::string what = std::string(dtype_name(dtype)) + " " +
                                   std::string(reduce_op_name(op.kind)) + " count " +
                                   std::to_string(count);
          auto bad = compare(dtype, out, want.data() + comm.rank() * count * es, count);
          ASSERT_FALSE(bad) << what << ": " << *bad;
          if (!in_place) {
            ASSERT_EQ(send, input) << what << ": send modified";
          }
        }
      }
    }
  });
}

TEST_P(WorldTest, AllGatherEqualAndVariableSizes) {
  const int world = GetParam();
  const coll::CollectiveSettings settings = testing::chunk_settings(50);
  run_ranks_ok(world, [&](transport::Comm& comm) {
    uint64_t seq = 0;
    std::vector<std::vector<size_t>> layouts;
    for (size_t bytes : kCounts) layouts.emplace_back(world, bytes);
    std::vector<size_t> varied;
    for (int i = 0; i < world; ++i) varied.push_back(i % 3 == 1 ? 0 : 17 * i + 5);
    layouts.push_back(varied);
    for (const auto& sizes : layouts) {
      for (bool in_place : {false, true}) {
        size_t total = 0;
        size_t own_offset = 0;
        for (int i = 0; i < world; ++i) {
          if (i == comm.rank()) own_offset = total;
          total += sizes[i];
        }
        const std::vector<uint8_t> mine = pattern(comm.rank(), sizes[comm.rank()]);
        std::vector<uint8_t> recv(total, 0);
        std::vector<uint8_t> send = mine;
        if (in_place) std::copy(mine.begin(), mine.end(), recv.begin() + own_offset);
        all_gatherv(Ctx{comm, seq++, op_deadline(), settings},
                    in_place ? recv.data() + own_offset : send.data(), recv.data(), sizes);
        std::vector<uint8_t> want;
        for (int i = 0; i < world; ++i) {
          auto p = pattern(i, sizes[i]);
          want.insert(want.end(), p.begin(), p.end());
        }
        ASSERT_EQ(recv, want) << "sizes[0] " << sizes[0] << " in_place " << in_place;
        ASSERT_EQ(send, mine);
      }
    }
  });
}

TEST_P(WorldTest, GatherAndScatter) {
  const int world = GetParam();
  run_ranks_ok(world, [&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (size_t bytes : kCounts) {
      for (int root = 0; root < world; ++root) {
        std::vector<uint8_t> all;
        for (int i = 0; i < world; ++i) {
          auto p = pattern(i, bytes, 7);
          all.insert(all.end(), p.begin(), p.end());
        }
        const bool is_root = comm.rank() == root;
        const std::vector<uint8_t> mine = pattern(comm.rank(), bytes, 7);
        std::vector<uint8_t> gathered(is_root ? all.size() : 0, 0);
        gather(Ctx{comm, seq++, op_deadline()}, mine.data(), is_root ? gathered.data() : nullptr,
               bytes, root);
        if (is_root) {
          ASSERT_EQ(gathered, all) << "gather bytes " << bytes << " root " << root;
        }
        std::vector<uint8_t> got(bytes, 0);
        scatter(Ctx{comm, seq++, op_deadline()}, is_root ? all.data() : nullptr, got.data(), bytes,
                root);
        ASSERT_EQ(got, mine) << "scatter bytes " << bytes << " root " << root;
      }
    }
  });
}

TEST_P(WorldTest, AllToAllWithZeroSizes) {
  const int world = GetParam();
  auto size_of = [](int from, int to, int salt) {
    return static_cast<size_t>((from * 7 + to * 3 + salt) % 5 == 0 ? 0
                                                                   : (from + 1) * (to + 2) + salt);
  };
  run_ranks_ok(world, [&](transport::Comm& comm) {
    for (int salt = 0; salt < 3; ++salt) {
      const int r = comm.rank();
      std::vector<size_t> sb;
      std::vector<size_t> rb;
      std::vector<uint8_t> send;
      std::vector<uint8_t> want;
      for (int i = 0; i < world; ++i) {
        sb.push_back(size_of(r, i, salt));
        rb.push_back(size_of(i, r, salt));
        auto s = pattern(r * 16 + i, sb.back(), salt);
        send.insert(send.end(), s.begin(), s.end());
        auto w = pattern(i * 16 + r, rb.back(), salt);
        want.insert(want.end(), w.begin(), w.end());
      }
      std::vector<uint8_t> recv(want.size(), 0);
      all_to_allv(Ctx{comm, static_cast<uint64_t>(salt), op_deadline()}, send.data(), sb,
                  recv.data(), rb);
      ASSERT_EQ(recv, want) << "salt " << salt;
    }
  });
}

TEST_P(WorldTest, BarrierWaitsForEveryRank) {
  const int world = GetParam();
  std::atomic<int> entered{0};
  run_ranks_ok(world, [&](transport::Comm& comm) {
    for (uint64_t round = 0; round < 5; ++round) {
      if (comm.rank() == static_cast<int>(round % world)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      entered.fetch_add(1);
      barrier(Ctx{comm, round, op_deadline()});
      EXPECT_GE(entered.load(), static_cast<int>((round + 1) * world));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, WorldTest, ::testing::Range(1, 9), world_name);

TEST(CollectiveFailure, MissingRankTimesOutAndAbortsOnEveryRank) {
  auto errors = run_ranks(3, [](transport::Comm& comm) {
    if (comm.rank() == 2) return;  // never joins
    std::vector<float> data(100, 1.0f);
    all_reduce(Ctx{comm, 0, Deadline::after(std::chrono::milliseconds(200))}, data.data(),
               data.data(), data.size(), DType::kF32, ReduceOpKind::kSum, Algorithm::kRing);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const TimeoutError&) {
    } catch (const PeerError&) {  // aborted by the other rank's timeout first
    }
  }
}

TEST(CollectiveFailure, SizeMismatchIsDesyncNotHang) {
  auto errors = run_ranks(2, [](transport::Comm& comm) {
    std::vector<uint8_t> data(comm.rank() == 0 ? 10 : 12, 1);
    broadcast(Ctx{comm, 0, op_deadline()}, data.data(), data.size(), 0, Algorithm::kBinomial);
  });
  ASSERT_TRUE(errors[1]);
  EXPECT_THROW(std::rethrow_exception(errors[1]), DesyncError);
}

TEST(CollectiveFailure, AbortedCommFailsFastWithPeerError) {
  auto errors = run_ranks(4, [](transport::Comm& comm) {
    if (comm.rank() == 3) {
      comm.abort(nullptr);
      return;
    }
    std::vector<double> data(1000, 1.0);
    all_reduce(Ctx{comm, 0, op_deadline()}, data.data(), data.data(), data.size(), DType::kF64,
               ReduceOpKind::kSum);
  });
  for (int r = 0; r < 3; ++r) EXPECT_THROW(std::rethrow_exception(errors[r]), PeerError);
}

TEST(CollectiveArgs, BadRootAndSizesAreInvalidArgument) {
  run_ranks_ok(2, [](transport::Comm& comm) {
    uint8_t b[8] = {};
    Ctx ctx{comm, 0, op_deadline()};
    EXPECT_THROW(broadcast(ctx, b, 1, 2), InvalidArgument);
    EXPECT_THROW(reduce(ctx, b, b, 1, DType::kU8, ReduceOpKind::kSum, -1), InvalidArgument);
    EXPECT_THROW(gather(ctx, b, b, 1, 5), InvalidArgument);
    const size_t one[] = {1};
    EXPECT_THROW(all_gatherv(ctx, b, b, one), InvalidArgument);
    const size_t two[] = {1, 1};
    const size_t mismatch[] = {2, 2};
    EXPECT_THROW(all_to_allv(ctx, b, two, b + 4, mismatch), InvalidArgument);
    EXPECT_EQ(comm.error(), nullptr);
  });
}

}  // namespace
}  // namespace tdist::coll
