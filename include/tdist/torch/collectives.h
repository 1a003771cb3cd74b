// Tensor collectives: torch.distributed's functions for LibTorch tensors, on tdist's
// process groups (process_group.h). Each comes in a blocking form, which returns when
// the operation is complete on this rank, and an async form (`*_async`; `isend`/`irecv`
// for point-to-point, as torch names them) that returns a Work at once:
//
//   tdist::torch::all_reduce(grad);                                  // sum, default group
//   tdist::WorkPtr w = tdist::torch::all_reduce_async(grad, tdist::ReduceOpKind::kAvg, pg);
//   ...                                                               // compute meanwhile
//   w->wait();                                                        // grad holds the mean
//
// Groups: the last argument (`Group`) is the default group when left out
// (get_default_group(), Error when none is initialized) or a given group. A null
// shared_ptr is refused with InvalidArgument rather than taken for the default group:
// new_group()/split() return null on ranks that are not members, and those ranks must
// not take part. Ranks (src, dst) are ranks of that group, as torch's group_src and
// group_dst (not torch's older global src/dst); on the default group they are the same.
//
// Tensors: CPU or CUDA (with a LibTorch built with CUDA), strided, of a dtype types.h maps
// (f32 f64 f16 bf16 i8 u8 i32 i64 bool); anything else is InvalidArgument naming the dtype
// or device. All tensors of one call share a dtype and a device (InvalidArgument naming
// both devices otherwise).
//
// CUDA tensors (as torch.distributed does them): a group that takes device memory
// (`nccl`) gets the tensors' device pointers, and a CUDA tensor must be on the group's
// device (InvalidArgument naming both); a group that takes host memory only (tcp, shm,
// auto, mpi) gets them staged through pinned host memory on a side stream, as gloo does
// (the calling thread waits for the copy to the host, not for the collective). Either way
// the operation starts after the work queued on torch's current stream, and the Work has
// torch's semantics: wait() makes the caller's current CUDA stream wait for the operation
// (for a host group, after the host waited for the collective itself) and returns without
// blocking on the device; synchronize() blocks the host until it completed, copy-back
// included. Read an output on the stream that called wait(), or after synchronize(). A CPU
// tensor given to a group that takes device memory only is InvalidArgument. Non-contiguous tensors
// (transposed, sliced with a step, channels-last, a negated view) work: inputs are copied into
// contiguous temporaries when the call is made; outputs are computed in a temporary and copied into
// the caller's tensor when the operation completes, that is inside wait() or an is_completed() that
// returns true. List outputs (all_gather, gather, all_to_all) are filled the same way. So, as in
// torch, read an output only after wait(). An output whose elements may share memory (e.g. made by
// expand()) cannot receive a copy and is refused. Shape, size and list-length mismatches raise
// InvalidArgument before anything is sent; ranks that disagree with each other are detected by the
// backend where possible (DesyncError).
//
// Lifetime: as ProcessGroup's buffers, the tensors must outlive the operation: not
// resized, and not touched (outputs: not read either) until the Work completed. The Work
// holds references to every tensor and temporary the operation uses, so dropping the
// caller's handles or the Work early frees nothing under the running operation: an
// unfinished operation whose Work is dropped keeps its buffers until it completes, but
// then nothing is copied back.
//
// Failures of the operation itself (PeerError, TimeoutError, DesyncError) surface from
// wait() or the blocking call, as for ProcessGroup. Thread-safety: as ProcessGroup's;
// collectives must be issued in the same order on every rank of a group.
#pragma once

#include <torch/types.h>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/reduce_op.h"
#include "tdist/work.h"

namespace tdist::torch {

// The group a call runs on: the default group, or a given one (never null; see above).
class Group {
 public:
  Group() = default;
  template <std::derived_from<ProcessGroup> P>
  Group(std::shared_ptr<P> group)  // NOLINT(google-explicit-constructor)
      : group_(std::move(group)), given_(true) {}

  // The group to use; InvalidArgument naming `op` for a null group, Error when the
  // default group is wanted but not initialized.
  std::shared_ptr<ProcessGroup> resolve(const char* op) const;

 private:
  std::shared_ptr<ProcessGroup> group_;
  bool given_ = false;
};

// A scope whose tensor calls the calling thread waits for at once, as the blocking forms
// below do (they use one): inside it, an async form on CPU tensors runs its operation to
// completion before it returns (this thread runs it, copies results into the caller's
// tensors, and returns the group's Work, complete), and the operation's failure is thrown
// by the call itself. That saves the Work that otherwise wraps the group's until the
// copy-back (a few hundred ns a call). CUDA tensors are unaffected, and so are calls made
// while such a call waits (by a callback of another Work that finishes meanwhile on this
// thread): those stay asynchronous. Scopes nest; each belongs to the thread that made it
// and must end on it, in reverse order of making.
class CallerWaits {
 public:
  CallerWaits();
  ~CallerWaits();
  CallerWaits(const CallerWaits&) = delete;
  CallerWaits& operator=(const CallerWaits&) = delete;

