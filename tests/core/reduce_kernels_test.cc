// Tests for the reduction kernels (src/core/reduce_kernels.h): every (dtype, op) on
// every ISA this CPU runs, against the independent reference in reduce_reference.h,
// for counts 0, 1, 7, 4097, unaligned pointers, aliasing, premultiply and finish.
#include "core/reduce_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/reduce_reference.h"
#include "tdist/error.h"

namespace tdist::core {
namespace {

using testing::first_mismatch;
using testing::ref_divide;
using testing::ref_premultiply;
using testing::ref_reduce;

constexpr size_t kCounts[] = {0, 1, 7, 4097};
constexpr uint8_t kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

// What this CPU runs, found here with CPUID and the compiler's CPU checks (not the
// library's).
bool cpu_runs(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kSse4:
      return __builtin_cpu_supports("sse4.1");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && f16c;
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512};

std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (cpu_runs(isa)) out.push_back(isa);
  }
  return out;
}

// Bytes of `count` random elements, rich in the values that break kernels: NaN, inf,
// signed zeros, subnormals, overflow, rounding ties.
std::vector<uint8_t> random_elements(DType dtype, size_t count, std::mt19937_64& rng) {
  std::vector<uint8_t> out(count * dtype_size(dtype));
  auto pick = [&](uint64_t n) { return rng() % n; };
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::kF32:
      case DType::kF64: {
        static constexpr double kSpecials[] = {std::numeric_limits<double>::quiet_NaN(),
                                               -std::numeric_limits<double>::infinity(),
                                               std::numeric_limits<double>::infinity(),
                                               0.0,
                                               -0.0,
                                               1e-40,
                                               3e38,
                                               1.0,
                                               -1.0};
        double v = pick(8) == 0 ? kSpecials[pick(std::size(kSpecials))]
                                : std::ldexp(static_cast<double>(rng() >> 11) / 0x1p53 - 0.5,
                                             static_cast<int>(pick(60)) - 30);
        if (dtype == DType::kF32) {
          testing::write_at<float>(p, 0, static_cast<float>(v));
        } else {
          testing::write_at<double>(p, 0, v);
        }
        break;
      }
      case DType::kF16:
      case DType::kBF16: {
        // Mostly a narrow exponent band (so sums round), sometimes any bit pattern.
        uint16_t bits = static_cast<uint16_t>(rng());
        if (pick(4) != 0) {
          const int bias = dtype == DType::kF16 ? 15 : 127;
          const int shift = dtype == DType::kF16 ? 10 : 7;
          const uint16_t exponent = static_cast<uint16_t>(bias - 3 + static_cast<int>(pick(7)));
          bits = static_cast<uint16_t>((bits & 0x8000) | (exponent << shift) |
                                       (bits & ((1u << shift) - 1)));
        }
        testing::write_at<uint16_t>(p, 0, bits);
        break;
      }
      case DType::kBool: {
        static constexpr uint8_t kBools[] = {0, 1, 0, 1, 2, 0x80};
        *p = kBools[pick(std::size(kBools))];
        break;
      }
      default:
        for (size_t j = 0; j < dtype_size(dtype); ++j) p[j] = static_cast<uint8_t>(rng());
        break;
    }
  }
  return out;
}

// A buffer placed `offset` bytes past an aligned address, fenced by guard bytes.
class Fenced {
 public:
  Fenced(const std::vector<uint8_t>& bytes, size_t offset)
      : offset_(offset), size_(bytes.size()), storage_(2 * kGuardBytes + offset + size_, kGuard) {
    if (size_ > 0) std::memcpy(data(), bytes.data(), size_);
  }
  uint8_t* data() { return storage_.data() + kGuardBytes + offset_; }
  std::vector<uint8_t> contents() { return {data(), data() + size_}; }
  bool fences_intact() const {
    for (size_t i = 0; i < storage_.size(); ++i) {
      bool inside = i >= kGuardBytes + offset_ && i < kGuardBytes + offset_ + size_;
      if (!inside && storage_[i] != kGuard) return false;
    }
    return true;
  }

 private:
  size_t offset_;
  size_t size_;
  std::vector<uint8_t> storage_;
};

class ReduceKernelsTest : public ::testing::Test {
 protected:
  void TearDown() override { force_isa(best_supported_isa()); }

  // Records a failure (at most a few per test) when `got` differs from `want`.
  void expect_same(DType dtype, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                   const std::string& context) {
    ASSERT_EQ(got.size(), want.size()) << context;
    auto mismatch = first_mismatch(dtype, got.data(), want.data(), got.size() / dtype_size(dtype));
    if (mismatch && ++failures_ <= 10) ADD_FAILURE() << context << ": " << *mismatch;
    ++checks_;
  }

