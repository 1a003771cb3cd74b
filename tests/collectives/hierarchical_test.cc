// The hierarchical algorithms (hierarchy.h) on fake topologies over MemComm: every
// collective against a reference computed directly, for even (2x2, 3x2, 4x1), uneven
// (1+3, 2+1, 2+3+1 interleaved) and single-host layouts, every dtype and op, in place and
// out of place, counts 0, 1, not divisible by the world, and large enough for the
// bandwidth forms; the traffic that crosses hosts when kAuto picks them; SubComm and
// Hosts on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/coll_test_util.h"
#include "collectives/collectives.h"
#include "collectives/hierarchy.h"
#include "collectives/mem_comm.h"

namespace tdist::coll {
namespace {

using testing::compare;
using testing::make_input;
using testing::reference_reduce;
using testing::run_ranks;
using testing::run_ranks_ok;

Deadline op_deadline() { return Deadline::after(std::chrono::seconds(60)); }

struct Layout {
  const char* name;
  int world;
  std::vector<int> host_of;  // empty: unknown (one host)
};

const Layout kLayouts[] = {
    {"2x2", 4, {0, 0, 1, 1}},
    {"2x2_interleaved", 4, {0, 1, 0, 1}},
    {"3x2", 6, {0, 0, 1, 1, 2, 2}},
    {"1p3", 4, {0, 1, 1, 1}},
    {"2p1", 3, {0, 0, 1}},
    {"2p3p1_interleaved", 6, {0, 1, 1, 0, 1, 2}},
    {"4x1", 4, {0, 1, 2, 3}},
    {"one_host", 3, {0, 0, 0}},
    {"unknown", 2, {}},
};

// Bytes that identify (rank, index).
std::vector<uint8_t> pattern(int rank, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 31 + rank * 101 + 7);
  return out;
}

std::string describe(DType dtype, ReduceOp op, size_t count, bool in_place) {
  return std::string(dtype_name(dtype)) + " " + std::string(reduce_op_name(op.kind)) + " count " +
         std::to_string(count) + (in_place ? " in place" : "");
}

class HierarchicalTest : public ::testing::TestWithParam<Layout> {
 protected:
  // Runs fn on every rank of the layout, the Comm carrying its topology.
  void run(const std::function<void(transport::Comm&)>& fn) {
    const Layout& layout = GetParam();
    run_ranks_ok(layout.world, [&](transport::Comm& comm) {
      comm.set_topology(transport::Topology{layout.host_of});
      fn(comm);
    });
  }
  const CollectiveSettings settings_ = testing::chunk_settings(256);
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& p) { return p.param.name; }

void check_all_reduce(transport::Comm& comm, const Ctx& ctx, DType dtype, ReduceOp op, size_t count,
                      bool in_place) {
  const std::string what = describe(dtype, op, count, in_place);
  const std::vector<uint8_t> want = reference_reduce(comm.size(), count, dtype, op);
  const std::vector<uint8_t> input = make_input(comm.rank(), count, dtype, op.kind);
  std::vector<uint8_t> send = input;
  std::vector<uint8_t> recv(input.size(), 0xCD);
  if (in_place) {
    all_reduce(ctx, send.data(), send.data(), count, dtype, op, Algorithm::kHierarchical);
    recv = send;
  } else {
    all_reduce(ctx, send.data(), recv.data(), count, dtype, op, Algorithm::kHierarchical);
    ASSERT_EQ(send, input) << what << ": send was modified";
  }
  auto bad = compare(dtype, recv.data(), want.data(), count);
  ASSERT_FALSE(bad) << what << ": " << *bad;
}

TEST_P(HierarchicalTest, AllReduceEveryDtypeOpAndCount) {
  run([&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : testing::ops_for(dtype)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}}) {
          check_all_reduce(comm, Ctx{comm, seq, op_deadline(), settings_}, dtype, op, count,
                           seq % 2 == 0);
          ++seq;
        }
      }
    }
  });
}

