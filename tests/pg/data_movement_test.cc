// broadcast, all_gather, all_gatherv, gather, scatter, all_to_all, all_to_allv and
// barrier of the "tcp" backend, ranks as threads: every dtype x counts 0, 1, 3, 1023
// (and 1Mi+1 for a few), in place where the API has an in-place form, roots other than
// 0, variable sizes with zeros. Contents are byte patterns that name the sending rank
// and the block, so a block delivered to the wrong place is caught.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

constexpr size_t kSmallCounts[] = {0, 1, 3, 1023};
constexpr size_t kLargeCount = (size_t{1} << 20) + 1;

std::string name_of(const char* coll, DType t, size_t count, const std::string& extra = "") {
  return std::string(coll) + " " + std::string(dtype_name(t)) + "/n=" + std::to_string(count) +
         extra;
}

// Checks that `p` holds the block `src` sent to `dst`.
void expect_block(int rank, const std::string& name, const uint8_t* p, size_t bytes, uint64_t seed,
                  int src, int dst) {
  int64_t at = pattern_mismatch(p, bytes, seed, src, dst);
  if (at >= 0) {
    ADD_FAILURE() << "rank " << rank << ": " << name << ": block from rank " << src
                  << " differs at byte " << at << " of " << bytes;
  }
}

void expect_guards(int rank, const std::string& name, const Buffer& a, const Buffer& b) {
  if (!a.guards_intact() || !b.guards_intact()) {
    ADD_FAILURE() << "rank " << rank << ": " << name << ": guard bytes were overwritten";
  }
}

void broadcast_case(int rank, ProcessGroup& pg, DType t, size_t count, int root, uint64_t seed) {
  const std::string name = name_of("broadcast", t, count, "/root=" + std::to_string(root));
  Buffer data(t, count);
  if (rank == root) fill_pattern(data.data(), data.bytes(), seed, root, 0);
  pg.broadcast(data.data(), count, t, root)->wait();
  expect_block(rank, name, data.data(), data.bytes(), seed, root, 0);
  expect_guards(rank, name, data, data);
}

void all_gather_case(int rank, ProcessGroup& pg, DType t, size_t count, bool in_place,
                     uint64_t seed) {
  const std::string name = name_of("all_gather", t, count, in_place ? "/in-place" : "");
  const int world = pg.size();
  const size_t bytes = count * dtype_size(t);
  Buffer send(t, count);
  Buffer recv(t, count * static_cast<size_t>(world));
  uint8_t* mine = in_place ? recv.data() + static_cast<size_t>(rank) * bytes : send.data();
  fill_pattern(mine, bytes, seed, rank, 0);
  pg.all_gather(mine, recv.data(), count, t)->wait();
  for (int r = 0; r < world; ++r) {
    expect_block(rank, name, recv.data() + static_cast<size_t>(r) * bytes, bytes, seed, r, 0);
  }
  if (!in_place) expect_block(rank, name + " (send buffer)", send.data(), bytes, seed, rank, 0);
  expect_guards(rank, name, send, recv);
}

// Block sizes with zeros: rank r contributes counts[r] elements.
std::vector<size_t> variable_counts(int world, size_t base, uint64_t seed) {
  std::vector<size_t> counts;
  for (int r = 0; r < world; ++r) {
    const uint64_t h = mix(seed, static_cast<uint64_t>(r), 0xC0);
    counts.push_back(h % 3 == 0 ? 0 : base + h % 5);
  }
  return counts;
}

void all_gatherv_case(int rank, ProcessGroup& pg, DType t, size_t base, bool in_place,
                      uint64_t seed) {
  const std::string name = name_of("all_gatherv", t, base, in_place ? "/in-place" : "");
  const int world = pg.size();
  const size_t es = dtype_size(t);
  std::vector<size_t> counts = variable_counts(world, base, seed);
  std::vector<size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t{0});
  const size_t total = offsets.back() + counts.back();
  const size_t mine = counts[static_cast<size_t>(rank)];
  Buffer send(t, mine);
  Buffer recv(t, total);
  uint8_t* src = in_place ? recv.data() + offsets[static_cast<size_t>(rank)] * es : send.data();
  fill_pattern(src, mine * es, seed, rank, 0);
  pg.all_gatherv(src, mine, recv.data(), counts, t)->wait();
  for (int r = 0; r < world; ++r) {
    expect_block(rank, name, recv.data() + offsets[static_cast<size_t>(r)] * es,
                 counts[static_cast<size_t>(r)] * es, seed, r, 0);
  }
  expect_guards(rank, name, send, recv);
}