  int failures_ = 0;
  int checks_ = 0;
  std::mt19937_64 rng_{20261130};
};

std::string describe(Isa isa, DType dtype, ReduceOp op, size_t count, const std::string& how) {
  return std::string(isa_name(isa)) + " " + std::string(dtype_name(dtype)) + " " +
         std::string(reduce_op_name(op.kind)) + " count=" + std::to_string(count) + " " + how;
}

TEST_F(ReduceKernelsTest, EveryDtypeOpAndIsaMatchesReference) {
  struct Offsets {
    size_t dst, a, b;
  };
  for (Isa isa : runnable_isas()) {
    force_isa(isa);
    ASSERT_EQ(active_isa(), isa);
    for (DType dtype : kAllDTypes) {
      const size_t el = dtype_size(dtype);
      const Offsets kOffsets[] = {{0, 0, 0}, {1, 1, 1}, {el, 1, 0}};
      for (ReduceOpKind kind : kAllReduceOpKinds) {
        if (!is_supported(kind, dtype)) continue;
        for (size_t count : kCounts) {
          for (const Offsets& off : kOffsets) {
            auto a = random_elements(dtype, count, rng_);
            auto b = random_elements(dtype, count, rng_);
            std::vector<uint8_t> want(a.size());
            ref_reduce(dtype, kind, a.data(), b.data(), want.data(), count);
            std::string where = describe(isa, dtype, kind, count,
                                         "offsets " + std::to_string(off.dst) + "/" +
                                             std::to_string(off.a) + "/" + std::to_string(off.b));

            Fenced fa(a, off.a), fb(b, off.b), fd(std::vector<uint8_t>(a.size()), off.dst);
            reduce(fd.data(), fa.data(), fb.data(), count, dtype, kind);
            expect_same(dtype, fd.contents(), want, where + " reduce");
            EXPECT_EQ(fa.contents(), a) << where << ": reduce changed its input a";
            EXPECT_EQ(fb.contents(), b) << where << ": reduce changed its input b";

            reduce_into(fa.data(), fb.data(), count, dtype, kind);  // dst == a
            expect_same(dtype, fa.contents(), want, where + " reduce_into");

            Fenced ga(a, off.a), gb(b, off.b);
            reduce(gb.data(), ga.data(), gb.data(), count, dtype, kind);  // dst == b
            expect_same(dtype, gb.contents(), want, where + " reduce dst==b");
            EXPECT_TRUE(fa.fences_intact() && fb.fences_intact() && fd.fences_intact() &&
                        gb.fences_intact())
                << where << ": wrote outside the buffer";
          }
        }
      }
    }
  }
  EXPECT_GT(checks_, 1000);
}

// Every f16 and bf16 bit pattern as the first operand, so every conversion is hit.
TEST_F(ReduceKernelsTest, EveryHalfPatternRoundsToNearestEven) {
  constexpr size_t kCount = 1 << 16;
  std::vector<uint8_t> a(kCount * 2);
  for (size_t i = 0; i < kCount; ++i) testing::write_at<uint16_t>(a.data(), i, uint16_t(i));
  for (Isa isa : runnable_isas()) {
    force_isa(isa);
    for (DType dtype : {DType::kF16, DType::kBF16}) {
      for (ReduceOpKind kind : {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMax}) {
        auto b = random_elements(dtype, kCount, rng_);
        std::vector<uint8_t> want(a.size());
        ref_reduce(dtype, kind, a.data(), b.data(), want.data(), kCount);
        std::vector<uint8_t> got(a.size());
        reduce(got.data(), a.data(), b.data(), kCount, dtype, kind);
        expect_same(dtype, got, want, describe(isa, dtype, kind, kCount, "all patterns"));
      }
    }
  }
}

TEST_F(ReduceKernelsTest, PremultiplyMatchesReference) {
  for (Isa isa : runnable_isas()) {
    force_isa(isa);
    for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
      for (double scale : {0.37, -2.5, 3.0e5}) {
        for (size_t count : kCounts) {
          for (size_t offset : {size_t{0}, size_t{1}}) {
            auto data = random_elements(dtype, count, rng_);
            auto want = data;
            ref_premultiply(dtype, want.data(), count, scale);
            Fenced f(data, offset);
            premultiply(f.data(), count, dtype, ReduceOp::premul_sum(scale));
            expect_same(dtype, f.contents(), want,
                        describe(isa, dtype, ReduceOp::premul_sum(scale), count,
                                 "scale " + std::to_string(scale)));
            EXPECT_TRUE(f.fences_intact());
          }
        }
      }
    }
  }
  EXPECT_GT(checks_, 100);
}

