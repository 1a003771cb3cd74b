// The SSE4.1 kernels: the generic loops on 16-byte vectors compiled with -msse4.1
// (blendv, pmulld, pminsd/pmaxsd, ...). f16 and bf16 use the software conversions.
#include "core/reduce_kernels_impl.h"

namespace tdist::core {

const KernelTable& sse4_kernels() {
  static const KernelTable kTable = make_table<16>(Isa::kSse4);
  return kTable;
}

}  // namespace tdist::core
