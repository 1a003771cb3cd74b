// Tensor collectives over the "tcp" backend with ranks as threads (worlds 1-4): every
// function x dtypes (f32 f16 bf16 i64 bool) x ops, inputs and outputs contiguous,
// transposed and sliced with a step (the memory around a slice stays untouched), in-place
// and aliased forms, async forms (copy-back inside wait/is_completed, a bounded wait that
// times out, dropped Works), sub-groups, the default group, and bad input, which must
// fail before anything is sent (the group still works after). Expected values come from
// torch ops over every rank's input, computed in the test.
#include "tdist/torch/collectives.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/distributed.h"
#include "tdist/hash_store.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

using pg_test::ThreadWorld;
using ::torch::Tensor;
using PG = std::shared_ptr<ProcessGroup>;

const c10::ScalarType kTypes[] = {::torch::kFloat, ::torch::kHalf, ::torch::kBFloat16,
                                  ::torch::kLong, ::torch::kBool};

constexpr int64_t kRows = 5;
constexpr int64_t kCols = 7;

// Deterministic values for (rank, salt): small integers for floats and for products (so
// every result is exact), wide bit patterns for other integer ops, mixed bools.
Tensor values(c10::ScalarType type, c10::IntArrayRef shape, int rank, int salt, bool small = true) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor i = ::torch::arange(n, ::torch::kLong);
  Tensor v;
  if (type == ::torch::kBool) {
    v = ((i * 7 + rank * 13 + salt * 5) % 5) < 2;
  } else if (small || c10::isFloatingType(type)) {
    v = (i * 5 + rank * 3 + salt) % 7 - 3;
  } else {
    v = (i * int64_t{2654435761} + rank * 40503 + salt * 977) % 65536 - 30000;
  }
  return v.to(type).reshape(shape);
}

// op over xs, element-wise, computed with torch (floats in double, rounded once).
Tensor reference(const std::vector<Tensor>& xs, ReduceOp op) {
  const c10::ScalarType type = xs[0].scalar_type();
  const bool fp = c10::isFloatingType(type);
  const bool b = type == ::torch::kBool;
  Tensor acc;
  for (const Tensor& raw : xs) {
    Tensor x = fp ? raw.to(::torch::kDouble) : raw;
    if (op.kind == ReduceOpKind::kPremulSum) x = x * op.scale;
    if (!acc.defined()) {
      acc = x.clone();
      continue;
    }
    switch (op.kind) {
      case ReduceOpKind::kSum:
      case ReduceOpKind::kAvg:
      case ReduceOpKind::kPremulSum:
        acc = b ? acc.logical_or(x) : acc + x;
        break;
      case ReduceOpKind::kProd:
        acc = b ? acc.logical_and(x) : acc * x;
        break;
      case ReduceOpKind::kMin:
        acc = ::torch::minimum(acc, x);
        break;
      case ReduceOpKind::kMax:
        acc = ::torch::maximum(acc, x);
        break;
      case ReduceOpKind::kBand:
        acc = acc.bitwise_and(x);
        break;
      case ReduceOpKind::kBor:
        acc = acc.bitwise_or(x);
        break;
      case ReduceOpKind::kBxor:
        acc = acc.bitwise_xor(x);
        break;
    }
  }
  if (op.kind == ReduceOpKind::kAvg) {
    const auto n = static_cast<int64_t>(xs.size());
    acc = fp ? acc / static_cast<double>(n) : ::torch::div(acc, n, "trunc");
  }
  return acc.to(type);
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
  bool same = false;
  if (c10::isFloatingType(want.scalar_type())) {
    const double tol = want.element_size() == 2 ? 1e-2 : 1e-6;
    same = ::torch::allclose(got.to(::torch::kDouble), want.to(::torch::kDouble), tol, tol);
  } else {
    same = ::torch::equal(got, want);
  }
  EXPECT_TRUE(same) << what << "\n got:\n" << got << "\n expected:\n" << want;
}

// ---- layouts --------------------------------------------------------------------------

enum class Layout { kContiguous, kTransposed, kStrided };
constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kStrided};

const char* name(Layout l) {
  switch (l) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kTransposed:
      return "transposed";
    case Layout::kStrided:
      return "strided";
  }
  return "?";
}

