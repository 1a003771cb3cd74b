// ProcessGroup: a set of ranks that run collectives together, created by a backend.
//
// The API mirrors torch.distributed on raw buffers: a pointer, an element count and a
// DType. Every call returns a Work at once (work.h); `->wait()` makes it blocking.
//
// Contract for callers:
//  - Collectives on one group must be issued in the same order on every rank of the
//    group, with matching counts, dtypes, ops and roots. Each carries the group's
//    sequence number, so a mismatch is detected where possible (DesyncError).
//  - Buffers must stay valid and untouched until the returned Work completed.
//  - In-place forms pass the same pointer as send and recv (all_gather in place: send
//    is recv + rank * count). Counts of 0 are allowed and complete at once.
//  - Invalid arguments (root, rank or peer out of range, null buffers with a non-zero
//    count, unsupported op for the dtype) raise InvalidArgument before anything is sent.
//  - A dead peer or broken connection aborts the group: every pending and later
//    operation fails with PeerError on every rank, within seconds. An aborted group
//    must be recreated. abort() does the same on purpose.
//  - Blocking operations end with TimeoutError after timeout() (the group's, default
//    TDIST_TIMEOUT); Work::wait(deadline) bounds a single wait.
//
// Sub-groups: new_group(ranks) and split(color, key) are collective calls over this
// group (every rank calls them, in the same order as its other collectives); members get
// the new group, others nullptr. Sub-groups run concurrently with their parent.
//
// Thread-safety: all methods may be called from any thread; operations issued from
// several threads are ordered by the time each call entered the group.
// This base class never names a backend: backends register a factory by name
// (backend.h) and derive from it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "tdist/store.h"
#include "tdist/work.h"

namespace tdist {

// One send or receive of batch_isend_irecv.
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  void* data;  // read for kSend, written for kRecv
  size_t count;
  DType dtype;
  int peer;  // group rank
  uint32_t tag = 0;
};

class ProcessGroup : public std::enable_shared_from_this<ProcessGroup> {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The backend's registered name, e.g. "tcp".
  virtual std::string backend_name() const = 0;
  const std::shared_ptr<Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Rank translation between this group and the world group it descends from.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank(int group_rank) const;  // InvalidArgument when out of range
  int group_rank(int global_rank) const;  // -1 when that rank is not a member

  // ---- collectives (same order on every rank) ----

  // recv[i] = op over all ranks of send[i].
  virtual WorkPtr all_reduce(const void* send, void* recv, size_t count, DType dtype,
                             ReduceOp op) = 0;
  WorkPtr all_reduce(void* data, size_t count, DType dtype, ReduceOp op = ReduceOpKind::kSum) {
    return all_reduce(data, data, count, dtype, op);
  }

  // Root's data is copied to every rank's data.
  virtual WorkPtr broadcast(void* data, size_t count, DType dtype, int root) = 0;

  // recv (significant at root only; may be null elsewhere) = op over all ranks of send.
  virtual WorkPtr reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         int root) = 0;

  // recv holds size() blocks of count elements, rank r's send in block r.
  virtual WorkPtr all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Variable sizes: rank r contributes recv_counts[r] elements (send_count on this rank);
  // recv holds the blocks back to back in rank order.
  virtual WorkPtr all_gatherv(const void* send, size_t send_count, void* recv,
                              std::span<const size_t> recv_counts, DType dtype) = 0;

  // Root's recv (size() * count elements) gets rank r's send in block r.
  virtual WorkPtr gather(const void* send, void* recv, size_t count, DType dtype, int root) = 0;
  // Rank r's recv gets block r of root's send (size() * count elements).
  virtual WorkPtr scatter(const void* send, void* recv, size_t count, DType dtype, int root) = 0;

  // send holds size() blocks of count elements; rank r's recv = op over ranks of block r.
  virtual WorkPtr reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                 ReduceOp op) = 0;

  // Block p of send goes to rank p; block p of recv comes from rank p (count each). send
  // may equal recv (in place; the backend then works from a copy of send).
  virtual WorkPtr all_to_all(const void* send, void* recv, size_t count, DType dtype) = 0;
  // Variable sizes: send_counts[p] elements go to rank p, recv_counts[p] come from it;
  // blocks are back to back in rank order.
  virtual WorkPtr all_to_allv(const void* send, std::span<const size_t> send_counts, void* recv,
                              std::span<const size_t> recv_counts, DType dtype) = 0;

  virtual WorkPtr barrier() = 0;

  // ---- point-to-point (matched by peer and tag; not ordered with collectives) ----
  virtual WorkPtr isend(const void* data, size_t count, DType dtype, int dst, uint32_t tag = 0) = 0;
  virtual WorkPtr irecv(void* data, size_t count, DType dtype, int src, uint32_t tag = 0) = 0;
  void send(const void* data, size_t count, DType dtype, int dst, uint32_t tag = 0) {
    isend(data, count, dtype, dst, tag)->wait();
  }
  void recv(void* data, size_t count, DType dtype, int src, uint32_t tag = 0) {
    irecv(data, count, dtype, src, tag)->wait();
  }
  // Issues every op at once; the Work completes when all have.
  virtual WorkPtr batch_isend_irecv(std::span<const P2POp> ops) = 0;

  // ---- sub-groups (collective over this group) ----
  // `ranks` are ranks of this group (any order; sorted as torch does): the new group's
  // rank i is the i-th smallest. Returns nullptr on ranks that are not members.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks);
  // Ranks with the same color form a group, ordered by (key, rank); a negative color
  // joins none and gets nullptr.
  std::shared_ptr<ProcessGroup> split(int color, int key);

  // Aborts the group: pending and later operations fail with PeerError on every rank.
  virtual void abort() = 0;

 protected:
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout,
               std::vector<int> global_ranks = {});

  // Creates this backend's group over `store` for the members of a new sub-group.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank,
                                                      int size, std::vector<int> global_ranks) = 0;

 private:
  std::shared_ptr<ProcessGroup> make_member_group(const std::vector<int>& members,
                                                  const std::string& name);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> global_ranks_;
  uint64_t subgroups_made_ = 0;  // same count on every rank (collective calls)
};

}  // namespace tdist
