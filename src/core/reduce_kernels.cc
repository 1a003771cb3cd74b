// Dispatch for the reduction kernels: validates the (dtype, op) pair, picks the kernel
// table of the active ISA and calls the entry. The ISA is chosen on first use, from
// TDIST_REDUCE_ISA or else the best the CPU supports, and kept in an atomic pointer.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cctype>
#include <string>

#include "core/reduce_kernels.h"
#include "core/reduce_kernels_table.h"
#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::core {
namespace {

constexpr bool kX86 =
#if defined(__x86_64__) || defined(__i386__)
    true;
#else
    false;
#endif

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool cpu_supports(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kSse4:
      return __builtin_cpu_supports("sse4.1");
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma") && has_f16c();
  }
  return false;
#else
  return isa == Isa::kScalar;
#endif
}

const KernelTable& table_for(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::kScalar:
      break;
    case Isa::kSse4:
      return sse4_kernels();
    case Isa::kAvx2:
      return avx2_kernels();
    case Isa::kAvx512:
      return avx512_kernels();
  }
#endif
  (void)isa;
  return scalar_kernels();
}

constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kSse4, Isa::kAvx2, Isa::kAvx512};

Isa isa_from_setting() {
  std::string value = setting_string("TDIST_REDUCE_ISA");
  for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (value == "auto") return best_supported_isa();
  for (Isa isa : kAllIsas) {
    if (isa_name(isa) != value) continue;
    TDIST_CHECK(cpu_supports(isa), InvalidArgument, "environment setting TDIST_REDUCE_ISA='", value,
                "' asks for kernels this CPU does not support; it supports up to ",
                isa_name(best_supported_isa()));
    return isa;
  }
  TDIST_THROW(InvalidArgument, "environment setting TDIST_REDUCE_ISA='", value,
              "' is not one of auto, avx512, avx2, sse4, scalar");
}

std::atomic<const KernelTable*> g_active{nullptr};

const KernelTable& active_table() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  if (t == nullptr) [[unlikely]] {
    t = &table_for(isa_from_setting());
    g_active.store(t, std::memory_order_release);
  }
  return *t;
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  validate(op, dtype);
  if (count == 0) return;
  BinaryKernel kernel =
      active_table().binary[static_cast<size_t>(dtype)][static_cast<size_t>(op.kind)];
  kernel(dst, a, b, count);
}

void reduce_into(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  reduce(dst, dst, src, count, dtype, op);
}

void premultiply(void* data, size_t count, DType dtype, ReduceOp op) {
  validate(op, dtype);
  if (op.kind != ReduceOpKind::kPremulSum || count == 0) return;
  active_table().scale[static_cast<size_t>(dtype)](data, count, op.scale);
}

void finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size) {
  validate(op, dtype);
  if (op.kind != ReduceOpKind::kAvg) return;
  TDIST_CHECK(world_size >= 1, InvalidArgument, "finish(avg): world_size must be >= 1, got ",
              world_size);
  if (count == 0 || world_size == 1) return;
  active_table().divide[static_cast<size_t>(dtype)](data, count, world_size);
}

Isa active_isa() { return active_table().isa; }

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kSse4:
      return "sse4";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

Isa best_supported_isa() {
  if (!kX86) return Isa::kScalar;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kSse4}) {
    if (cpu_supports(isa)) return isa;
  }
  return Isa::kScalar;
}

void force_isa(Isa isa) {
  TDIST_CHECK(cpu_supports(isa), InvalidArgument, "force_isa: this CPU does not support the ",
              isa_name(isa), " reduction kernels; it supports up to ",
              isa_name(best_supported_isa()));
  g_active.store(&table_for(isa), std::memory_order_release);
}

}  // namespace tdist::core