// A [rows, cols] tensor laid out as `layout` inside `base`, which starts filled with a
// sentinel; the elements of base outside the view must stay the sentinel.
struct View {
  Tensor base;
  Tensor t;
  Tensor outside;  // undefined when the view covers all of base

  bool outside_untouched() const {
    return !outside.defined() ||
           ::torch::all(outside == ::torch::full_like(outside, 1)).item<bool>();
  }
};

View make_view(Layout layout, c10::ScalarType type, int64_t rows = kRows, int64_t cols = kCols) {
  auto opts = ::torch::TensorOptions().dtype(type);
  View v;
  switch (layout) {
    case Layout::kContiguous:
      v.base = ::torch::ones({rows, cols}, opts);
      v.t = v.base;
      break;
    case Layout::kTransposed:
      v.base = ::torch::ones({cols, rows}, opts);
      v.t = v.base.t();
      break;
    case Layout::kStrided:
      v.base = ::torch::ones({rows, 2 * cols}, opts);
      v.t = v.base.slice(1, 0, 2 * cols, 2);
      v.outside = v.base.slice(1, 1, 2 * cols, 2);
      break;
  }
  return v;
}

View view_of(Layout layout, const Tensor& values) {
  View v = make_view(layout, values.scalar_type(), values.size(0), values.size(1));
  v.t.copy_(values);
  return v;
}

std::string label(c10::ScalarType type, Layout layout, int rank) {
  return std::string(c10::toString(type)) + "/" + name(layout) + " rank " + std::to_string(rank);
}

// Runs fn(rank, group) on every rank of a fresh world of `n` ranks.
void run_world(int n, const std::function<void(int, const PG&)>& fn) {
  ThreadWorld world(n);
  ASSERT_TRUE(world.ok());
  world.run([&](int r, ProcessGroup&) { fn(r, world.shared(r)); });
}

class CollectivesTest : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Worlds, CollectivesTest, ::testing::Values(1, 2, 3, 4),
                         pg_test::world_name);

// ---- reductions -----------------------------------------------------------------------

TEST_P(CollectivesTest, AllReduceEveryDtypeOpAndLayout) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    for (c10::ScalarType type : kTypes) {
      for (ReduceOp op : pg_test::ops_for(to_dtype(type))) {
        const bool small = op.kind == ReduceOpKind::kProd;
        std::vector<Tensor> all;
        for (int r = 0; r < pg->size(); ++r)
          all.push_back(values(type, {kRows, kCols}, r, 1, small));
        const Tensor want = reference(all, op);
        for (Layout layout : kLayouts) {
          View v = view_of(layout, all[static_cast<size_t>(rank)]);
          all_reduce(v.t, op, pg);
          const std::string what =
              label(type, layout, rank) + " " + std::string(reduce_op_name(op.kind));
          expect_same(v.t, want, what);
          EXPECT_TRUE(v.outside_untouched()) << what;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllReduceLargeTransposedTensor) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    // Large enough for the chunked algorithms; sliced from a transposed base.
    Tensor base = values(::torch::kFloat, {700, 301}, rank, 2).t();
    Tensor t = base.slice(1, 0, 700, 3);
    Tensor want = ::torch::zeros_like(t.contiguous());
    for (int r = 0; r < pg->size(); ++r) {
      want += values(::torch::kFloat, {700, 301}, r, 2).t().slice(1, 0, 700, 3);
    }
    all_reduce(t, ReduceOpKind::kSum, pg);
    expect_same(t, want, "large f32");
  });
}