void gather_case(int rank, ProcessGroup& pg, DType t, size_t count, int root, uint64_t seed) {
  const std::string name = name_of("gather", t, count, "/root=" + std::to_string(root));
  const int world = pg.size();
  const size_t bytes = count * dtype_size(t);
  Buffer send(t, count);
  Buffer recv(t, count * static_cast<size_t>(world));
  fill_pattern(send.data(), bytes, seed, rank, 0);
  pg.gather(send.data(), rank == root ? recv.data() : nullptr, count, t, root)->wait();
  if (rank == root) {
    for (int r = 0; r < world; ++r) {
      expect_block(rank, name, recv.data() + static_cast<size_t>(r) * bytes, bytes, seed, r, 0);
    }
  }
  expect_block(rank, name + " (send buffer)", send.data(), bytes, seed, rank, 0);
  expect_guards(rank, name, send, recv);
}

void scatter_case(int rank, ProcessGroup& pg, DType t, size_t count, int root, uint64_t seed) {
  const std::string name = name_of("scatter", t, count, "/root=" + std::to_string(root));
  const int world = pg.size();
  const size_t bytes = count * dtype_size(t);
  Buffer send(t, count * static_cast<size_t>(world));
  Buffer recv(t, count);
  if (rank == root) {
    for (int r = 0; r < world; ++r) {
      fill_pattern(send.data() + static_cast<size_t>(r) * bytes, bytes, seed, root, r);
    }
  }
  pg.scatter(rank == root ? send.data() : nullptr, recv.data(), count, t, root)->wait();
  expect_block(rank, name, recv.data(), bytes, seed, root, rank);
  expect_guards(rank, name, send, recv);
}

void all_to_all_case(int rank, ProcessGroup& pg, DType t, size_t count, uint64_t seed) {
  const std::string name = name_of("all_to_all", t, count);
  const int world = pg.size();
  const size_t bytes = count * dtype_size(t);
  Buffer send(t, count * static_cast<size_t>(world));
  Buffer recv(t, count * static_cast<size_t>(world));
  for (int p = 0; p < world; ++p) {
    fill_pattern(send.data() + static_cast<size_t>(p) * bytes, bytes, seed, rank, p);
  }
  pg.all_to_all(send.data(), recv.data(), count, t)->wait();
  for (int p = 0; p < world; ++p) {
    expect_block(rank, name, recv.data() + static_cast<size_t>(p) * bytes, bytes, seed, p, rank);
  }
  expect_guards(rank, name, send, recv);
}

// Elements rank `src` sends to rank `dst` in all_to_allv case `seed` (zeros included).
size_t a2av_count(int src, int dst, size_t base, uint64_t seed) {
  const uint64_t h = mix(seed, static_cast<uint64_t>(src), static_cast<uint64_t>(dst), 0xA2);
  return h % 4 == 0 ? 0 : base + h % 7;
}

void all_to_allv_case(int rank, ProcessGroup& pg, DType t, size_t base, uint64_t seed) {
  const std::string name = name_of("all_to_allv", t, base);
  const int world = pg.size();
  const size_t es = dtype_size(t);
  std::vector<size_t> send_counts, recv_counts;
  for (int p = 0; p < world; ++p) {
    send_counts.push_back(a2av_count(rank, p, base, seed));
    recv_counts.push_back(a2av_count(p, rank, base, seed));
  }
  Buffer send(t, std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}));
  Buffer recv(t, std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}));
  size_t off = 0;
  for (int p = 0; p < world; ++p) {
    fill_pattern(send.data() + off * es, send_counts[static_cast<size_t>(p)] * es, seed, rank, p);
    off += send_counts[static_cast<size_t>(p)];
  }
  pg.all_to_allv(send.data(), send_counts, recv.data(), recv_counts, t)->wait();
  off = 0;
  for (int p = 0; p < world; ++p) {
    const size_t n = recv_counts[static_cast<size_t>(p)];
    expect_block(rank, name, recv.data() + off * es, n * es, seed, p, rank);
    off += n;
  }
  expect_guards(rank, name, send, recv);
}