// Above 32 KiB equal hosts run the bandwidth form (reduce-scatter, shards across hosts,
// all-gather); 17003 elements split unevenly over every host size here.
TEST_P(HierarchicalTest, AllReduceLargeVectors) {
  run([&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32}) {
      for (ReduceOp op : {ReduceOp(ReduceOpKind::kSum), ReduceOp(ReduceOpKind::kMax),
                          ReduceOp(ReduceOpKind::kAvg), ReduceOp::premul_sum(0.5)}) {
        if (!is_supported(op.kind, dtype)) continue;
        check_all_reduce(comm, Ctx{comm, seq, op_deadline(), testing::chunk_settings(4096)}, dtype,
                         op, 17003, seq % 2 == 0);
        ++seq;
      }
    }
  });
}

// Every rank ends with the same bits (random floats: association orders differ from the
// reference, never between ranks).
TEST_P(HierarchicalTest, AllReduceIsIdenticalOnEveryRank) {
  const Layout& layout = GetParam();
  std::vector<std::vector<double>> results(static_cast<size_t>(layout.world));
  for (size_t count : {size_t{100}, size_t{9001}}) {
    run([&](transport::Comm& comm) {
      std::vector<double> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = std::sin(i * 0.37 + comm.rank() * 1.3) * 100;
      all_reduce(Ctx{comm, 0, op_deadline(), settings_}, data.data(), data.data(), count,
                 DType::kF64, ReduceOpKind::kSum, Algorithm::kHierarchical);
      results[static_cast<size_t>(comm.rank())] = std::move(data);
    });
    for (const auto& r : results) ASSERT_EQ(r, results[0]) << "count " << count;
  }
}

TEST_P(HierarchicalTest, BroadcastEveryRootAndSize) {
  run([&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}, size_t{70001}}) {
      for (int root = 0; root < comm.size(); ++root) {
        std::vector<uint8_t> data =
            comm.rank() == root ? pattern(root, bytes) : std::vector<uint8_t>(bytes, 0);
        broadcast(Ctx{comm, seq++, op_deadline(), settings_}, data.data(), bytes, root,
                  Algorithm::kHierarchical);
        ASSERT_EQ(data, pattern(root, bytes)) << "bytes " << bytes << " root " << root;
      }
    }
  });
}

TEST_P(HierarchicalTest, ReduceEveryDtypeOpCountAndRoot) {
  run([&](transport::Comm& comm) {
    uint64_t seq = 0;
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : testing::ops_for(dtype)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}}) {
          const int root = static_cast<int>(seq % static_cast<uint64_t>(comm.size()));
          const std::vector<uint8_t> input = make_input(comm.rank(), count, dtype, op.kind);
          std::vector<uint8_t> send = input;
          std::vector<uint8_t> recv(input.size(), 0xAB);
          const bool is_root = comm.rank() == root;
          const bool in_place = is_root && seq % 3 == 0;
          void* out = is_root ? (in_place ? send.data() : recv.data()) : nullptr;
          reduce(Ctx{comm, seq++, op_deadline(), settings_}, send.data(), out, count, dtype, op,
                 root, Algorithm::kHierarchical);
          const std::string what =
              describe(dtype, op, count, in_place) + " root " + std::to_string(root);
          if (!in_place) {
            ASSERT_EQ(send, input) << what << ": send modified";
          }
          if (!is_root) continue;
          const std::vector<uint8_t> want = reference_reduce(comm.size(), count, dtype, op);
          auto bad = compare(dtype, static_cast<uint8_t*>(out), want.data(), count);
          ASSERT_FALSE(bad) << what << ": " << *bad;
        }
      }
    }
  });
}

