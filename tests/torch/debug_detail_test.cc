// TDIST_DEBUG=detail in the torch layer: the tensors' shapes join each collective's
// fingerprint, so ranks that pass the same number of elements in other shapes get a
// DesyncError quoting both shapes (without it, the collective runs on the flat buffers),
// and the group goes on. Ranks as threads over the backend under test.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "torch/collectives_test_util.h"

namespace tdist::torch::coll_test {
namespace {

// Read by each group when it is made (ProcessGroup::debug_detail()): set before any is.
const bool kDetail = ::setenv("TDIST_DEBUG", "detail", 1) == 0;

std::string desync_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const DesyncError& x) {
    return x.what();
  } catch (const std::exception& x) {
    return std::string("not a DesyncError: ") + x.what();
  }
}

TEST(DebugDetail, SameCountOtherShapeIsADesyncErrorNamingBothShapes) {
  ASSERT_TRUE(kDetail);
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  ASSERT_TRUE(world.shared(0)->debug_detail());
  auto errors = world.run_collect([&](int rank, ProcessGroup&) {
    const PG& pg = world.shared(rank);
    Tensor t = rank == 0 ? ::torch::ones({32, 32}) : ::torch::ones({1024});
    all_reduce(t, ReduceOpKind::kSum, pg);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string text = desync_text(errors[static_cast<size_t>(r)]);
    // detail includes the call site, last: both ranks called from one line here.
    EXPECT_NE(text.find("rank 0 called all_reduce #0 f32 x1024 sum shape [32, 32] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << "rank " << r << ": " << text;
    EXPECT_NE(text.find("; rank 1 called all_reduce #0 f32 x1024 sum shape [1024] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << "rank " << r << ": " << text;
  }
  // The same shapes then: it runs (nothing was sent before).
  world.run([&](int rank, ProcessGroup&) {
    const PG& pg = world.shared(rank);
    Tensor t = ::torch::full({4, 8}, static_cast<float>(rank + 1));
    all_reduce(t, ReduceOpKind::kSum, pg);
    EXPECT_TRUE(t.eq(3.0f).all().item<bool>());
    Tensor out = ::torch::zeros({2, 4, 8});
    all_gather_into_tensor(out, t, pg);
    EXPECT_TRUE(out.eq(3.0f).all().item<bool>());
  });
}

TEST(DebugDetail, TheShapesOfBroadcastAndScatterAreCompared) {
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  auto errors = world.run_collect([&](int rank, ProcessGroup&) {
    const PG& pg = world.shared(rank);
    Tensor t = rank == 0 ? ::torch::zeros({6, 2}) : ::torch::zeros({3, 4});
    broadcast(t, 0, pg);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string text = desync_text(errors[static_cast<size_t>(r)]);
    EXPECT_NE(text.find("called broadcast #0 f32 x12 root 0 shape [6, 2] at debug_detail_test.cc:"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("; rank 1 called broadcast #0 f32 x12 root 0 shape [3, 4] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << text;
  }
  errors = world.run_collect([&](int rank, ProcessGroup&) {
    const PG& pg = world.shared(rank);
    Tensor out = rank == 0 ? ::torch::zeros({2, 3}) : ::torch::zeros({6});
    std::vector<Tensor> list;
    if (rank == 0) list = {::torch::ones({2, 3}), ::torch::ones({2, 3})};
    scatter(out, list, 0, pg);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string text = desync_text(errors[static_cast<size_t>(r)]);
    EXPECT_NE(text.find("shape [2, 3] at debug_detail_test.cc:"), std::string::npos) << text;
    EXPECT_NE(text.find("; rank 1 called scatter #0 f32 x6 root 0 shape [6] at "
                        "debug_detail_test.cc:"),
              std::string::npos)
        << text;
  }
}

}  // namespace
}  // namespace tdist::torch::coll_test