TEST_P(CollectivesTest, ReduceToEveryDstLeavesOthersUnchanged) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    for (c10::ScalarType type : kTypes) {
      const ReduceOp op =
          type == ::torch::kBool ? ReduceOp(ReduceOpKind::kBxor) : ReduceOp(ReduceOpKind::kMax);
      std::vector<Tensor> all;
      for (int r = 0; r < pg->size(); ++r) all.push_back(values(type, {kRows, kCols}, r, 3, false));
      for (int dst = 0; dst < pg->size(); ++dst) {
        for (Layout layout : kLayouts) {
          View v = view_of(layout, all[static_cast<size_t>(rank)]);
          reduce(v.t, dst, op, pg);
          const Tensor& want = rank == dst ? reference(all, op) : all[static_cast<size_t>(rank)];
          expect_same(v.t, want, label(type, layout, rank) + " dst " + std::to_string(dst));
          EXPECT_TRUE(v.outside_untouched());
        }
      }
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterListAndTensor) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    for (c10::ScalarType type : kTypes) {
      for (ReduceOp op : pg_test::ops_for(to_dtype(type))) {
        const bool small = op.kind == ReduceOpKind::kProd;
        // Rank r contributes block p = values(r, salt p); rank p gets op over r of block p.
        std::vector<Tensor> mine;
        for (int p = 0; p < n; ++p) mine.push_back(values(type, {kRows, kCols}, rank, p, small));
        std::vector<Tensor> column;
        for (int r = 0; r < n; ++r) column.push_back(values(type, {kRows, kCols}, r, rank, small));
        const Tensor want = reference(column, op);
        const std::string what = std::string(c10::toString(type)) + " " +
                                 std::string(reduce_op_name(op.kind)) + " rank " +
                                 std::to_string(rank);
        for (Layout layout : kLayouts) {
          std::vector<Tensor> inputs;  // alternate layouts within the list
          std::vector<View> keep;
          for (int p = 0; p < n; ++p) {
            keep.push_back(view_of(kLayouts[(p + static_cast<int>(layout)) % 3], mine[p]));
            inputs.push_back(keep.back().t);
          }
          View out = make_view(layout, type);
          reduce_scatter(out.t, inputs, op, pg);
          expect_same(out.t, want, what + " list " + name(layout));
          EXPECT_TRUE(out.outside_untouched());
          for (int p = 0; p < n; ++p) expect_same(inputs[p], mine[p], what + " input unchanged");
        }
        // The tensor form: input [n * rows, cols], transposed storage; output strided.
        Tensor input = ::torch::cat(mine, 0).t().contiguous().t();
        View out = make_view(Layout::kStrided, type);
        reduce_scatter_tensor(out.t, input, op, pg);
        expect_same(out.t, want, what + " tensor");
        // In place: the output is this rank's block of the input.
        Tensor flat = ::torch::cat(mine, 0);
        Tensor own = flat.narrow(0, rank * kRows, kRows);
        reduce_scatter_tensor(own, flat, op, pg);
        expect_same(own, want, what + " in place");
        // The output aliasing another block of the input: not in place, still correct.
        flat = ::torch::cat(mine, 0);
        Tensor other = flat.narrow(0, (rank + 1) % n * kRows, kRows);
        reduce_scatter_tensor(other, flat, op, pg);
        expect_same(other, want, what + " aliased");
      }
    }
  });
}

// ---- data movement --------------------------------------------------------------------

TEST_P(CollectivesTest, BroadcastFromEverySrc) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    for (c10::ScalarType type : kTypes) {
      for (int src = 0; src < pg->size(); ++src) {
        for (Layout layout : kLayouts) {
          View v = view_of(layout, values(type, {kRows, kCols}, rank, 4, false));
          broadcast(v.t, src, pg);
          expect_same(v.t, values(type, {kRows, kCols}, src, 4, false),
                      label(type, layout, rank) + " src " + std::to_string(src));
          EXPECT_TRUE(v.outside_untouched());
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllGatherIntoListAndIntoTensor) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    for (c10::ScalarType type : kTypes) {
      std::vector<Tensor> want;
      for (int r = 0; r < n; ++r) want.push_back(values(type, {kRows, kCols}, r, 5, false));
      const Tensor stacked = ::torch::cat(want, 0);
      for (Layout layout : kLayouts) {
        const std::string what = label(type, layout, rank);
        View in = view_of(layout, want[static_cast<size_t>(rank)]);
        std::vector<View> outs;
        std::vector<Tensor> list;
        for (int r = 0; r < n; ++r) {
          outs.push_back(make_view(kLayouts[(r + static_cast<int>(layout)) % 3], type));
          list.push_back(outs.back().t);
        }
        all_gather(list, in.t, pg);
        for (int r = 0; r < n; ++r) {
          expect_same(list[r], want[r], what + " list[" + std::to_string(r) + "]");
          EXPECT_TRUE(outs[r].outside_untouched());
        }
        View out = make_view(layout, type, n * kRows, kCols);
        all_gather_into_tensor(out.t, in.t, pg);
        expect_same(out.t, stacked, what + " into tensor");
        EXPECT_TRUE(out.outside_untouched());
      }
      // In place (input is this rank's block of output), and an input aliasing another
      // block of the output, which must be read before it is overwritten.
      Tensor out = ::torch::zeros({n * kRows, kCols}, ::torch::TensorOptions().dtype(type));
      Tensor own = out.narrow(0, rank * kRows, kRows);
      own.copy_(want[static_cast<size_t>(rank)]);
      all_gather_into_tensor(out, own, pg);
      expect_same(out, stacked, std::string(c10::toString(type)) + " in place");
      Tensor other = out.narrow(0, (rank + 1) % n * kRows, kRows);
      other.copy_(want[static_cast<size_t>(rank)]);
      all_gather_into_tensor(out, other, pg);
      expect_same(out, stacked, std::string(c10::toString(type)) + " aliased");
    }
  });
}

