// Comm conformance, collectives: the collective algorithms, unchanged, over every
// transport of comm_factories.h (ranks as threads): all_reduce with every algorithm on 2
// and 3 ranks against a reference fold, small and large (many rings' worth), and a
// broadcast of a large buffer from every root.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "collectives/all_reduce.h"
#include "collectives/broadcast.h"
#include "collectives/coll_test_util.h"
#include "comm_conformance.h"

namespace tdist::transport::testing {
namespace {

using tdist::testing::compare;
using tdist::testing::make_input;
using tdist::testing::reference_reduce;

class CommCollectivesTest : public CommTest {};

// kSlots runs where the transport has slots (shm) and the vector fits; elsewhere the
// size's algorithm stands in.
constexpr coll::Algorithm kAlgos[] = {coll::Algorithm::kRing, coll::Algorithm::kHalvingDoubling,
                                      coll::Algorithm::kRecursiveDoubling, coll::Algorithm::kSlots};

// Small counts for every combination; a large one (many rings' worth) for f32 sum.
TEST_P(CommCollectivesTest, AllReduceEveryAlgorithmMatchesTheReference) {
  struct Case {
    DType dtype;
    ReduceOp op;
    size_t count;
  };
  std::vector<Case> cases;
  for (DType dtype : {DType::kF32, DType::kI64, DType::kBF16}) {
    for (ReduceOp op : {ReduceOp(ReduceOpKind::kSum), ReduceOp(ReduceOpKind::kMax)}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1023}}) cases.push_back({dtype, op, count});
    }
  }
  cases.push_back({DType::kF32, ReduceOp(ReduceOpKind::kSum), (size_t{1} << 20) + 7});
  for (int world : {2, 3}) {
    std::vector<std::vector<uint8_t>> wants;
    for (const Case& c : cases) wants.push_back(reference_reduce(world, c.count, c.dtype, c.op));
    run(world, [&](Comm& comm) {
      uint64_t seq = 0;
      for (coll::Algorithm algo : kAlgos) {
        for (size_t i = 0; i < cases.size(); ++i) {
          const Case& c = cases[i];
          auto data = make_input(comm.rank(), c.count, c.dtype, c.op.kind);
          coll::all_reduce(coll::Ctx{comm, seq++, op_deadline()}, data.data(), data.data(), c.count,
                           c.dtype, c.op, algo);
          auto bad = compare(c.dtype, data.data(), wants[i].data(), c.count);
          ASSERT_FALSE(bad) << coll::algorithm_name(algo) << " " << dtype_name(c.dtype) << " "
                            << reduce_op_name(c.op.kind) << " count " << c.count << " world "
                            << world << ": " << *bad;
        }
      }
    });
  }
}

TEST_P(CommCollectivesTest, BroadcastOfSeveralRings) {
  const size_t bytes = 9 * kTestRingBytes + 1;
  run(3, [&](Comm& comm) {
    for (int root = 0; root < 3; ++root) {
      std::vector<uint8_t> data =
          comm.rank() == root ? pattern(root, bytes) : std::vector<uint8_t>(bytes);
      coll::broadcast(coll::Ctx{comm, static_cast<uint64_t>(root), op_deadline()}, data.data(),
                      bytes, root);
      ASSERT_EQ(data, pattern(root, bytes)) << "root " << root;
    }
  });
}

TDIST_FOR_EVERY_COMM_FACTORY(CommCollectivesTest);

}  // namespace
}  // namespace tdist::transport::testing
