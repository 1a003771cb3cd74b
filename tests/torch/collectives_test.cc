// Tensor collectives over the "tcp" backend with ranks as threads (worlds 1-4), what each
// computes: reductions and data movement, every function x dtypes (f32 f16 bf16 i64 bool)
// x ops, inputs and outputs contiguous, transposed and sliced with a step (the memory
// around a slice stays untouched), and in-place and aliased forms. Expected values come
// from torch ops over every rank's input, computed in the test. Point-to-point, barrier,
// async forms, groups, bad input and tensors with autograd state are in
// collectives_test_usage.cc, built into the same binary.
#include "tdist/torch/collectives.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives_test_util.h"

namespace tdist::torch::coll_test::collectives_test {
namespace {

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

}  // namespace
}  // namespace tdist::torch::coll_test::collectives_test
