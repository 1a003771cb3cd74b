// Every collective of the process group on real processes under mpirun: all_reduce,
// reduce and reduce_scatter for every dtype x every op valid for it x counts 0, 1, 3,
// 1023, 4099 (in and out of place, every root), against the independent reference of
// tests/pg/pg_reduce_ref.h; broadcast, all_gather(v), gather, scatter, all_to_all(v) and
// barrier for every dtype and count, with byte patterns that name the sending rank and
// block. Buffers carry guard bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "mpi/mpi_suite.h"
// g++ 12 inlines Buffer's constructor here and cannot rule out a size wrapping to zero
// (false -Warray-bounds and -Wstringop-overflow on its guard memset).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
#include "pg/pg_reduce_ref.h"
#include "pg/pg_test_util.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace tdist::mpi_test {
namespace {

using pg_test::Buffer;
using pg_test::case_name;

constexpr size_t kCounts[] = {0, 1, 3, 1023, 4099};

void fail(const char* coll, const std::string& name, const std::string& what) {
  ADD_FAILURE() << "rank " << world().rank() << ": " << coll << " " << name << ": " << what;
}

void check_guards(const char* coll, const std::string& name, const Buffer& a, const Buffer& b) {
  if (!a.guards_intact() || !b.guards_intact()) fail(coll, name, "guard bytes were overwritten");
}

TEST(MpiSuiteReduction, AllReduceEveryDtypeOpAndCount) {
  ProcessGroup& pg = world();
  uint64_t seed = 1;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : pg_test::ops_for(t)) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          const std::string name = case_name(t, op, count, in_place);
          ++seed;
          Buffer send(t, count);
          Buffer recv(t, count);
          pg_test::fill_inputs(t, op, pg.rank(), send.data(), count, 0, seed);
          Buffer& out = in_place ? send : recv;
          pg.all_reduce(send.data(), out.data(), count, t, op)->wait();
          if (!in_place && !pg_test::inputs_intact(t, op, pg.rank(), send.data(), count, 0, seed)) {
            fail("all_reduce", name, "the send buffer was modified");
          }
          std::string bad = pg_test::check_reduction(t, op, pg.size(), out.data(), count, 0, seed);
          if (!bad.empty()) fail("all_reduce", name, bad);
          check_guards("all_reduce", name, send, recv);
        }
      }
    }
  }
}

TEST(MpiSuiteReduction, ReduceEveryDtypeOpCountAndRoot) {
  ProcessGroup& pg = world();
  uint64_t seed = 1000;
  int root = 0;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : pg_test::ops_for(t)) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          root = (root + 1) % pg.size();
          ++seed;
          const std::string name =
              case_name(t, op, count, in_place) + "/root=" + std::to_string(root);
          Buffer send(t, count);
          Buffer recv(t, count);
          pg_test::fill_inputs(t, op, pg.rank(), send.data(), count, 0, seed);
          const bool is_root = pg.rank() == root;
          // Off the root recv may be null: alternate between null and a buffer.
          void* out = in_place ? send.data() : (is_root || seed % 2 == 0 ? recv.data() : nullptr);
          pg.reduce(send.data(), out, count, t, op, root)->wait();
          if (is_root) {
            std::string bad = pg_test::check_reduction(t, op, pg.size(), out, count, 0, seed);
            if (!bad.empty()) fail("reduce", name, bad);
          } else if (!pg_test::inputs_intact(t, op, pg.rank(), send.data(), count, 0, seed)) {
            fail("reduce", name, "a non-root's send buffer was modified");
          }
          check_guards("reduce", name, send, recv);
        }
      }
    }
  }
}

TEST(MpiSuiteReduction, ReduceScatterEveryDtypeOpAndCount) {
  ProcessGroup& pg = world();
  const size_t n = static_cast<size_t>(pg.size());
  uint64_t seed = 2000;
  for (DType t : kAllDTypes) {
    for (ReduceOp op : pg_test::ops_for(t)) {
      for (size_t count : kCounts) {
        ++seed;
        const std::string name = case_name(t, op, count, false);
        Buffer send(t, n * count);
        Buffer recv(t, count);
        pg_test::fill_inputs(t, op, pg.rank(), send.data(), n * count, 0, seed);
        pg.reduce_scatter(send.data(), recv.data(), count, t, op)->wait();
        if (!pg_test::inputs_intact(t, op, pg.rank(), send.data(), n * count, 0, seed)) {
          fail("reduce_scatter", name, "the send buffer was modified");
        }
        std::string bad = pg_test::check_reduction(t, op, pg.size(), recv.data(), count,
                                                   static_cast<size_t>(pg.rank()) * count, seed);
        if (!bad.empty()) fail("reduce_scatter", name, bad);
        check_guards("reduce_scatter", name, send, recv);
      }
    }
  }
}

