// The AVX2 kernels: the generic loops on 32-byte vectors compiled with -mavx2 -mfma
// -mf16c, and f16 converted 8 at a time with the F16C instructions (nearest-even).
#include <immintrin.h>

#include "core/reduce_kernels_impl.h"

namespace tdist::core {
namespace {

struct F16cCodec : LoadStoreSteps<F16cCodec> {
  using Storage = uint16_t;
  using Compute = float;
  static constexpr size_t kLanes = 8;
  static constexpr size_t kStepBytes = kLanes * sizeof(uint16_t);
  using V = Vec<float, kLanes>;
  static V load(const unsigned char* p) {
    return (V)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(V v, unsigned char* p) {
    __m128i h = _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
  }
};

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable kTable = make_table<32, F16cCodec>(Isa::kAvx2);
  return kTable;
}

}  // namespace tdist::core
