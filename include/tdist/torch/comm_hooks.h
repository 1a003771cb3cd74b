// Communication hooks of DistributedDataParallel: how one bucket of gradients is reduced
// across ranks (torch.distributed.algorithms.ddp_comm_hooks in C++).
//
// A hook sees a GradBucket: the bucket's flat gradient buffer, its position in launch order
// and its parameters. DDP calls, for every bucket of a synchronized backward pass:
//   run(group, bucket)     on the backward thread as soon as the bucket is full (or, with
//                          CommOverlap::kAfterBackward, once backward computed every
//                          gradient), in bucket order on every rank. It starts communication
//                          and returns its Work without waiting for it (this is what overlaps
//                          communication with the rest of backward). It must issue the same
//                          collectives on every rank. Tensors the Work reads or writes must
//                          stay alive until finish (keep them in the hook). bucket.buffer may
//                          be the parameter's gradient itself (a bucket of one parameter).
//   finish(group, bucket)  at the end of backward, in bucket order, after run's Work
//                          completed. It leaves the AVERAGE over ranks of the gradients in
//                          bucket.buffer (DDP then hands it to the parameters). It may issue
//                          further collectives and wait for them (multi-stage hooks such as
//                          PowerSGD run their later stages here).
// run is called with DDP's internal lock held: a hook must not call back into its DDP.
// Either call may throw; the backward pass then fails with that error.
//
// A hook object keeps per-bucket state (indexed by GradBucket::index), so give each DDP its
// own instance. Buckets are rebuilt once, before the second iteration, which renumbers
// them; stateful hooks start after that (PowerSGD's start_powerSGD_iter >= 2).
//
// Thread-safety: DDP calls a hook from one backward thread at a time. The factories are
// thread-safe.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/work.h"

namespace tdist::torch {

// One bucket of gradients, as DDP hands it to a CommHook.
struct GradBucket {
  size_t index = 0;      // position in launch order (0 is launched first)
  bool is_last = false;  // the last bucket of the pass
  // The bucket's gradients back to back: flat, contiguous, one dtype, on the parameters'
  // device (CPU or CUDA; with CUDA, run() is called with torch's current stream set to
  // DDP's side stream, and the tensor collectives take the bucket as it is).
  ::torch::Tensor buffer;
  // Views of `buffer`, one per parameter, shaped like it (writing them writes `buffer`).
  std::vector<::torch::Tensor> gradients;
  std::vector<::torch::Tensor> parameters;  // the parameters, in the order of `gradients`
};

class CommHook {
 public:
  virtual ~CommHook() = default;

  // Starts reducing `bucket` over `group`; returns the Work that completes when the
  // communication it started has finished.
  virtual WorkPtr run(ProcessGroup& group, const GradBucket& bucket) = 0;

  // Completes the reduction after run's Work finished: bucket.buffer must then hold the
  // average over ranks. The default does nothing (run's Work already left it there).
  virtual void finish(ProcessGroup& group, const GradBucket& bucket);
};

// The default: all_reduce of the buffer with ReduceOpKind::kAvg.
std::shared_ptr<CommHook> allreduce_hook();

// Casts the buffer to float16 (bfloat16) and divides it by the world size, all_reduces
// the 16-bit copy with a sum, and casts back: half the bytes on the wire, at 16-bit
// precision (about 3 significant digits for float16, 2 for bfloat16).
std::shared_ptr<CommHook> fp16_compress_hook();
std::shared_ptr<CommHook> bf16_compress_hook();

// PowerSGD (Vogels et al., 2019), as torch's powerSGD_hook: every gradient that is a
// matrix (n x m after flattening trailing dimensions) and where rank r saves enough
// (n*m > (n+m)*r*min_compression_rate) is sent as two thin factors P (n x r) and Q
// (m x r) instead: P = M Q, all_reduce P, orthogonalize P, Q = M^T P, all_reduce Q,
// M ~ P Q^T. Other gradients are all_reduced uncompressed. With error feedback, what
// compression lost on this rank is added to the next iteration's bucket; with warm start,
// Q is reused across iterations. The first start_powerSGD_iter iterations use plain
// all_reduce.
struct PowerSGDOptions {
  int64_t matrix_approximation_rank = 1;
  // Iterations of plain all_reduce first; >= 2 when use_error_feedback or warm_start
  // (buckets are rebuilt after the first iteration, which renumbers them).
  int64_t start_powerSGD_iter = 1000;
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  // Added to column norms before dividing; with 0, an all-zero column stays zero.
  double orthogonalization_epsilon = 0;
  // Seeds the random initial Q (the same on every rank, different each time).
  uint64_t random_seed = 0;
};

// InvalidArgument for a rank < 1, a negative start_powerSGD_iter, or start_powerSGD_iter
// < 2 with error feedback or warm start.
std::shared_ptr<CommHook> powerSGD_hook(PowerSGDOptions options = {});

}  // namespace tdist::torch
