// The portable kernels: no ISA-specific flags, 16-byte vectors that the compiler maps to
// the target's baseline (SSE2 on x86-64, NEON on aarch64, scalar code elsewhere). The
// fallback on every CPU.
#include "core/reduce_kernels_impl.h"

namespace tdist::core {

const KernelTable& scalar_kernels() {
  static const KernelTable kTable = make_table<16>(Isa::kScalar);
  return kTable;
}

}  // namespace tdist::core