TEST_P(CollectivesTest, GatherAndScatterWithEveryRoot) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    for (c10::ScalarType type : kTypes) {
      for (int root = 0; root < n; ++root) {
        for (Layout layout : kLayouts) {
          const std::string what = label(type, layout, rank) + " root " + std::to_string(root);
          View in = view_of(layout, values(type, {kRows, kCols}, rank, 6, false));
          std::vector<View> outs;
          std::vector<Tensor> list;
          if (rank == root) {
            for (int r = 0; r < n; ++r) {
              outs.push_back(make_view(kLayouts[(r + 1) % 3], type));
              list.push_back(outs.back().t);
            }
          }
          gather(in.t, list, root, pg);
          for (size_t r = 0; r < list.size(); ++r) {
            expect_same(list[r], values(type, {kRows, kCols}, static_cast<int>(r), 6, false),
                        what + " gather[" + std::to_string(r) + "]");
            EXPECT_TRUE(outs[r].outside_untouched());
          }

          // Root scatters block r = values(root, salt r) to rank r.
          std::vector<View> srcs;
          std::vector<Tensor> scatter_list;
          if (rank == root) {
            for (int r = 0; r < n; ++r) {
              srcs.push_back(
                  view_of(kLayouts[r % 3], values(type, {kRows, kCols}, root, r, false)));
              scatter_list.push_back(srcs.back().t);
            }
          }
          View out = make_view(layout, type);
          scatter(out.t, scatter_list, root, pg);
          expect_same(out.t, values(type, {kRows, kCols}, root, rank, false), what + " scatter");
          EXPECT_TRUE(out.outside_untouched());
        }
      }
    }
  });
}

// Rows rank `from` sends to rank `to` in the uneven all_to_all cases (some zero).
int64_t rows_between(int from, int to) { return (from * 2 + to * 3) % 4; }

TEST_P(CollectivesTest, AllToAllListWithUnevenSizes) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    auto block = [](c10::ScalarType type, int from, int to) {
      return values(type, {rows_between(from, to), 3}, from, 10 + to, false);
    };
    for (c10::ScalarType type : kTypes) {
      std::vector<Tensor> inputs;
      std::vector<Tensor> outputs;
      for (int p = 0; p < n; ++p) {
        // Transposed inputs and outputs with a column step: nothing here is contiguous.
        inputs.push_back(block(type, rank, p).t().contiguous().t());
        Tensor wide =
            ::torch::zeros({rows_between(p, rank), 6}, ::torch::TensorOptions().dtype(type));
        outputs.push_back(wide.slice(1, 0, 6, 2));
      }
      all_to_all(outputs, inputs, pg);
      for (int p = 0; p < n; ++p) {
        expect_same(outputs[p], block(type, p, rank),
                    std::string(c10::toString(type)) + " from " + std::to_string(p));
      }
    }
  });
}