 private:
  bool outer_;  // the thread's state before this scope
};

// Every collective below takes `where`, its caller's line (leave it defaulted): with
// TDIST_DEBUG=callsite it names the call in the collective's fingerprint
// (ProcessGroup::debug_callsite()), through a CallSite scope, so ranks that call from
// different lines get a DesyncError naming both.

// Element-wise `op` over every rank's `tensor`, in place.
void all_reduce(const ::torch::Tensor& tensor, ReduceOp op = ReduceOpKind::kSum, Group group = {},
                SourceLocation where = SourceLocation::current());
WorkPtr all_reduce_async(const ::torch::Tensor& tensor, ReduceOp op = ReduceOpKind::kSum,
                         Group group = {}, SourceLocation where = SourceLocation::current());

// Rank src's `tensor` is copied into every rank's `tensor`.
void broadcast(const ::torch::Tensor& tensor, int src, Group group = {},
               SourceLocation where = SourceLocation::current());
WorkPtr broadcast_async(const ::torch::Tensor& tensor, int src, Group group = {},
                        SourceLocation where = SourceLocation::current());

// Rank dst's `tensor` becomes `op` over every rank's `tensor`; the others' stay unchanged.
void reduce(const ::torch::Tensor& tensor, int dst, ReduceOp op = ReduceOpKind::kSum,
            Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr reduce_async(const ::torch::Tensor& tensor, int dst, ReduceOp op = ReduceOpKind::kSum,
                     Group group = {}, SourceLocation where = SourceLocation::current());

// outputs[r] = rank r's input. One output per rank, each of the input's shape and dtype.
void all_gather(const std::vector<::torch::Tensor>& outputs, const ::torch::Tensor& input,
                Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr all_gather_async(const std::vector<::torch::Tensor>& outputs, const ::torch::Tensor& input,
                         Group group = {}, SourceLocation where = SourceLocation::current());

// output (size() * input.numel() elements, any shape) holds rank r's input, flattened, in
// block r. In place when `input` is exactly block rank() of a contiguous `output`.
void all_gather_into_tensor(const ::torch::Tensor& output, const ::torch::Tensor& input,
                            Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr all_gather_into_tensor_async(const ::torch::Tensor& output, const ::torch::Tensor& input,
                                     Group group = {},
                                     SourceLocation where = SourceLocation::current());

// On dst, gather_list[r] = rank r's input (one per rank, each of the input's shape); the
// other ranks pass an empty list.
void gather(const ::torch::Tensor& input, const std::vector<::torch::Tensor>& gather_list, int dst,
            Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr gather_async(const ::torch::Tensor& input, const std::vector<::torch::Tensor>& gather_list,
                     int dst, Group group = {}, SourceLocation where = SourceLocation::current());

// Rank r's output = src's scatter_list[r] (one per rank, each of the output's shape, on
// src only; the other ranks pass an empty list).
void scatter(const ::torch::Tensor& output, const std::vector<::torch::Tensor>& scatter_list,
             int src, Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr scatter_async(const ::torch::Tensor& output,
                      const std::vector<::torch::Tensor>& scatter_list, int src, Group group = {},
                      SourceLocation where = SourceLocation::current());

// Rank r's output = `op` over every rank's inputs[r] (one per rank, each of the output's
// shape).
void reduce_scatter(const ::torch::Tensor& output, const std::vector<::torch::Tensor>& inputs,
                    ReduceOp op = ReduceOpKind::kSum, Group group = {},
                    SourceLocation where = SourceLocation::current());
WorkPtr reduce_scatter_async(const ::torch::Tensor& output,
                             const std::vector<::torch::Tensor>& inputs,
                             ReduceOp op = ReduceOpKind::kSum, Group group = {},
                             SourceLocation where = SourceLocation::current());

// Rank r's output = `op` over every rank's block r of input (size() * output.numel()
// elements, any shape, read flattened). In place when `output` is exactly block rank()
// of a contiguous `input`.
void reduce_scatter_tensor(const ::torch::Tensor& output, const ::torch::Tensor& input,
                           ReduceOp op = ReduceOpKind::kSum, Group group = {},
                           SourceLocation where = SourceLocation::current());
WorkPtr reduce_scatter_tensor_async(const ::torch::Tensor& output, const ::torch::Tensor& input,
                                    ReduceOp op = ReduceOpKind::kSum, Group group = {},
                                    SourceLocation where = SourceLocation::current());

// inputs[p] goes to rank p, whose outputs[r] receives it (r = this rank). One tensor per
// rank in each list; sizes may differ between peers, but outputs[p] must have as many
// elements as rank p's inputs[r] (a mismatch is a DesyncError).
void all_to_all(const std::vector<::torch::Tensor>& outputs,
                const std::vector<::torch::Tensor>& inputs, Group group = {},
                SourceLocation where = SourceLocation::current());
WorkPtr all_to_all_async(const std::vector<::torch::Tensor>& outputs,
                         const std::vector<::torch::Tensor>& inputs, Group group = {},
                         SourceLocation where = SourceLocation::current());

// input and output are split along dim 0: rows input_split_sizes[p] go to rank p, and
// output_split_sizes[p] rows come from it. Empty split sizes mean size(0) / size() rows
// each (size(0) must divide evenly).
void all_to_all_single(const ::torch::Tensor& output, const ::torch::Tensor& input,
                       const std::vector<int64_t>& output_split_sizes = {},
                       const std::vector<int64_t>& input_split_sizes = {}, Group group = {},
                       SourceLocation where = SourceLocation::current());
WorkPtr all_to_all_single_async(const ::torch::Tensor& output, const ::torch::Tensor& input,
                                const std::vector<int64_t>& output_split_sizes = {},
                                const std::vector<int64_t>& input_split_sizes = {},
                                Group group = {}, SourceLocation where = SourceLocation::current());

// Point-to-point, matched by peer and tag (not ordered with collectives). The receiving
// tensor must have the sent tensor's number of elements and dtype.
void send(const ::torch::Tensor& tensor, int dst, Group group = {}, uint32_t tag = 0);
void recv(const ::torch::Tensor& tensor, int src, Group group = {}, uint32_t tag = 0);
WorkPtr isend(const ::torch::Tensor& tensor, int dst, Group group = {}, uint32_t tag = 0);
WorkPtr irecv(const ::torch::Tensor& tensor, int src, Group group = {}, uint32_t tag = 0);
// One send or receive of batch_isend_irecv (torch.distributed.P2POp).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  ::torch::Tensor tensor;  // read by a send, written by a receive
  int peer;                // group rank
  uint32_t tag = 0;
};
// The sends and receives as one operation of the group (ProcessGroup::batch_isend_irecv):
// posted together, in any order across peers without deadlock; one Work for all of them.
WorkPtr batch_isend_irecv(const std::vector<P2POp>& ops, Group group = {});
// From any source (ProcessGroup::irecv_any): the Work's source_rank() names the sender once
// complete; recv_any returns it.
WorkPtr irecv_any(const ::torch::Tensor& tensor, Group group = {}, uint32_t tag = 0);
int recv_any(const ::torch::Tensor& tensor, Group group = {}, uint32_t tag = 0);

// Coalesced: many tensors (of one dtype, any shapes) as one operation of the group,
// through one buffer. all_reduce of every tensor, in place:
WorkPtr all_reduce_coalesced_async(const std::vector<::torch::Tensor>& tensors,
                                   ReduceOp op = ReduceOpKind::kSum, Group group = {},
                                   SourceLocation where = SourceLocation::current());
// outputs[r][i] = rank r's inputs[i] (outputs holds one list per rank, each like inputs):
WorkPtr all_gather_coalesced_async(const std::vector<std::vector<::torch::Tensor>>& outputs,
                                   const std::vector<::torch::Tensor>& inputs, Group group = {},
                                   SourceLocation where = SourceLocation::current());
// all_gather_into_tensor(outputs[i], inputs[i]) for every i:
WorkPtr all_gather_into_tensor_coalesced_async(const std::vector<::torch::Tensor>& outputs,
                                               const std::vector<::torch::Tensor>& inputs,
                                               Group group = {},
                                               SourceLocation where = SourceLocation::current());
// reduce_scatter_tensor(outputs[i], inputs[i], op) for every i:
WorkPtr reduce_scatter_tensor_coalesced_async(const std::vector<::torch::Tensor>& outputs,
                                              const std::vector<::torch::Tensor>& inputs,
                                              ReduceOp op = ReduceOpKind::kSum, Group group = {},
                                              SourceLocation where = SourceLocation::current());

// The sum over every rank of a sparse COO `tensor` (CPU; every rank's of one shape and
// dtype), coalesced; blocking. Its indices and values are gathered from every rank (gloo's
// way): traffic grows with the ranks' non-zeros. InvalidArgument on every rank when the
// ranks' shapes differ.
::torch::Tensor all_reduce_sparse(const ::torch::Tensor& tensor, Group group = {},
                                  SourceLocation where = SourceLocation::current());

// Returns (or completes) once every rank of the group has entered the barrier.
void barrier(Group group = {}, SourceLocation where = SourceLocation::current());
WorkPtr barrier_async(Group group = {}, SourceLocation where = SourceLocation::current());

namespace detail {
// The message for a tensor on a device other than the CPU (the device check's wording,
// testable without such a device).
std::string device_error(const c10::Device& device);
}  // namespace detail

}  // namespace tdist::torch
