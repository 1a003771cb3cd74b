#include "shard_pool.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/accumulate.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <new>
#include <vector>

#include "tdist/thread_annotations.h"

namespace tdist::torch::shard_pool {
namespace {

constexpr size_t kAlignment = 64;  // c10's CPU alignment

struct Block {
  void* data;
  size_t bytes;
};

class Pool {
 public:
  Block take(size_t bytes) {
    {
      MutexLock lock(mu_);
      // The smallest kept block that fits and is at most half as large again.
      auto best = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->bytes >= bytes && it->bytes <= bytes + bytes / 2 &&
            (best == kept_.end() || it->bytes < best->bytes)) {
          best = it;
        }
      }
      if (best != kept_.end()) {
        const Block b = *best;
        kept_.erase(best);
        kept_bytes_ -= b.bytes;
        lend(b.bytes);
        return b;
      }
      // A new block: the kept ones that would take the pool past its high water go first.
      lend(bytes);
      trim();
    }
    void* data = nullptr;
    if (posix_memalign(&data, kAlignment, std::max<size_t>(bytes, 1)) != 0) {
      MutexLock lock(mu_);
      lent_ -= bytes;
      throw std::bad_alloc();
    }
    return Block{data, bytes};
  }

  // Lent and kept together do not change: nothing to trim.
  void give(Block b) {
    MutexLock lock(mu_);
    lent_ -= b.bytes;
    kept_.push_back(b);
    kept_bytes_ += b.bytes;
  }

  Usage usage() {
    MutexLock lock(mu_);
    return Usage{static_cast<int64_t>(lent_), static_cast<int64_t>(kept_bytes_),
                 static_cast<int64_t>(high_water_)};
  }

 private:
  void lend(size_t bytes) TDIST_REQUIRES(mu_) {
    lent_ += bytes;
    high_water_ = std::max(high_water_, lent_);
  }

  // Frees kept blocks, the oldest first, while lent and kept exceed the high water.
  void trim() TDIST_REQUIRES(mu_) {
    while (!kept_.empty() && lent_ + kept_bytes_ > high_water_) {
      kept_bytes_ -= kept_.front().bytes;
      std::free(kept_.front().data);
      kept_.erase(kept_.begin());
    }
  }

  Mutex mu_;
  std::vector<Block> kept_ TDIST_GUARDED_BY(mu_);  // oldest first
  size_t kept_bytes_ TDIST_GUARDED_BY(mu_) = 0;
  size_t lent_ TDIST_GUARDED_BY(mu_) = 0;
  size_t high_water_ TDIST_GUARDED_BY(mu_) = 0;
};

Pool& pool() {
  static auto* p = new Pool;  // lives as long as any block (tensors outlive statics)
  return *p;
}

// The DataPtr's context: which block to give back.
void give_back(void* context) {
  auto* block = static_cast<Block*>(context);
  pool().give(*block);
  delete block;
}

}  // namespace

c10::DataPtr allocate(size_t nbytes, c10::Device device) {
  if (!device.is_cpu()) return c10::GetAllocator(device.type())->allocate(nbytes);
  auto* block = new Block(pool().take(nbytes));
  return c10::DataPtr(block->data, block, &give_back, device);
}

::torch::Tensor empty(c10::IntArrayRef sizes, const ::torch::TensorOptions& options) {
  if (!options.device().is_cpu()) return ::torch::empty(sizes, options);
  const size_t nbytes =
      static_cast<size_t>(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, allocate(nbytes, options.device()),
                       /*allocator=*/nullptr,
                       /*resizable=*/false);
  return ::torch::empty({0}, options.requires_grad(false)).set_(storage, 0, sizes);
}

Usage usage() { return pool().usage(); }

}  // namespace tdist::torch::shard_pool