TEST_P(CollectivesTest, AllToAllSingleEvenAndWithSplitSizes) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    for (c10::ScalarType type : kTypes) {
      const std::string what = std::string(c10::toString(type)) + " rank " + std::to_string(rank);
      // Even: rank r's rows [2p, 2p+2) go to rank p.
      Tensor in = values(type, {2 * n, 4}, rank, 20, false);
      View out = make_view(Layout::kTransposed, type, 2 * n, 4);
      all_to_all_single(out.t, in.t().contiguous().t(), {}, {}, pg);
      std::vector<Tensor> want;
      for (int p = 0; p < n; ++p) {
        want.push_back(values(type, {2 * n, 4}, p, 20, false).narrow(0, 2 * rank, 2));
      }
      expect_same(out.t, ::torch::cat(want, 0), what + " even");
      // One tensor as both input and output: the input must be read before it is written.
      Tensor both = in.clone();
      all_to_all_single(both, both, {}, {}, pg);
      expect_same(both, ::torch::cat(want, 0), what + " same tensor");

      // Uneven splits (some zero) into a strided output.
      std::vector<int64_t> in_splits;
      std::vector<int64_t> out_splits;
      int64_t in_rows = 0;
      int64_t out_rows = 0;
      for (int p = 0; p < n; ++p) {
        in_splits.push_back(rows_between(rank, p));
        out_splits.push_back(rows_between(p, rank));
        in_rows += in_splits.back();
        out_rows += out_splits.back();
      }
      Tensor input = values(type, {in_rows, 3}, rank, 21, false);
      View got = make_view(Layout::kStrided, type, out_rows, 3);
      all_to_all_single(got.t, input, out_splits, in_splits, pg);
      want.clear();
      for (int p = 0; p < n; ++p) {
        int64_t offset = 0;
        for (int q = 0; q < rank; ++q) offset += rows_between(p, q);
        int64_t p_rows = 0;
        for (int q = 0; q < n; ++q) p_rows += rows_between(p, q);
        want.push_back(values(type, {p_rows, 3}, p, 21, false).narrow(0, offset, out_splits[p]));
      }
      expect_same(got.t, ::torch::cat(want, 0), what + " uneven");
      EXPECT_TRUE(got.outside_untouched());
    }
  });
}

// ---- point-to-point, barrier, async ---------------------------------------------------

TEST(CollectivesP2PTest, SendRecvMatchTagsIntoNonContiguousTensors) {
  run_world(2, [](int rank, const PG& pg) {
    for (c10::ScalarType type : kTypes) {
      const std::string what = std::string(c10::toString(type)) + " rank " + std::to_string(rank);
      if (rank == 0) {
        for (uint32_t tag : {1u, 2u, 3u}) {
          send(values(type, {kRows, kCols}, 0, static_cast<int>(tag), false).t(), 1, pg, tag);
        }
      } else {
        std::vector<View> views;
        std::vector<WorkPtr> works;
        for (uint32_t tag : {3u, 2u, 1u}) {  // posted in reverse order: matched by tag
          views.push_back(make_view(kLayouts[tag % 3], type, kCols, kRows));
          works.push_back(irecv(views.back().t, 0, pg, tag));
        }
        for (size_t i = 0; i < works.size(); ++i) {
          works[i]->wait();
          const int tag = 3 - static_cast<int>(i);
          expect_same(views[i].t, values(type, {kRows, kCols}, 0, tag, false).t(),
                      what + " tag " + std::to_string(tag));
          EXPECT_TRUE(views[i].outside_untouched());
        }
      }
      // Both directions at once with isend/irecv.
      Tensor out = values(type, {kRows}, rank, 30, false);
      Tensor in = ::torch::zeros({kRows}, ::torch::TensorOptions().dtype(type));
      WorkPtr s = isend(out, 1 - rank, pg, 9);
      WorkPtr r = irecv(in, 1 - rank, pg, 9);
      r->wait();
      s->wait();
      expect_same(in, values(type, {kRows}, 1 - rank, 30, false), what + " exchange");
    }
  });
}

TEST_P(CollectivesTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  run_world(GetParam(), [&](int rank, const PG& pg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * rank));
    arrived.fetch_add(1);
    barrier(pg);
    EXPECT_EQ(arrived.load(), pg->size()) << "rank " << rank << " left the barrier early";
    WorkPtr w = barrier_async(pg);
    w->wait();
    EXPECT_TRUE(w->is_success());
  });
}

