// tdist-bench collectives: buffer layout, one call of each collective, and its check.
//
// Sizes follow nccl-tests: a step of B bytes is count = B / dtype size elements; for
// all_gather, gather, scatter, reduce_scatter and all_to_all each rank's block is
// count / world elements (the "count" column) and the size column is the larger of the
// send and receive buffers. A CollRunner owns exactly the buffers this rank needs at the
// largest size (none where the API allows a null buffer, e.g. gather's recv off-root),
// so buffer_bytes() plus the library's scratch is the whole cost of the operation.
//
// Not thread-safe; one runner per rank, driven in the same order on every rank (its
// calls are collective). Errors from the process group propagate (tdist::Error).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tdist/process_group.h"
#include "tdist_bench/data.h"
#include "tdist_bench/memory.h"
#include "tdist_bench/options.h"

namespace tdist_bench {

bool is_reduction(Coll c);
bool is_rooted(Coll c);
// True where torch defines an in-place form that this tool runs with --inplace 1.
bool has_in_place(Coll c);
// nccl-tests' bus-bandwidth factor for `world` ranks.
double bus_factor(Coll c, int world);

// Element counts of one step on one rank.
struct Layout {
  size_t count = 0;       // passed to the call: elements per rank (per block)
  size_t send_count = 0;  // elements this rank's send buffer holds (0: no send buffer)
  size_t recv_count = 0;  // elements this rank's recv buffer holds (0: no recv buffer)
  size_t size_bytes = 0;  // the size column: the larger buffer on any rank, in bytes
};

Layout layout_for(Coll c, size_t bytes, tdist::DType dtype, int world, int rank, int root,
                  bool in_place);

class CollRunner {
 public:
  // Allocates the buffers for `max_bytes` (uninitialised until fill()).
  CollRunner(tdist::ProcessGroup& pg, Coll coll, const Options& options, size_t max_bytes);

  // Chooses the step; bytes <= max_bytes.
  void set_size(size_t bytes);
  const Layout& layout() const { return layout_; }

  // Writes this rank's inputs and poisons what the call must overwrite.
  void fill();
  // One call, waited for.
  void run_once();
  // Wrong elements on this rank after fill() then run_once().
  int64_t count_wrong_elements() const;

  // Bytes of the buffers this rank holds.
  size_t buffer_bytes() const { return send_.size() + recv_.size(); }

 private:
  unsigned char* send_ptr() const;  // the send side, in place or not
  unsigned char* block(unsigned char* base, int index) const;

  tdist::ProcessGroup& pg_;
  const Coll coll_;
  const Options& options_;
  const int rank_;
  const int world_;
  const size_t elem_;  // bytes per element
  const bool in_place_;
  Pattern pattern_;
  Layout layout_;
  PageBuffer send_;
  PageBuffer recv_;
};

}  // namespace tdist_bench
