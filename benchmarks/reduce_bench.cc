// Micro-benchmarks of the reduction kernels against memcpy, in one run so the figures
// are comparable: quote the ratio f32-sum / memcpy, never a lone number.
//
// Byte convention (bytes/s = bytes touched in memory per second):
//   memcpy(dst, src, N)        1 read + 1 write   = 2 x N bytes
//   reduce_into(dst, src, N)   2 reads + 1 write  = 3 x N bytes  (dst = dst op src)
// where N is the buffer size in bytes (the benchmark's argument). Both touch two
// buffers of N bytes, so at equal N the working sets match. Buffers are page-aligned:
// with src and dst at different page offsets, glibc's memcpy (rep movsb) can be many
// times slower on some CPUs, which would flatter the kernels.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "core/reduce_kernels.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::core {
namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};

class Buffer {
 public:
  explicit Buffer(int64_t bytes)
      : size_(static_cast<size_t>(bytes)),
        data_(static_cast<unsigned char*>(std::aligned_alloc(4096, (size_ + 4095) / 4096 * 4096))) {
    if (!data_) throw std::bad_alloc();
  }
  unsigned char* data() { return data_.get(); }
  size_t size() const { return size_; }

 private:
  size_t size_;
  std::unique_ptr<unsigned char, FreeDeleter> data_;
};

// A page-aligned buffer of `bytes` bytes of small, finite `dtype` values (no denormals).
Buffer make_buffer(DType dtype, int64_t bytes, double value) {
  Buffer buf(bytes);
  const size_t count = buf.size() / dtype_size(dtype);
  for (size_t i = 0; i < count; ++i) {
    unsigned char* p = buf.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::kF32: {
        float v = static_cast<float>(value);
        std::memcpy(p, &v, sizeof v);
        break;
      }
      case DType::kF64:
        std::memcpy(p, &value, sizeof value);
        break;
      case DType::kF16: {
        const uint16_t one = 0x3C00;
        std::memcpy(p, &one, sizeof one);
        break;
      }
      case DType::kBF16: {
        const uint16_t one = 0x3F80;
        std::memcpy(p, &one, sizeof one);
        break;
      }
      default:
        std::memset(p, 1, dtype_size(dtype));
        break;
    }
  }
  return buf;
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  auto src = make_buffer(DType::kU8, bytes, 1);
  auto dst = make_buffer(DType::kU8, bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), dst.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
}

void run_reduce_into(benchmark::State& state, DType dtype, ReduceOpKind op) {
  const int64_t bytes = state.range(0);
  auto src = make_buffer(dtype, bytes, 1e-3);
  auto dst = make_buffer(dtype, bytes, 1.0);
  const size_t count = dst.size() / dtype_size(dtype);
  for (auto _ : state) {
    reduce_into(dst.data(), src.data(), count, dtype, op);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * bytes);
  state.SetLabel(std::string(isa_name(active_isa())));
}

template <DType kDType, ReduceOpKind kOp>
void BM_ReduceInto(benchmark::State& state) {
  run_reduce_into(state, kDType, kOp);
}

// f32 sum on one forced ISA (0 scalar, 1 sse4, 2 avx2, 3 avx512).
void BM_F32SumOnIsa(benchmark::State& state) {
  const auto isa = static_cast<Isa>(state.range(1));
  try {
    force_isa(isa);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  run_reduce_into(state, DType::kF32, ReduceOpKind::kSum);
  force_isa(best_supported_isa());
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {4 * kKiB, 64 * kKiB, kMiB, 16 * kMiB}) b->Arg(n);
}

BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK(BM_ReduceInto<DType::kF32, ReduceOpKind::kSum>)->Apply(sizes);
BENCHMARK(BM_ReduceInto<DType::kF32, ReduceOpKind::kMin>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kF32, ReduceOpKind::kMax>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kF64, ReduceOpKind::kSum>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kF16, ReduceOpKind::kSum>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kBF16, ReduceOpKind::kSum>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kI32, ReduceOpKind::kSum>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kI8, ReduceOpKind::kProd>)->Arg(kMiB);
BENCHMARK(BM_ReduceInto<DType::kI64, ReduceOpKind::kMax>)->Arg(kMiB);
BENCHMARK(BM_F32SumOnIsa)->ArgsProduct({{kMiB}, {0, 1, 2, 3}});

}  // namespace
}  // namespace tdist::core

BENCHMARK_MAIN();