TEST_P(CollectivesTest, AsyncFormsCopyBackOnWaitOrCompletion) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    std::vector<Tensor> all;
    for (int r = 0; r < n; ++r) all.push_back(values(::torch::kFloat, {kRows, kCols}, r, 40));
    const Tensor sum = reference(all, ReduceOpKind::kSum);
    // Several in flight on non-contiguous tensors, waited in reverse order.
    std::vector<View> views;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 4; ++k) {
      views.push_back(view_of(kLayouts[k % 3], all[static_cast<size_t>(rank)] * (k + 1)));
      works.push_back(all_reduce_async(views.back().t, ReduceOpKind::kSum, pg));
    }
    for (int k = 3; k >= 0; --k) {
      works[static_cast<size_t>(k)]->wait();
      expect_same(views[static_cast<size_t>(k)].t, sum * (k + 1),
                  "reverse wait " + std::to_string(k));
    }
    // Polling is_completed() alone completes the Work, copy-back included.
    View v = view_of(Layout::kTransposed, all[static_cast<size_t>(rank)]);
    WorkPtr w = all_reduce_async(v.t, ReduceOpKind::kSum, pg);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!w->is_completed() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(w->is_completed());
    EXPECT_TRUE(w->is_success());
    expect_same(v.t, sum, "is_completed");
    // A list output through the async form; the list itself may go out of scope.
    std::vector<Tensor> outs;
    WorkPtr g;
    {
      std::vector<Tensor> list;
      for (int r = 0; r < n; ++r) list.push_back(::torch::zeros({kCols, kRows}).t());
      outs = list;
      g = all_gather_async(list, all[static_cast<size_t>(rank)], pg);
    }
    g->wait();
    for (int r = 0; r < n; ++r) expect_same(outs[r], all[static_cast<size_t>(r)], "async gather");
    // Dropped unfinished Works: the operations still run and keep their temporaries.
    for (int k = 0; k < 3; ++k) {
      all_reduce_async(::torch::ones({kCols, kRows}).t(), ReduceOpKind::kSum, pg);
    }
    Tensor after = ::torch::ones({3});
    all_reduce(after, ReduceOpKind::kSum, pg);
    expect_same(after, ::torch::full({3}, static_cast<float>(n)), "after dropped works");
  });
}

TEST(CollectivesAsyncTest, BoundedWaitTimesOutThenCompletes) {
  run_world(2, [](int rank, const PG& pg) {
    View v = view_of(Layout::kTransposed, values(::torch::kFloat, {kRows, kCols}, rank, 50));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    WorkPtr w = all_reduce_async(v.t, ReduceOpKind::kSum, pg);
    if (rank == 0) {
      EXPECT_THROW(w->wait(Deadline::after(std::chrono::milliseconds(50))), TimeoutError);
      EXPECT_FALSE(w->is_completed());
    }
    w->wait();
    const Tensor want = values(::torch::kFloat, {kRows, kCols}, 0, 50) +
                        values(::torch::kFloat, {kRows, kCols}, 1, 50);
    expect_same(v.t, want, "after the timed-out wait");
  });
}

// ---- groups ---------------------------------------------------------------------------

TEST(CollectivesGroupTest, SubGroupsUseGroupRanksAndNullGroupsAreRefused) {
  run_world(4, [](int rank, const PG& pg) {
    PG odds = pg->new_group({1, 3});
    PG halves = pg->split(rank % 2, rank);
    if (rank % 2 == 0) {
      ASSERT_EQ(odds, nullptr);
      Tensor t = ::torch::ones({2});
      EXPECT_THROW(all_reduce(t, ReduceOpKind::kSum, odds), InvalidArgument);
    } else {
      Tensor t = ::torch::full({2}, static_cast<float>(rank));
      all_reduce(t, ReduceOpKind::kSum, odds);
      expect_same(t, ::torch::full({2}, 4.0f), "odds sum");
      // src 1 is the group's rank 1, global rank 3.
      Tensor b = ::torch::full({3}, static_cast<float>(rank)).expand({2, 3}).t().contiguous().t();
      broadcast(b, 1, odds);
      expect_same(b, ::torch::full({2, 3}, 3.0f), "odds broadcast");
    }
    Tensor h = ::torch::full({kCols, kRows}, static_cast<float>(rank)).t();
    all_reduce(h, ReduceOpKind::kMax, halves);
    expect_same(h, ::torch::full({kRows, kCols}, static_cast<float>(rank % 2 + 2)), "halves max");
  });
}