// ---- data movement ------------------------------------------------------------------

std::string name_of(DType t, size_t count, const std::string& extra = "") {
  return std::string(dtype_name(t)) + "/n=" + std::to_string(count) + extra;
}

void expect_block(const char* coll, const std::string& name, const uint8_t* p, size_t bytes,
                  uint64_t seed, int src, int dst) {
  const int64_t at = pg_test::pattern_mismatch(p, bytes, seed, src, dst);
  if (at >= 0) {
    fail(coll, name,
         "block from rank " + std::to_string(src) + " differs at byte " + std::to_string(at));
  }
}

TEST(MpiSuiteDataMovement, BroadcastGatherScatterEveryDtypeCountAndRoot) {
  ProcessGroup& pg = world();
  const int me = pg.rank();
  const int n = pg.size();
  uint64_t seed = 1;
  int root = 0;
  for (DType t : kAllDTypes) {
    for (size_t count : kCounts) {
      root = (root + 1) % n;
      const size_t bytes = count * dtype_size(t);
      const std::string name = name_of(t, count, "/root=" + std::to_string(root));
      Buffer data(t, count);
      if (me == root)
        pg_test::fill_pattern(data.data(), bytes, ++seed, root, 0);
      else
        ++seed;
      pg.broadcast(data.data(), count, t, root)->wait();
      expect_block("broadcast", name, data.data(), bytes, seed, root, 0);

      Buffer send(t, count);
      Buffer all(t, count * static_cast<size_t>(n));
      pg_test::fill_pattern(send.data(), bytes, ++seed, me, 0);
      pg.gather(send.data(), me == root ? all.data() : nullptr, count, t, root)->wait();
      for (int r = 0; me == root && r < n; ++r) {
        expect_block("gather", name, all.data() + static_cast<size_t>(r) * bytes, bytes, seed, r,
                     0);
      }

      Buffer part(t, count);
      ++seed;
      for (int r = 0; me == root && r < n; ++r) {
        pg_test::fill_pattern(all.data() + static_cast<size_t>(r) * bytes, bytes, seed, root, r);
      }
      pg.scatter(me == root ? all.data() : nullptr, part.data(), count, t, root)->wait();
      expect_block("scatter", name, part.data(), bytes, seed, root, me);
      check_guards("broadcast/gather/scatter", name, data, send);
      check_guards("gather/scatter", name, all, part);
    }
  }
}

TEST(MpiSuiteDataMovement, AllGatherAndAllGathervEveryDtypeCountInAndOutOfPlace) {
  ProcessGroup& pg = world();
  const int me = pg.rank();
  const int n = pg.size();
  uint64_t seed = 100;
  for (DType t : kAllDTypes) {
    const size_t es = dtype_size(t);
    for (size_t count : kCounts) {
      for (bool in_place : {false, true}) {
        const std::string name = name_of(t, count, in_place ? "/in-place" : "");
        ++seed;
        Buffer send(t, count);
        Buffer recv(t, count * static_cast<size_t>(n));
        uint8_t* mine = in_place ? recv.at(static_cast<size_t>(me) * count) : send.data();
        pg_test::fill_pattern(mine, count * es, seed, me, 0);
        pg.all_gather(mine, recv.data(), count, t)->wait();
        for (int r = 0; r < n; ++r) {
          expect_block("all_gather", name, recv.at(static_cast<size_t>(r) * count), count * es,
                       seed, r, 0);
        }
        check_guards("all_gather", name, send, recv);

        // Variable blocks with zeros: rank r contributes counts[r] elements.
        ++seed;
        std::vector<size_t> counts;
        for (int r = 0; r < n; ++r) {
          const uint64_t h = pg_test::mix(seed, static_cast<uint64_t>(r), 0xC0);
          counts.push_back(h % 3 == 0 ? 0 : count + h % 5);
        }
        std::vector<size_t> offsets(counts.size(), 0);
        std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t{0});
        const size_t mine_n = counts[static_cast<size_t>(me)];
        Buffer vsend(t, mine_n);
        Buffer vrecv(t, offsets.back() + counts.back());
        uint8_t* src = in_place ? vrecv.at(offsets[static_cast<size_t>(me)]) : vsend.data();
        pg_test::fill_pattern(src, mine_n * es, seed, me, 0);
        pg.all_gatherv(src, mine_n, vrecv.data(), counts, t)->wait();
        for (int r = 0; r < n; ++r) {
          expect_block("all_gatherv", name, vrecv.at(offsets[static_cast<size_t>(r)]),
                       counts[static_cast<size_t>(r)] * es, seed, r, 0);
        }
        check_guards("all_gatherv", name, vsend, vrecv);
      }
    }
  }
}