TEST_P(HierarchicalTest, AllGatherEqualAndVariableSizes) {
  run([&](transport::Comm& comm) {
    const int world = comm.size();
    uint64_t seq = 0;
    std::vector<std::vector<size_t>> layouts;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{1023}, size_t{40000}}) {
      layouts.emplace_back(world, bytes);
    }
    std::vector<size_t> varied;
    for (int i = 0; i < world; ++i) varied.push_back(i % 3 == 1 ? 0 : 17 * i + 5);
    layouts.push_back(varied);
    for (const auto& sizes : layouts) {
      for (bool in_place : {false, true}) {
        size_t total = 0;
        size_t own_offset = 0;
        std::vector<uint8_t> want;
        for (int i = 0; i < world; ++i) {
          if (i == comm.rank()) own_offset = total;
          total += sizes[i];
          const std::vector<uint8_t> p = pattern(i, sizes[i]);
          want.insert(want.end(), p.begin(), p.end());
        }
        const std::vector<uint8_t> mine = pattern(comm.rank(), sizes[comm.rank()]);
        std::vector<uint8_t> recv(total, 0);
        std::vector<uint8_t> send = mine;
        if (in_place) std::copy(mine.begin(), mine.end(), recv.begin() + own_offset);
        all_gatherv(Ctx{comm, seq++, op_deadline(), settings_},
                    in_place ? recv.data() + own_offset : send.data(), recv.data(), sizes,
                    Algorithm::kHierarchical);
        ASSERT_EQ(recv, want) << "sizes[0] " << sizes[0] << " in_place " << in_place;
        ASSERT_EQ(send, mine);
      }
    }
  });
}