TEST(CollectivesGroupTest, DefaultGroupIsUsedWhenNoneIsGiven) {
  Tensor t = ::torch::arange(6, ::torch::kFloat).reshape({2, 3}).t();
  EXPECT_THROW(all_reduce(t), Error);  // nothing initialized
  init_process_group("tcp", "env://", 1, 0, std::chrono::seconds(30),
                     std::make_shared<HashStore>());
  all_reduce(t, ReduceOp::premul_sum(2.0));
  expect_same(t, ::torch::arange(6, ::torch::kFloat).reshape({2, 3}).t() * 2, "premul_sum");
  std::vector<Tensor> list{::torch::zeros({3, 2})};
  all_gather(list, t);
  expect_same(list[0], t, "all_gather");
  broadcast(t, 0);
  barrier();
  destroy_process_group();
}

// ---- bad input ------------------------------------------------------------------------

// What `fn` throws, as "Type: message" (or "nothing").
template <typename Fn>
std::string thrown(Fn&& fn) {
  try {
    fn();
  } catch (...) {
    return pg_test::describe(std::current_exception());
  }
  return "nothing";
}

void expect_invalid(const std::string& got, const std::string& fragment) {
  EXPECT_EQ(got.rfind("InvalidArgument: ", 0), 0u) << got;
  EXPECT_NE(got.find(fragment), std::string::npos) << "\"" << fragment << "\" not in: " << got;
}

TEST(CollectivesErrorTest, DeviceMessageNamesTheDevice) {
  EXPECT_EQ(detail::device_error(c10::Device(c10::kCUDA, 0)),
            "tdist: CUDA tensors are not supported yet (tensor on cuda:0); move it to the CPU");
  Tensor meta = ::torch::empty({4}, ::torch::TensorOptions().device(c10::kMeta));
  ThreadWorld world(1);
  ASSERT_TRUE(world.ok());
  expect_invalid(thrown([&] { all_reduce(meta, ReduceOpKind::kSum, world.shared(0)); }),
                 "tensors are not supported yet (tensor on meta); move it to the CPU");
}

