// Shared helpers of the tensor collective tests (collectives_test*.cc): deterministic
// per-rank values in every dtype tested, torch-computed expected reductions, tensors laid
// out contiguous / transposed / sliced with a step inside a sentinel-filled base, and a
// world of ranks as threads. Test-only; each helper runs on the calling thread and reports
// mismatches through gtest assertions.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pg/pg_test_util.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch::coll_test {

using pg_test::ThreadWorld;
using ::torch::Tensor;
using PG = std::shared_ptr<ProcessGroup>;

inline const c10::ScalarType kTypes[] = {::torch::kFloat, ::torch::kHalf, ::torch::kBFloat16,
                                         ::torch::kLong, ::torch::kBool};

inline constexpr int64_t kRows = 5;
inline constexpr int64_t kCols = 7;

// Deterministic values for (rank, salt): small integers for floats and for products (so
// every result is exact), wide bit patterns for other integer ops, mixed bools.
inline Tensor values(c10::ScalarType type, c10::IntArrayRef shape, int rank, int salt,
                     bool small = true) {
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
inline Tensor reference(const std::vector<Tensor>& xs, ReduceOp op) {
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

inline void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
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
inline constexpr Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kStrided};

inline const char* name(Layout l) {
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

inline View make_view(Layout layout, c10::ScalarType type, int64_t rows = kRows,
                      int64_t cols = kCols) {
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

inline View view_of(Layout layout, const Tensor& values) {
  View v = make_view(layout, values.scalar_type(), values.size(0), values.size(1));
  v.t.copy_(values);
  return v;
}

inline std::string label(c10::ScalarType type, Layout layout, int rank) {
  return std::string(c10::toString(type)) + "/" + name(layout) + " rank " + std::to_string(rank);
}

// Runs fn(rank, group) on every rank of a fresh world of `n` ranks.
inline void run_world(int n, const std::function<void(int, const PG&)>& fn) {
  ThreadWorld world(n);
  ASSERT_TRUE(world.ok());
  world.run([&](int r, ProcessGroup&) { fn(r, world.shared(r)); });
}

// Parameterized by the world size; instantiated (worlds 1-4) once, in collectives_test.cc,
// for the TEST_Ps of every file.
class CollectivesTest : public ::testing::TestWithParam<int> {};

}  // namespace tdist::torch::coll_test
