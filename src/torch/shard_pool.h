// fully_shard's host buffers (internal): the whole-size buffers a unit takes and returns
// every step (the all_gather output, the gathered parameters, the reduce-scatter input) and
// the sharded gradients come from one process-wide pool of blocks instead of malloc.
// Without it a CPU trainer chooses between glibc keeping freed blocks in its heap (hundreds
// of MiB more resident per rank) and returning every block at once (a fixed
// M_MMAP_THRESHOLD: each step faults its gigabytes of fresh pages in again, 2.3x slower at
// 34M parameters). The pool never holds more than the most it had lent out at once (its
// high water): freed blocks are kept for the next taker while the blocks lent and kept
// together stay within that, so the resident memory it adds is memory the step needs
// anyway at its peak. Device tensors go through their own (caching) allocator.
// Thread-safety: any thread (a block comes back when its last tensor dies, on whichever
// thread that is).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace tdist::torch::shard_pool {

// An uninitialized tensor of `sizes` with `options`; on the CPU its storage is a pooled
// block (returned to the pool when the storage dies).
::torch::Tensor empty(c10::IntArrayRef sizes, const ::torch::TensorOptions& options);

// Memory for a storage of `nbytes` on `device` (a pooled block on the CPU; the device's
// allocator elsewhere).
c10::DataPtr allocate(size_t nbytes, c10::Device device);

// What the pool holds now: lent out, and kept for reuse (bytes).
struct Usage {
  int64_t lent = 0;
  int64_t kept = 0;
  int64_t high_water = 0;
};
Usage usage();

}  // namespace tdist::torch::shard_pool