TEST(CollectivesErrorTest, BadArgumentsFailBeforeAnythingIsSent) {
  run_world(2, [](int rank, const PG& pg) {
    const auto f32 = ::torch::TensorOptions().dtype(::torch::kFloat);
    Tensor t = ::torch::ones({4}, f32);
    expect_invalid(thrown([&] {
                     all_reduce(::torch::ones({2}, ::torch::kComplexFloat), ReduceOpKind::kSum, pg);
                   }),
                   "ComplexFloat");
    expect_invalid(thrown([&] { all_reduce(Tensor(), ReduceOpKind::kSum, pg); }), "undefined");
    expect_invalid(thrown([&] { all_reduce(t.to_sparse(), ReduceOpKind::kSum, pg); }), "layout");
    expect_invalid(thrown([&] { all_reduce(t, ReduceOpKind::kBand, pg); }), "band");
    expect_invalid(
        thrown([&] { all_reduce(::torch::ones({1}).expand({4}), ReduceOpKind::kSum, pg); }),
        "share memory");
    expect_invalid(thrown([&] { broadcast(t, 2, pg); }), "src 2 is not a rank of the group");
    expect_invalid(thrown([&] { all_gather({t}, t, pg); }), "one per rank of the group (2)");
    expect_invalid(thrown([&] {
                     all_gather({t, ::torch::ones({2, 2})}, t, pg);
                   }),
                   "outputs[1] has shape [2, 2] but input has [4]");
    expect_invalid(thrown([&] {
                     all_gather({t, ::torch::ones({4}, ::torch::kLong)}, t, pg);
                   }),
                   "outputs[1] has dtype Long but input has Float");
    expect_invalid(thrown([&] { all_gather_into_tensor(::torch::ones({7}), t, pg); }),
                   "output has 7 elements; it needs 2 x 4");
    expect_invalid(
        thrown([&] { reduce_scatter_tensor(t, ::torch::ones({4}), ReduceOpKind::kSum, pg); }),
        "input has 4 elements; it needs 2 x 4");
    expect_invalid(thrown([&] {
                     gather(t, {t, t}, 1 - rank, pg);
                   }),
                   "gather_list must be empty on ranks other than dst");
    expect_invalid(thrown([&] { scatter(t, {}, rank, pg); }), "scatter_list holds 0 tensors");
    expect_invalid(thrown([&] {
                     all_to_all({t, t}, {t, ::torch::ones({4}, ::torch::kHalf)}, pg);
                   }),
                   "inputs[1] has dtype Half");
    expect_invalid(thrown([&] {
                     all_to_all({t, t}, {::torch::ones({3}), ::torch::ones({3})}, pg);
                   }),
                   "sends itself");
    expect_invalid(
        thrown([&] { all_to_all_single(::torch::ones({3}), ::torch::ones({3}), {}, {}, pg); }),
        "does not divide evenly among 2 ranks");
    expect_invalid(thrown([&] {
                     all_to_all_single(t, t, {2, 2}, {1, 2}, pg);
                   }),
                   "split sizes add up to 3");
    expect_invalid(thrown([&] {
                     all_to_all_single(t, t, {2, 2}, {4}, pg);
                   }),
                   "split sizes hold 1 entries");
    expect_invalid(thrown([&] { all_to_all_single(::torch::ones({}), t, {}, {}, pg); }), "0-dim");
    expect_invalid(thrown([&] { send(t, rank, pg); }), "itself");
    // Nothing reached the backend: both ranks still agree on the next collective.
    Tensor ok = ::torch::full({3}, static_cast<float>(rank + 1));
    all_reduce(ok, ReduceOpKind::kSum, pg);
    expect_same(ok, ::torch::full({3}, 3.0f), "after the errors");
  });
}

// ---- tensors with autograd state and lazy views ---------------------------------------

TEST(CollectivesTensorKindsTest, GradLeavesInferenceTensorsAndNegatedViews) {
  run_world(2, [](int rank, const PG& pg) {
    const float v = static_cast<float>(rank + 1);
    // A leaf that requires grad, non-contiguous: the copy-back must not trip autograd.
    Tensor leaf = ::torch::full({kCols, kRows}, v).t().requires_grad_(true);
    all_reduce(leaf, ReduceOpKind::kSum, pg);
    expect_same(leaf.detach(), ::torch::full({kRows, kCols}, 3.0f), "grad leaf");
    // Made under InferenceMode, written outside it.
    Tensor inference;
    {
      c10::InferenceMode guard;
      inference = ::torch::full({kCols, kRows}, v).t();
    }
    all_reduce(inference, ReduceOpKind::kSum, pg);
    expect_same(inference, ::torch::full({kRows, kCols}, 3.0f), "inference tensor");
    // Lazily negated views: the imaginary part of a conjugated complex tensor (strided),
    // and a contiguous one, whose memory holds the values' negation.
    Tensor z = ::torch::complex(::torch::zeros({4}), ::torch::full({4}, v));
    Tensor imag = ::torch::imag(z.conj());
    Tensor base = ::torch::full({4}, v);
    Tensor neg = ::torch::_neg_view(base);
    ASSERT_TRUE(imag.is_neg() && neg.is_neg() && neg.is_contiguous());
    // max, not sum: negation commutes with a sum, so a view read raw would still pass.
    all_reduce(imag, ReduceOpKind::kMax, pg);  // logical values -1 and -2
    all_reduce(neg, ReduceOpKind::kMax, pg);
    for (const Tensor& t : {imag, neg}) expect_same(t, ::torch::full({4}, -1.0f), "negated view");
    expect_same(::torch::imag(z), ::torch::full({4}, 1.0f), "the complex base");
    expect_same(base, ::torch::full({4}, 1.0f), "the real base");
  });
}

}  // namespace
}  // namespace tdist::torch