TEST_F(ReduceKernelsTest, FinishAvgMatchesReference) {
  for (Isa isa : runnable_isas()) {
    force_isa(isa);
    for (DType dtype : kAllDTypes) {
      if (!is_supported(ReduceOpKind::kAvg, dtype)) continue;
      for (int world : {1, 2, 3, 7, 200}) {
        for (size_t count : kCounts) {
          auto data = random_elements(dtype, count, rng_);
          auto want = data;
          if (world > 1) ref_divide(dtype, want.data(), count, world);
          Fenced f(data, 1);
          finish(f.data(), count, dtype, ReduceOpKind::kAvg, world);
          expect_same(
              dtype, f.contents(), want,
              describe(isa, dtype, ReduceOpKind::kAvg, count, "world " + std::to_string(world)));
          EXPECT_TRUE(f.fences_intact());
        }
      }
    }
  }
  EXPECT_GT(checks_, 100);
}

TEST_F(ReduceKernelsTest, PremultiplyAndFinishLeaveOtherOpsAlone) {
  for (DType dtype : kAllDTypes) {
    auto data = random_elements(dtype, 100, rng_);
    auto copy = data;
    premultiply(copy.data(), 100, dtype, ReduceOpKind::kMax);
    finish(copy.data(), 100, dtype, ReduceOpKind::kSum, 4);
    EXPECT_EQ(copy, data) << dtype_name(dtype);
  }
  std::vector<float> v = {1.0f, -2.0f, 8.0f};
  finish(v.data(), v.size(), DType::kF32, ReduceOp::premul_sum(3.0), 4);
  EXPECT_EQ(v, (std::vector<float>{1.0f, -2.0f, 8.0f}));
  premultiply(v.data(), v.size(), DType::kF32, ReduceOpKind::kAvg);
  EXPECT_EQ(v, (std::vector<float>{1.0f, -2.0f, 8.0f}));
}

// A few hand-checked cases that say what the semantics are.
TEST_F(ReduceKernelsTest, HandCheckedSemantics) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {nan, 1.0f, 2.0f, -0.5f};
  std::vector<float> b = {1.0f, nan, 3.0f, -4.0f};
  std::vector<float> out(4);
  reduce(out.data(), a.data(), b.data(), 4, DType::kF32, ReduceOpKind::kMin);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_EQ(out[2], 2.0f);
  EXPECT_EQ(out[3], -4.0f);
  reduce(out.data(), a.data(), b.data(), 4, DType::kF32, ReduceOpKind::kMax);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_EQ(out[3], -0.5f);

  std::vector<int8_t> i8 = {127, -128, 100};
  std::vector<int8_t> one = {1, -1, 100};
  reduce_into(i8.data(), one.data(), 3, DType::kI8, ReduceOpKind::kSum);
  EXPECT_EQ(i8, (std::vector<int8_t>{-128, 127, -56}));
  std::vector<int64_t> big = {std::numeric_limits<int64_t>::max()};
  std::vector<int64_t> two = {2};
  reduce_into(big.data(), two.data(), 1, DType::kI64, ReduceOpKind::kProd);
  EXPECT_EQ(big[0], -2);

  std::vector<uint8_t> bools = {2, 0, 0x80, 1};
  std::vector<uint8_t> others = {0, 0, 1, 1};
  std::vector<uint8_t> r(4);
  reduce(r.data(), bools.data(), others.data(), 4, DType::kBool, ReduceOpKind::kSum);
  EXPECT_EQ(r, (std::vector<uint8_t>{1, 0, 1, 1}));
  reduce(r.data(), bools.data(), others.data(), 4, DType::kBool, ReduceOpKind::kBxor);
  EXPECT_EQ(r, (std::vector<uint8_t>{1, 0, 0, 0}));
  reduce(r.data(), bools.data(), others.data(), 4, DType::kBool, ReduceOpKind::kMin);
  EXPECT_EQ(r, (std::vector<uint8_t>{0, 0, 1, 1}));

  std::vector<int32_t> avg = {-7, 7, -1, 9};
  finish(avg.data(), 4, DType::kI32, ReduceOpKind::kAvg, 2);
  EXPECT_EQ(avg, (std::vector<int32_t>{-3, 3, 0, 4}));

  // f16: 1 + 2^-11 is a tie and goes to the even 1.0; (1 + 2^-10) + 2^-11 to 1 + 2^-9;
  // 65504 + 65504 overflows to inf. bf16: the same ties one bit coarser.
  std::vector<uint16_t> h = {0x3C00, 0x3C01, 0x7BFF};
  std::vector<uint16_t> hb = {0x1000, 0x1000, 0x7BFF};
  reduce_into(h.data(), hb.data(), 3, DType::kF16, ReduceOpKind::kSum);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3C00, 0x3C02, 0x7C00}));
  std::vector<uint16_t> bf = {0x3F80, 0x3F81};
  std::vector<uint16_t> bfb = {0x3B80, 0x3B80};
  reduce_into(bf.data(), bfb.data(), 2, DType::kBF16, ReduceOpKind::kSum);
  EXPECT_EQ(bf, (std::vector<uint16_t>{0x3F80, 0x3F82}));
}