TEST_P(HierarchicalTest, ReduceScatterEveryDtypeOpAndCount) {
  run([&](transport::Comm& comm) {
    const size_t world = static_cast<size_t>(comm.size());
    uint64_t seq = 0;
    for (DType dtype : kAllDTypes) {
      const size_t es = dtype_size(dtype);
      for (ReduceOp op : testing::ops_for(dtype)) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{257}}) {
          const size_t total = count * world;
          const std::vector<uint8_t> input = make_input(comm.rank(), total, dtype, op.kind);
          const std::vector<uint8_t> want = reference_reduce(comm.size(), total, dtype, op);
          std::vector<uint8_t> send = input;
          std::vector<uint8_t> recv(count * es, 0xEE);
          const bool in_place = seq % 2 == 1;
          uint8_t* out = in_place ? send.data() + comm.rank() * count * es : recv.data();
          reduce_scatter(Ctx{comm, seq++, op_deadline(), settings_}, send.data(), out, count, dtype,
                         op, Algorithm::kHierarchical);
          const std::string what = describe(dtype, op, count, in_place);
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

TEST_P(HierarchicalTest, BarrierWaitsForEveryRank) {
  const int world = GetParam().world;
  std::atomic<int> entered{0};
  run([&](transport::Comm& comm) {
    for (uint64_t round = 0; round < 5; ++round) {
      if (comm.rank() == static_cast<int>(round % static_cast<uint64_t>(world))) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      entered.fetch_add(1);
      barrier(Ctx{comm, round, op_deadline(), settings_}, Algorithm::kHierarchical);
      EXPECT_GE(entered.load(), static_cast<int>((round + 1) * world));
    }
  });
}

// Back-to-back operations of every kind on kAuto (hierarchical where hosts > 1): their
// phases never match another operation's messages.
TEST_P(HierarchicalTest, MixedOperationsOnAuto) {
  run([&](transport::Comm& comm) {
    const int world = comm.size();
    for (uint64_t seq = 0; seq < 12; ++seq) {
      const Ctx ctx{comm, seq, op_deadline(), settings_};
      std::vector<float> v(50, static_cast<float>(comm.rank() + 1));
      all_reduce(ctx, v.data(), v.data(), v.size(), DType::kF32, ReduceOpKind::kSum);
      ASSERT_EQ(v[49], world * (world + 1) / 2.0f);
      std::vector<uint8_t> b = comm.rank() == 0 ? pattern(0, 999) : std::vector<uint8_t>(999);
      broadcast(Ctx{comm, ++seq, op_deadline(), settings_}, b.data(), b.size(), 0);
      ASSERT_EQ(b, pattern(0, 999));
      barrier(Ctx{comm, ++seq, op_deadline(), settings_});
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalTest, ::testing::ValuesIn(kLayouts), layout_name);

// A Comm that counts what its rank sends to ranks on other hosts (by its topology).
class CountingComm : public transport::Comm {
 public:
  CountingComm(transport::Comm& inner, std::atomic<size_t>& bytes, std::atomic<size_t>& messages)
      : inner_(inner), bytes_(bytes), messages_(messages) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  transport::RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    const auto& host_of = topology().host_of;
    if (host_of[static_cast<size_t>(peer)] != host_of[static_cast<size_t>(rank())]) {
      bytes_ += bytes;
      ++messages_;
    }
    return inner_.isend(peer, tag, data, bytes);
  }
  transport::RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.irecv(peer, tag, data, bytes);
  }
  void abort(std::exception_ptr reason) override { inner_.abort(std::move(reason)); }
  std::exception_ptr error() const override { return inner_.error(); }

 private:
  transport::Comm& inner_;
  std::atomic<size_t>& bytes_;
  std::atomic<size_t>& messages_;
};

struct Traffic {
  size_t bytes = 0;
  size_t messages = 0;
};

// Runs fn on `host_of`'s ranks over CountingComms; returns the inter-host traffic.
Traffic inter_host(const std::vector<int>& host_of, const std::function<void(const Ctx&)>& fn) {
  std::atomic<size_t> bytes{0};
  std::atomic<size_t> messages{0};
  run_ranks_ok(static_cast<int>(host_of.size()), [&](transport::Comm& mem) {
    CountingComm comm(mem, bytes, messages);
    comm.set_topology(transport::Topology{host_of});
    fn(Ctx{comm, 0, op_deadline(), testing::chunk_settings(1 << 20)});
  });
  return {bytes.load(), messages.load()};
}

// kAuto on a group spanning hosts picks the hierarchical forms: each byte crosses to a
// host once (broadcast, reduce, all_gather), an all_reduce's ranks send a shard each.
TEST(HierarchicalTraffic, AutoCrossesHostsOnlyAsMuchAsNeeded) {
  const std::vector<int> interleaved{0, 1, 0, 1};
  const std::vector<int> three_hosts{0, 0, 1, 1, 2, 2};
  const size_t bytes = 10000;
  auto bcast = [&](const Ctx& ctx) {
    std::vector<uint8_t> data(bytes, 1);
    broadcast(ctx, data.data(), bytes, 1);
  };
  EXPECT_EQ(inter_host(interleaved, bcast).bytes, bytes);
  EXPECT_EQ(inter_host(three_hosts, bcast).bytes, 2 * bytes);
  auto red = [&](const Ctx& ctx) {
    std::vector<uint8_t> data(bytes, 1);
    std::vector<uint8_t> out(bytes);
    reduce(ctx, data.data(), out.data(), bytes, DType::kU8, ReduceOpKind::kMax, 3);
  };
  EXPECT_EQ(inter_host(three_hosts, red).bytes, 2 * bytes);
  auto gather = [&](const Ctx& ctx) {
    std::vector<uint8_t> mine(bytes, 1);
    std::vector<uint8_t> all(bytes * static_cast<size_t>(ctx.comm.size()));
    const std::vector<size_t> sizes(static_cast<size_t>(ctx.comm.size()), bytes);
    all_gatherv(ctx, mine.data(), all.data(), sizes);
  };
  // Each host receives the other hosts' blocks once.
  EXPECT_EQ(inter_host(interleaved, gather).bytes, 4 * bytes);
  EXPECT_EQ(inter_host(three_hosts, gather).bytes, 12 * bytes);
  // 2x2, large: each rank's shard (half the vector) goes across, and half of it comes
  // back reduced (flat ring on this layout: 1.5 vectors from every rank).
  const size_t count = 65536;
  auto allred = [&](const Ctx& ctx) {
    std::vector<float> v(count, 1.0f);
    all_reduce(ctx, v.data(), v.data(), count, DType::kF32, ReduceOpKind::kSum);
    EXPECT_EQ(v[count - 1], 4.0f);
  };
  EXPECT_EQ(inter_host(interleaved, allred).bytes, 4 * (count * 4 / 2));
  auto rs = [&](const Ctx& ctx) {
    std::vector<float> v(count * 4, 1.0f);
    std::vector<float> out(count);
    reduce_scatter(ctx, v.data(), out.data(), count, DType::kF32, ReduceOpKind::kSum);
    EXPECT_EQ(out[0], 4.0f);
  };
  // Each rank sends the other host's partial of its column: one block.
  EXPECT_EQ(inter_host(interleaved, rs).bytes, 4 * count * 4);
  // Barrier: only the leaders' dissemination crosses hosts.
  EXPECT_EQ(inter_host(three_hosts, [](const Ctx& ctx) { barrier(ctx); }).messages, 6u);
  // Forced flat ring: every link of the ring crosses hosts.
  auto ring = [&](const Ctx& ctx) {
    std::vector<float> v(count, 1.0f);
    all_reduce(ctx, v.data(), v.data(), count, DType::kF32, ReduceOpKind::kSum, Algorithm::kRing);
  };
  EXPECT_EQ(inter_host(interleaved, ring).bytes, 4 * (2 * 3 * (count / 4) * 4));
}

TEST(HierarchicalFailure, MissingRankTimesOutAndAbortsOnEveryRank) {
  auto errors = run_ranks(4, [](transport::Comm& comm) {
    comm.set_topology(transport::Topology{{0, 0, 1, 1}});
    if (comm.rank() == 3) return;  // never joins
    std::vector<float> data(100000, 1.0f);
    all_reduce(Ctx{comm, 0, Deadline::after(std::chrono::milliseconds(300))}, data.data(),
               data.data(), data.size(), DType::kF32, ReduceOpKind::kSum, Algorithm::kHierarchical);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const TimeoutError&) {
    } catch (const PeerError&) {  // aborted by another rank's timeout first
    }
  }
}

// The bandwidth form in segments overlapped by run_overlapped (small chunks: 8 segments),
// with 2 and 3 ranks per host, in place and not, and an op finished per segment (avg).
TEST(HierarchicalPipeline, SegmentsMatchTheReference) {
  for (const Layout& layout : {Layout{"2x2", 4, {0, 0, 1, 1}}, Layout{"2x3", 6, {0, 0, 0, 1, 1, 1}},
                               Layout{"3x2_interleaved", 6, {0, 1, 2, 0, 1, 2}}}) {
    SCOPED_TRACE(layout.name);
    run_ranks_ok(layout.world, [&](transport::Comm& comm) {
      comm.set_topology(transport::Topology{layout.host_of});
      core::HelperThread helper;  // as a group lends its own
      uint64_t seq = 0;
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (ReduceOp op : {ReduceOp(ReduceOpKind::kSum), ReduceOp(ReduceOpKind::kAvg),
                            ReduceOp(ReduceOpKind::kMax)}) {
          for (bool in_place : {false, true}) {
            Ctx ctx{comm, seq++, op_deadline(), testing::chunk_settings(256)};
            ctx.helper = &helper;
            check_all_reduce(comm, ctx, dtype, op, 40009, in_place);
          }
        }
      }
    });
  }
}

TEST(HierarchicalPipeline, RunOverlappedKeepsThePhaseOrder) {
  testing::MemWorld world(1);
  testing::MemComm comm(world, 0);
  std::mutex mu;
  std::vector<std::string> events;
  auto note = [&](const char* phase, size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(phase + std::to_string(k));
  };
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> middle_on_caller{false};
  core::HelperThread helper;
  detail::run_overlapped(
      comm, &helper, 4, [&](size_t k) { note("b", k); },
      [&](size_t k) {
        if (std::this_thread::get_id() == caller) middle_on_caller = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        note("m", k);
      },
      [&](size_t k) { note("a", k); });
  EXPECT_FALSE(middle_on_caller);
  auto index = [&](const std::string& e) {
    return std::find(events.begin(), events.end(), e) - events.begin();
  };
  ASSERT_EQ(events.size(), 12U);
  std::vector<std::string> caller_order;
  for (const std::string& e : events) {
    if (e[0] != 'm') caller_order.push_back(e);
  }
  EXPECT_EQ(caller_order,
            (std::vector<std::string>{"b0", "b1", "a0", "b2", "a1", "b3", "a2", "a3"}));
  for (size_t k = 0; k < 4; ++k) {
    const std::string n = std::to_string(k);
    EXPECT_LT(index("b" + n), index("m" + n));
    EXPECT_LT(index("m" + n), index("a" + n));
    if (k > 0) {
      EXPECT_LT(index("m" + std::to_string(k - 1)), index("m" + n));
    }
  }
}

// One helper serves every operation of its owner: the middle phases of two operations run
// on the same thread, not on one started for each.
TEST(HierarchicalPipeline, OperationsShareTheGroupsHelperThread) {
  testing::MemWorld world(1);
  testing::MemComm comm(world, 0);
  core::HelperThread helper;
  std::vector<std::thread::id> middles;  // written only by the helper, read after join
  auto run = [&] {
    detail::run_overlapped(
        comm, &helper, 3, [](size_t) {},
        [&](size_t) { middles.push_back(std::this_thread::get_id()); }, [](size_t) {});
  };
  run();
  run();
  ASSERT_EQ(middles.size(), 6U);
  for (const std::thread::id& id : middles) {
    EXPECT_EQ(id, middles.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

// Without a helper (an algorithm called outside a group) the phases run in turn on the
// calling thread, segment by segment.
TEST(HierarchicalPipeline, WithoutAHelperThePhasesRunInTurn) {
  testing::MemWorld world(1);
  testing::MemComm comm(world, 0);
  std::vector<std::string> events;
  const auto caller = std::this_thread::get_id();
  bool elsewhere = false;
  auto note = [&](const char* phase, size_t k) {
    if (std::this_thread::get_id() != caller) elsewhere = true;
    events.push_back(phase + std::to_string(k));
  };
  detail::run_overlapped(
      comm, nullptr, 2, [&](size_t k) { note("b", k); }, [&](size_t k) { note("m", k); },
      [&](size_t k) { note("a", k); });
  EXPECT_FALSE(elsewhere);
  EXPECT_EQ(events, (std::vector<std::string>{"b0", "m0", "a0", "b1", "m1", "a1"}));
}

TEST(HierarchicalPipeline, AFailureOnEitherThreadIsRethrownAndAbortsTheComm) {
  for (const bool in_middle : {true, false}) {
    testing::MemWorld world(1);
    testing::MemComm comm(world, 0);
    std::atomic<int> afters{0};
    std::atomic<int> middles{0};
    auto boom = [](size_t k) { throw InvalidArgument("segment " + std::to_string(k)); };
    core::HelperThread helper;
    try {
      detail::run_overlapped(
          comm, &helper, 5,
          [&](size_t k) {
            if (!in_middle && k == 2) boom(k);
          },
          [&](size_t k) {
            ++middles;
            if (in_middle && k == 1) boom(k);
          },
          [&](size_t) { ++afters; });
      ADD_FAILURE() << "no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_STREQ(e.what(), in_middle ? "segment 1" : "segment 2");
    }
    EXPECT_NE(comm.error(), nullptr);
    // b0 b1 a0, then b2 fails; or m1 fails, and the caller, waiting for m0 or m1, runs a0
    // or not (a failure may stop it before) but never a1.
    if (in_middle) {
      EXPECT_LE(afters.load(), 1);
    } else {
      EXPECT_EQ(afters.load(), 1);
    }
    EXPECT_LE(middles.load(), 2);
  }
}

TEST(HierarchicalFailure, MissingRankFailsEveryRankWhenPipelined) {
  auto errors = run_ranks(4, [](transport::Comm& comm) {
    comm.set_topology(transport::Topology{{0, 0, 1, 1}});
    if (comm.rank() == 3) return;  // never joins
    std::vector<float> data(100000, 1.0f);
    all_reduce(Ctx{comm, 0, Deadline::after(std::chrono::milliseconds(300)),
                   testing::chunk_settings(1024)},
               data.data(), data.data(), data.size(), DType::kF32, ReduceOpKind::kSum,
               Algorithm::kHierarchical);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const TimeoutError&) {
    } catch (const PeerError&) {
    }
  }
}

TEST(SubComm, RenumbersRanksAndMovesTagsIntoItsPhase) {
  run_ranks_ok(4, [](transport::Comm& comm) {
    const uint64_t seq = 5;
    if (comm.rank() == 3 || comm.rank() == 1) {
      detail::SubComm view(comm, {3, 1}, 2);
      EXPECT_EQ(view.size(), 2);
      EXPECT_EQ(view.rank(), comm.rank() == 3 ? 0 : 1);
      EXPECT_EQ(view.parent_rank(1), 1);
      if (comm.rank() == 3) {
        int v = 42;
        view.isend(1, transport::collective_tag(seq, 7), &v, sizeof v)->wait(op_deadline());
        // A step that does not fit below the phase bits, a p2p tag, a bad peer.
        EXPECT_THROW(view.isend(1, transport::collective_tag(seq, 1u << 20), &v, 0),
                     InvalidArgument);
        EXPECT_THROW(view.isend(1, transport::p2p_tag(1), &v, 0), InvalidArgument);
        EXPECT_THROW(view.isend(2, transport::collective_tag(seq, 0), &v, 0), InvalidArgument);
      } else {
        int v = 0;  // arrives on the parent with step (2 << 20) | 7, from parent rank 3
        comm.irecv(3, transport::collective_tag(seq, (2u << 20) | 7), &v, sizeof v)
            ->wait(op_deadline());
        EXPECT_EQ(v, 42);
      }
    }
    EXPECT_THROW(detail::SubComm(comm, {0, 1}, 0), InvalidArgument);
    EXPECT_THROW(detail::SubComm(comm, {0, 1, 2, 3}, 16), InvalidArgument);
    if (comm.rank() == 2) {
      EXPECT_THROW(detail::SubComm(comm, {0, 1}, 1), InvalidArgument);
    }
  });
}

TEST(SubComm, AbortAndErrorAreTheParents) {
  run_ranks(2, [](transport::Comm& comm) {
    detail::SubComm view(comm, {0, 1}, 1);
    if (comm.rank() == 0) view.abort(nullptr);
    while (view.error() == nullptr) std::this_thread::yield();
    EXPECT_NE(comm.error(), nullptr);
  });
}

TEST(Hosts, FromTopology) {
  run_ranks_ok(6, [](transport::Comm& comm) {
    comm.set_topology(transport::Topology{{0, 1, 1, 0, 1, 2}});
    const detail::Hosts h = detail::Hosts::of(comm);
    EXPECT_EQ(h.count(), 3);
    EXPECT_FALSE(h.uniform);
    EXPECT_EQ(h.ranks, (std::vector<std::vector<int>>{{0, 3}, {1, 2, 4}, {5}}));
    EXPECT_EQ(h.column(1), (std::vector<int>{3, 2}));
    EXPECT_EQ(h.column(2), (std::vector<int>{4}));
    EXPECT_EQ(h.representatives(2), (std::vector<int>{0, 2, 5}));
    EXPECT_EQ(h.representatives(0), (std::vector<int>{0, 1, 5}));
    const int expected_local[] = {0, 0, 1, 1, 2, 0};
    EXPECT_EQ(h.local, expected_local[comm.rank()]);
    EXPECT_EQ(h.host, (std::vector<int>{0, 1, 1, 0, 1, 2})[static_cast<size_t>(comm.rank())]);
  });
  run_ranks_ok(3, [](transport::Comm& comm) {
    const detail::Hosts one = detail::Hosts::of(comm);  // unknown: one host
    EXPECT_EQ(one.count(), 1);
    EXPECT_EQ(one.local, comm.rank());
    comm.set_topology(transport::Topology{{0, 1}});
    EXPECT_THROW(detail::Hosts::of(comm), InvalidArgument);
  });
}

}  // namespace
}  // namespace tdist::coll