void all_to_all_case(ProcessGroup& pg, DType t, size_t count, bool in_place, uint64_t seed) {
  const int me = pg.rank();
  const int n = pg.size();
  const size_t es = dtype_size(t);
  const std::string name = name_of(t, count, in_place ? "/in-place" : "");
  Buffer send(t, count * static_cast<size_t>(n));
  Buffer recv(t, count * static_cast<size_t>(n));
  Buffer& src = in_place ? recv : send;
  for (int p = 0; p < n; ++p) {
    pg_test::fill_pattern(src.at(static_cast<size_t>(p) * count), count * es, seed, me, p);
  }
  pg.all_to_all(src.data(), recv.data(), count, t)->wait();
  for (int p = 0; p < n; ++p) {
    expect_block("all_to_all", name, recv.at(static_cast<size_t>(p) * count), count * es, seed, p,
                 me);
  }
  check_guards("all_to_all", name, send, recv);
}

TEST(MpiSuiteDataMovement, AllToAllAndAllToAllvEveryDtypeCountInAndOutOfPlace) {
  ProcessGroup& pg = world();
  const int me = pg.rank();
  const int n = pg.size();
  uint64_t seed = 200;
  for (DType t : kAllDTypes) {
    const size_t es = dtype_size(t);
    for (size_t count : kCounts) {
      all_to_all_case(pg, t, count, /*in_place=*/false, ++seed);
      all_to_all_case(pg, t, count, /*in_place=*/true, ++seed);  // send == recv
      ++seed;
      auto a2av = [&](int src, int dst) {
        const uint64_t h =
            pg_test::mix(seed, static_cast<uint64_t>(src), static_cast<uint64_t>(dst), 0xA2);
        return h % 4 == 0 ? size_t{0} : count + h % 7;
      };
      std::vector<size_t> sc, rc;
      for (int p = 0; p < n; ++p) {
        sc.push_back(a2av(me, p));
        rc.push_back(a2av(p, me));
      }
      Buffer send(t, std::accumulate(sc.begin(), sc.end(), size_t{0}));
      Buffer recv(t, std::accumulate(rc.begin(), rc.end(), size_t{0}));
      size_t off = 0;
      for (int p = 0; p < n; ++p) {
        pg_test::fill_pattern(send.at(off), sc[static_cast<size_t>(p)] * es, seed, me, p);
        off += sc[static_cast<size_t>(p)];
      }
      pg.all_to_allv(send.data(), sc, recv.data(), rc, t)->wait();
      off = 0;
      const std::string name = name_of(t, count, "/v");
      for (int p = 0; p < n; ++p) {
        expect_block("all_to_allv", name, recv.at(off), rc[static_cast<size_t>(p)] * es, seed, p,
                     me);
        off += rc[static_cast<size_t>(p)];
      }
      check_guards("all_to_allv", name, send, recv);
    }
  }
}

TEST(MpiSuiteDataMovement, BarrierHoldsEveryRankUntilAllArrived) {
  ProcessGroup& pg = world();
  // Each rank marks its arrival in the store before the barrier (one rank late each
  // round); after it, every mark must be there: a barrier that let a rank out early
  // would show a missing one.
  for (int round = 0; round < 10; ++round) {
    if (round % pg.size() == pg.rank()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string base = "mpi_suite/barrier/" + std::to_string(round) + "/";
    pg.store()->set(base + std::to_string(pg.rank()), "here");
    pg.barrier()->wait();
    std::vector<std::string> keys;
    for (int r = 0; r < pg.size(); ++r) keys.push_back(base + std::to_string(r));
    EXPECT_TRUE(pg.store()->check(keys))
        << "rank " << pg.rank() << " left barrier " << round << " before every rank arrived";
  }
}

}  // namespace
}  // namespace tdist::mpi_test