TEST_F(ReduceKernelsTest, ReferenceConversionsAreSound) {
  for (uint32_t i = 0; i < (1u << 16); ++i) {
    auto h = static_cast<uint16_t>(i);
    if (std::isnan(testing::ref_f16_to_f32(h))) continue;
    ASSERT_EQ(testing::ref_f32_to_f16(testing::ref_f16_to_f32(h)), h) << i;
    ASSERT_EQ(testing::ref_f32_to_bf16(testing::ref_bf16_to_f32(h)), h) << i;
  }
  EXPECT_EQ(testing::ref_f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(testing::ref_f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(testing::ref_f32_to_f16(65520.0f), 0x7C00);  // the tie above 65504 rounds up
  EXPECT_EQ(testing::ref_f32_to_f16(65519.0f), 0x7BFF);
}

TEST_F(ReduceKernelsTest, UnsupportedPairsAndBadArgumentsThrow) {
  float f[2] = {};
  int32_t i[2] = {};
  uint8_t flag[2] = {};
  EXPECT_THROW(reduce_into(f, f, 2, DType::kF32, ReduceOpKind::kBand), InvalidArgument);
  EXPECT_THROW(reduce(f, f, f, 0, DType::kF64, ReduceOpKind::kBxor), InvalidArgument);
  EXPECT_THROW(reduce_into(i, i, 2, DType::kI32, ReduceOp::premul_sum(2)), InvalidArgument);
  EXPECT_THROW(premultiply(i, 2, DType::kI32, ReduceOp::premul_sum(2)), InvalidArgument);
  EXPECT_THROW(finish(flag, 2, DType::kBool, ReduceOpKind::kAvg, 2), InvalidArgument);
  EXPECT_THROW(finish(f, 2, DType::kF32, ReduceOpKind::kAvg, 0), InvalidArgument);
  try {
    reduce_into(f, f, 2, DType::kBF16, ReduceOpKind::kBor);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bor"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  // Count 0 touches nothing, so null pointers are fine.
  reduce(nullptr, nullptr, nullptr, 0, DType::kF32, ReduceOpKind::kSum);
}

TEST_F(ReduceKernelsTest, IsaSelectionFollowsTheCpu) {
  EXPECT_EQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_EQ(isa_name(Isa::kSse4), "sse4");
  EXPECT_EQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_EQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_EQ(best_supported_isa(), runnable_isas().back());
  for (Isa isa : kAllIsas) {
    if (cpu_runs(isa)) {
      EXPECT_NO_THROW(force_isa(isa)) << isa_name(isa);
      EXPECT_EQ(active_isa(), isa);
    } else {
      try {
        force_isa(isa);
        ADD_FAILURE() << "force_isa(" << isa_name(isa) << ") did not throw on a CPU without it";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(isa_name(isa)), std::string::npos) << e.what();
      }
      EXPECT_NE(active_isa(), isa);
    }
  }
}

// The setting is read once per process, so each case runs in a fresh child process.
TEST(ReduceIsaSetting, EnvironmentChoosesTheKernels) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TDIST_REDUCE_ISA", "scalar", 1);
        std::_Exit(active_isa() == Isa::kScalar ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("TDIST_REDUCE_ISA", "AUTO", 1);
        std::_Exit(active_isa() == best_supported_isa() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("TDIST_REDUCE_ISA", "neon9", 1);
        try {
          active_isa();
        } catch (const InvalidArgument& e) {
          bool named = std::string(e.what()).find("TDIST_REDUCE_ISA='neon9'") != std::string::npos;
          std::_Exit(named ? 0 : 2);
        }
        std::_Exit(1);
      },
      ::testing::ExitedWithCode(0), "");
  if (!cpu_runs(Isa::kAvx512)) {
    EXPECT_EXIT(
        {
          setenv("TDIST_REDUCE_ISA", "avx512", 1);
          try {
            active_isa();
          } catch (const InvalidArgument&) {
            std::_Exit(0);
          }
          std::_Exit(1);
        },
        ::testing::ExitedWithCode(0), "");
  }
}

}  // namespace
}  // namespace tdist::core