class DataMovementTest : public ::testing::TestWithParam<int> {};

TEST_P(DataMovementTest, BroadcastGatherScatterEveryDtypeCountAndRoot) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 1;
    int root = 0;
    for (DType t : kAllDTypes) {
      for (size_t count : kSmallCounts) {
        root = (root + 1) % pg.size();
        broadcast_case(rank, pg, t, count, root, ++seed);
        gather_case(rank, pg, t, count, (root + 1) % pg.size(), ++seed);
        scatter_case(rank, pg, t, count, (root + 2) % pg.size(), ++seed);
      }
    }
  });
}

TEST_P(DataMovementTest, BroadcastByChainEveryDtypeCountAndRoot) {
  test_support::ScopedEnv algo("TDIST_ALGO", "broadcast=chain");
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 50;
    int root = 0;
    for (DType t : kAllDTypes) {
      for (size_t count : kSmallCounts) {
        root = (root + 1) % pg.size();
        broadcast_case(rank, pg, t, count, root, ++seed);
      }
    }
    broadcast_case(rank, pg, DType::kF32, 300007, pg.size() / 2, ++seed);
  });
}

TEST_P(DataMovementTest, AllGatherAndAllGathervEveryDtypeCountInAndOutOfPlace) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 100;
    for (DType t : kAllDTypes) {
      for (size_t count : kSmallCounts) {
        for (bool in_place : {false, true}) {
          all_gather_case(rank, pg, t, count, in_place, ++seed);
          all_gatherv_case(rank, pg, t, count, in_place, ++seed);
        }
      }
    }
  });
}

TEST_P(DataMovementTest, AllToAllAndAllToAllvEveryDtypeAndCount) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    uint64_t seed = 200;
    for (DType t : kAllDTypes) {
      for (size_t count : kSmallCounts) {
        all_to_all_case(rank, pg, t, count, ++seed);
        all_to_allv_case(rank, pg, t, count, ++seed);
      }
    }
  });
}

TEST_P(DataMovementTest, BarrierHoldsEveryRankUntilAllArrived) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  constexpr int kRounds = 20;
  std::vector<std::atomic<int>> arrived(kRounds);
  world.run([&](int rank, ProcessGroup& pg) {
    for (int round = 0; round < kRounds; ++round) {
      // Stagger arrivals so a barrier that returns early would be seen.
      if ((round + rank) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      arrived[static_cast<size_t>(round)].fetch_add(1);
      pg.barrier()->wait();
      EXPECT_EQ(arrived[static_cast<size_t>(round)].load(), pg.size())
          << "rank " << rank << " left barrier " << round << " before every rank arrived";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, DataMovementTest, ::testing::Values(1, 2, 3, 5, 8), world_name);

// 1Mi+1 elements for a few dtypes, at two world sizes.
class LargeDataMovementTest : public ::testing::TestWithParam<int> {};

TEST_P(LargeDataMovementTest, EveryCollective) {
  ThreadWorld world(GetParam());
  ASSERT_TRUE(world.ok());
  world.run([](int rank, ProcessGroup& pg) {
    const int last = pg.size() - 1;
    broadcast_case(rank, pg, DType::kF32, kLargeCount, last, 1);
    all_gather_case(rank, pg, DType::kU8, kLargeCount, false, 2);
    all_gather_case(rank, pg, DType::kBF16, kLargeCount, true, 3);
    all_gatherv_case(rank, pg, DType::kI32, kLargeCount, false, 4);
    gather_case(rank, pg, DType::kF64, kLargeCount / 2, last, 5);
    scatter_case(rank, pg, DType::kI8, kLargeCount, last, 6);
    all_to_all_case(rank, pg, DType::kF16, kLargeCount, 7);
    all_to_allv_case(rank, pg, DType::kI64, kLargeCount / 4, 8);
  });
}

INSTANTIATE_TEST_SUITE_P(World, LargeDataMovementTest, ::testing::Values(2, 3), world_name);

}  // namespace
}  // namespace tdist::pg_test
