// The AVX-512 kernels: the generic loops on 64-byte vectors compiled with
// -mavx512f/bw/vl/dq, and f16 converted 16 at a time with vcvtph2ps/vcvtps2ph
// (nearest-even).
#include <immintrin.h>

#include "core/reduce_kernels_impl.h"

namespace tdist::core {
namespace {

// The zero-masked forms with an all-ones mask: the unmasked intrinsics trip GCC 12's
// -Wmaybe-uninitialized on their internal _mm512_undefined_ps().
struct Avx512F16Codec : LoadStoreSteps<Avx512F16Codec> {
  using Storage = uint16_t;
  using Compute = float;
  static constexpr size_t kLanes = 16;
  static constexpr size_t kStepBytes = kLanes * sizeof(uint16_t);
  static constexpr __mmask16 kAll = 0xFFFF;
  using V = Vec<float, kLanes>;
  static V load(const unsigned char* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return (V)_mm512_maskz_cvtph_ps(kAll, h);
  }
  static void store(V v, unsigned char* p) {
    __m256i h =
        _mm512_maskz_cvtps_ph(kAll, (__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
};

}  // namespace

const KernelTable& avx512_kernels() {
  static const KernelTable kTable = make_table<64, Avx512F16Codec>(Isa::kAvx512);
  return kTable;
}

}  // namespace tdist::core
