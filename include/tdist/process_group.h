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
//    This class checks them, with one set of texts for every backend, before it calls
//    the backend.
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
// Blocking calls: inside a WaitsAtOnce scope (below) a collective may run on the calling
// thread before the call returns.
// This base class never names a backend: backends register a factory by name
// (backend.h) and derive from it, implementing the protected do_* methods that the
// public, non-virtual ones call once the arguments are checked and numbered.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/device.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"
#include "tdist/source_location.h"
#include "tdist/store.h"
#include "tdist/thread_annotations.h"
#include "tdist/work.h"

namespace tdist {
namespace core {
struct OpFingerprint;
}
namespace diag {
class FlightRecorder;
}

// A scope in which this thread waits for each collective it issues at once, as in
// `pg.all_reduce(...)->wait()`. A built-in group (tcp, shm, auto, cuda_ipc) then runs the
// collective on this thread inside the call when none of its operations is queued or
// running: no queue, no Work to hand over, no wake-up of its worker. It returns the Work
// finished (a host group the same finished Work for every successful call of a kind),
// and wait() rethrows its error as usual. Otherwise the collective is queued
// as outside a scope. Point-to-point calls are unchanged. Scopes nest;
// WaitsAtOnce(false) turns it off within. Code that runs on this thread during the
// operation (callbacks) issues as outside any scope.
class WaitsAtOnce {
 public:
  explicit WaitsAtOnce(bool on = true);
  ~WaitsAtOnce();
  WaitsAtOnce(const WaitsAtOnce&) = delete;
  WaitsAtOnce& operator=(const WaitsAtOnce&) = delete;
  // Whether the calling thread is in a scope that is on.
  static bool active();

 private:
  bool outer_;
};

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
  // The kinds of memory its calls take, as memory_bit()s (tdist/device.h): host memory
  // unless the backend says otherwise (`nccl`: CUDA device memory only).
  virtual unsigned memory_kinds() const { return memory_bit(MemoryKind::kHost); }
  const std::shared_ptr<Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Whether TDIST_DEBUG was "detail" when the group was made: each collective's fingerprint,
  // with the caller's CollectiveDetail, is compared across ranks before it runs.
  bool debug_detail() const { return debug_detail_; }
  // Whether TDIST_DEBUG was "callsite" or "detail" when the group was made: each collective's
  // fingerprint includes its call site (the outermost CallSite of the calling thread, else
  // the `where` of the call), so ranks that call the same operation from different lines
  // get a DesyncError naming both lines ("rank 0 called all_reduce #7 f32 x4 sum at
  // train.cc:88; rank 1 called all_reduce #7 f32 x4 sum at train.cc:91"). On the wire
  // (tcp, shm, auto, cuda_ipc), and through the store's check under detail.
  bool debug_callsite() const { return debug_callsite_; }

  // Rank translation between this group and the world group it descends from.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank(int group_rank) const;  // InvalidArgument when out of range
  int group_rank(int global_rank) const;  // -1 when that rank is not a member

  // ---- collectives (same order on every rank) ----
  // Each checks its arguments (InvalidArgument, the same text for every backend), takes
  // the group's next sequence number and hands the call to the backend (do_* below).
  // `where` is the caller's line, which TDIST_DEBUG=callsite checks (debug_callsite()).

  // recv[i] = op over all ranks of send[i].
  WorkPtr all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                     SourceLocation where = SourceLocation::current());
  WorkPtr all_reduce(void* data, size_t count, DType dtype, ReduceOp op = ReduceOpKind::kSum,
                     SourceLocation where = SourceLocation::current()) {
    return all_reduce(data, data, count, dtype, op, where);
  }

  // Root's data is copied to every rank's data.
  WorkPtr broadcast(void* data, size_t count, DType dtype, int root,
                    SourceLocation where = SourceLocation::current());

  // recv (significant at root only; may be null elsewhere) = op over all ranks of send.
  WorkPtr reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root,
                 SourceLocation where = SourceLocation::current());

  // recv holds size() blocks of count elements, rank r's send in block r.
  WorkPtr all_gather(const void* send, void* recv, size_t count, DType dtype,
                     SourceLocation where = SourceLocation::current());
  // Variable sizes: rank r contributes recv_counts[r] elements (send_count on this rank);
  // recv holds the blocks back to back in rank order.
  WorkPtr all_gatherv(const void* send, size_t send_count, void* recv,
                      std::span<const size_t> recv_counts, DType dtype,
                      SourceLocation where = SourceLocation::current());

  // Root's recv (size() * count elements) gets rank r's send in block r.
  WorkPtr gather(const void* send, void* recv, size_t count, DType dtype, int root,
                 SourceLocation where = SourceLocation::current());
  // Rank r's recv gets block r of root's send (size() * count elements).
  WorkPtr scatter(const void* send, void* recv, size_t count, DType dtype, int root,
                  SourceLocation where = SourceLocation::current());

  // send holds size() blocks of count elements; rank r's recv = op over ranks of block r.
  WorkPtr reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                         SourceLocation where = SourceLocation::current());

  // Block p of send goes to rank p; block p of recv comes from rank p (count each). send
  // may equal recv (in place; the backend then works from a copy of send).
  WorkPtr all_to_all(const void* send, void* recv, size_t count, DType dtype,
                     SourceLocation where = SourceLocation::current());
  // Variable sizes: send_counts[p] elements go to rank p, recv_counts[p] come from it;
  // blocks are back to back in rank order.
  WorkPtr all_to_allv(const void* send, std::span<const size_t> send_counts, void* recv,
                      std::span<const size_t> recv_counts, DType dtype,
                      SourceLocation where = SourceLocation::current());

  WorkPtr barrier(SourceLocation where = SourceLocation::current());

  // torch.distributed.monitored_barrier: a blocking barrier that says which ranks did not
  // arrive. It runs through store(), not the backend's collectives, so it works on every
  // backend and takes no sequence number; its calls have their own count per group, and
  // every rank must make the same calls. Each rank announces its arrival; rank 0 waits
  // for the others until `timeout` (default timeout()) and publishes the outcome, which
  // the others wait for (`timeout` plus 1 s) and share. When ranks are missing at rank
  // 0's deadline, every rank that took part, and a missing one that arrives later,
  // throws TimeoutError naming the lowest missing rank (all of them with
  // wait_all_ranks), e.g. "monitored_barrier #3 (group of 4, tcp): rank 2 did not arrive
  // within 500 ms"; when rank 0 does not answer, the others throw TimeoutError naming
  // rank 0. A group of one returns at once. InvalidArgument for a negative timeout.
  void monitored_barrier(std::optional<std::chrono::milliseconds> timeout = std::nullopt,
                         bool wait_all_ranks = false);

  // ---- point-to-point (matched by peer and tag; not ordered with collectives) ----
  // Checked as collectives are, but not numbered. On the built-in backends a send of
  // 1 MiB or more completes only once the peer posted its receive (as gloo's and MPI's
  // large sends do), so that no such message is ever buffered; smaller ones may complete
  // before.
  WorkPtr isend(const void* data, size_t count, DType dtype, int dst, uint32_t tag = 0);
  WorkPtr irecv(void* data, size_t count, DType dtype, int src, uint32_t tag = 0);
  void send(const void* data, size_t count, DType dtype, int dst, uint32_t tag = 0) {
    isend(data, count, dtype, dst, tag)->wait();
  }
  void recv(void* data, size_t count, DType dtype, int src, uint32_t tag = 0) {
    irecv(data, count, dtype, src, tag)->wait();
  }
  // Issues every op at once; the Work completes when all have.
  WorkPtr batch_isend_irecv(std::span<const P2POp> ops);

  // ---- receiving from any source ----
  // torch's recv/irecv without src (MPI_ANY_SOURCE): receives the next message with `tag`
  // from whichever other rank sends one; the Work's source_rank() then names that rank
  // (work.h). Matched as MPI does, with irecv's on the same tag: a message goes to the
  // earliest posted receive that can take it (irecv of its sender or irecv_any), a new
  // receive takes the earliest message that arrived for it (irecv_any: from whichever rank,
  // in arrival order), and each sender's messages stay in send order. The message must have
  // count elements, as for irecv, and large sends still wait for their receive.
  // InvalidArgument as for irecv (dtype, null buffer), and on a group of one; a backend that
  // cannot receive from any source (nccl) refuses with InvalidArgument "irecv_any: receiving
  // from any source is not supported by <backend>". Failures, timeouts and aborts as irecv.
  WorkPtr irecv_any(void* data, size_t count, DType dtype, uint32_t tag = 0);
  // Blocking: waits, then returns the group rank the message came from.
  int recv_any(void* data, size_t count, DType dtype, uint32_t tag = 0) {
    WorkPtr work = irecv_any(data, count, dtype, tag);
    work->wait();
    return work->source_rank();
  }

  // ---- sub-groups (collective over this group) ----
  // `ranks` are ranks of this group (any order; sorted as torch does): the new group's
  // rank i is the i-th smallest. Returns nullptr on ranks that are not members.
  std::shared_ptr<ProcessGroup> new_group(std::vector<int> ranks);
  // Ranks with the same color form a group, ordered by (key, rank); a negative color
  // joins none and gets nullptr. The tcp, shm, auto and cuda_ipc backends build it on this
  // group's connections (no new connection; transport/context_comm.h): its abort() fails
  // it alone, but a lost link fails both. new_group connects anew.
  std::shared_ptr<ProcessGroup> split(int color, int key);

  // torch's shrink (Backend::shrink): a new group of this group's ranks without
  // `exclude` (ranks of this group, any order), made after ranks died or hung. Only the
  // remaining ranks call it, each with the same list, in the same order as their other
  // shrinks of this group; the excluded ones need not be alive. The new group's ranks
  // keep their order (rank i is the i-th smallest remaining); it connects anew through
  // this group's store, so it works after this group was aborted, as long as the store
  // lives (tdistrun's agent or etcd hosts it; rank 0 hosting it must not be excluded).
  // This group is left as it is: abort() it first when it may still wait for the excluded.
  // InvalidArgument on a rank out of range or listed twice, this rank listed, or nobody
  // left; TimeoutError when a remaining rank does not call within timeout().
  std::shared_ptr<ProcessGroup> shrink(std::vector<int> exclude);

  // Aborts the group: pending and later operations fail with PeerError on every rank.
  virtual void abort() = 0;

  // ---- debugging ----
  // "default" for init_process_group's group; a sub-group's is its path below it, e.g.
  // "group/0" or "split/1/color0" (the same on every member).
  const std::string& name() const { return name_; }
  // The flight record: this group's last TDIST_FLIGHT_RECORDER_SIZE collectives (sequence
  // number, operation, dtype, count, root, reduce op, state, queued/started/finished times
  // on the steady clock in ns) as one JSON object with the group's name, backend, rank,
  // size and global ranks. The built-in backends record start and finish; others only
  // the queueing. dump_flight_records() (distributed.h) writes every group's to a file.
  std::string flight_record() const;
  // The recorder itself, for tdist's own status and hang reports (an internal type).
  const diag::FlightRecorder& flight_recorder() const { return *recorder_; }

 protected:
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout,
               std::vector<int> global_ranks = {});

  // Creates this backend's group over `store` for the members of a new sub-group.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> store, int rank,
                                                      int size, std::vector<int> global_ranks) = 0;
  // The same for split(): `members` are the new group's ranks as ranks of this group, by
  // new rank. A backend may build it from this group's connections; by default
  // make_subgroup.
  virtual std::shared_ptr<ProcessGroup> make_split_subgroup(std::shared_ptr<Store> store,
                                                            const std::vector<int>& members,
                                                            std::vector<int> global_ranks);

  // ---- what a backend implements ----
  // The public call of the same name, after its arguments passed the shared checks
  // (roots and peers in range, no null buffer with a non-zero count, op valid for the
  // dtype, counts of the right length whose bytes fit in size_t); a backend adds only
  // its own limits (say MPI's int counts). Collectives get `seq`, the group's sequence
  // number for the operation: 0, 1, ... in call order, the same on every rank. The
  // do_* collectives are called one at a time, in `seq` order (under the group's issue
  // lock): they should queue the operation and return, and must not call this group's
  // collectives. A collective that throws takes no number. isend and irecv arrive as a
  // batch of one op (p2p_name() names the call).
  virtual WorkPtr do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                DType dtype, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(uint64_t seq, void* data, size_t count, DType dtype, int root) = 0;
  virtual WorkPtr do_reduce(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                            ReduceOp op, int root) = 0;
  virtual WorkPtr do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                DType dtype) = 0;
  virtual WorkPtr do_all_gatherv(uint64_t seq, const void* send, size_t send_count, void* recv,
                                 std::span<const size_t> recv_counts, DType dtype) = 0;
  virtual WorkPtr do_gather(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                            int root) = 0;
  virtual WorkPtr do_scatter(uint64_t seq, const void* send, void* recv, size_t count, DType dtype,
                             int root) = 0;
  virtual WorkPtr do_reduce_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, ReduceOp op) = 0;
  virtual WorkPtr do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                                DType dtype) = 0;
  virtual WorkPtr do_all_to_allv(uint64_t seq, const void* send,
                                 std::span<const size_t> send_counts, void* recv,
                                 std::span<const size_t> recv_counts, DType dtype) = 0;
  virtual WorkPtr do_barrier(uint64_t seq) = 0;
  virtual WorkPtr do_batch_isend_irecv(std::span<const P2POp> ops) = 0;
  // irecv_any, checked (count, dtype, buffer, a group of two or more); its Work names itself
  // "irecv_any" and sets its source_rank() before it finishes. The default refuses:
  // InvalidArgument "irecv_any: receiving from any source is not supported by <backend>".
  virtual WorkPtr do_irecv_any(void* data, size_t count, DType dtype, uint32_t tag);

  // For the flight record: a backend says when collective `seq` starts and finishes (with
  // its error, or null, and the algorithm it ran, for the timeline: "ring", "mpi", or
  // empty when none ran). The group's first failure writes the flight records.
  void note_started(uint64_t seq);
  void note_finished(uint64_t seq, const std::exception_ptr& error,
                     std::string_view algorithm = {});

  // The fingerprint of the collective being issued (operation, dtype, count, root, reduce op,
  // and its call site under debug_callsite()), for a do_* that checks it on the wire. Valid
  // inside do_* only.
  const core::OpFingerprint& issuing_fingerprint() const { return *issuing_; }
  // The number the next collective will get (for messages, e.g. abort's); never blocks.
  uint64_t next_seq() const { return next_seq_.load(std::memory_order_acquire); }
  // The name of a point-to-point call: "isend" or "irecv" for one op, else
  // "batch_isend_irecv".
  static const char* p2p_name(std::span<const P2POp> ops);

 private:
  // `ranks` sorted, each checked to be a rank of this group listed once (InvalidArgument
  // naming `caller` otherwise).
  std::vector<int> sorted_ranks(const char* caller, std::vector<int> ranks) const;
  std::shared_ptr<ProcessGroup> make_member_group(const std::vector<int>& members,
                                                  const std::string& name, bool split = false);

  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::vector<int> global_ranks_;
  uint64_t subgroups_made_ = 0;  // same count on every rank (collective calls)
  uint64_t shrinks_made_ = 0;    // same count on every remaining rank
  // Numbers collectives: a do_* collective runs with issue_mu_ held; next_seq_ is
  // written only under it and read anywhere (so not TDIST_GUARDED_BY).
  template <typename Call>
  WorkPtr numbered(core::OpFingerprint fp, const SourceLocation& where, Call&& call)
      TDIST_EXCLUDES(issue_mu_);
  // TDIST_DEBUG=detail (read when the group is made): every rank's fingerprint of the
  // collective about to be numbered, with this thread's CollectiveDetail, is compared through
  // the store before anything is sent (diag/detail_check.cc).
  void detail_check(const core::OpFingerprint& fp);
  const bool debug_detail_;
  const bool debug_callsite_;
  std::atomic<uint64_t> detail_checks_{0};
  Mutex issue_mu_;
  // numbered()'s fingerprint while its do_* runs (under issue_mu_), else null.
  const core::OpFingerprint* issuing_ = nullptr;
  bool registered_ TDIST_GUARDED_BY(issue_mu_) = false;  // in the flight records' registry
  std::string name_ = "default";
  std::unique_ptr<diag::FlightRecorder> recorder_;
  // TDIST_TRACE (diag/trace.h): this group's track in the timeline, -1 until its first
  // collective; a traced group writes the buffered events when it is destroyed.
  struct TraceTrack {
    std::atomic<int> id{-1};
    ~TraceTrack();
  };
  TraceTrack trace_track_;
  std::atomic<uint64_t> next_seq_{0};
  // Numbers monitored_barrier calls (apart from the collectives' next_seq_).
  std::atomic<uint64_t> monitored_barriers_{0};
};

// The call site that collectives issued on this thread name while the object lives, for
// TDIST_DEBUG=callsite (ProcessGroup::debug_callsite()): a layer over ProcessGroup (the torch
// layer, the Python backend) names its caller's line rather than its own. Nested objects:
// the outermost wins (the layer the user called). `file` must outlive the object. Costs a
// thread-local pointer when callsite checks are off.
class CallSite {
 public:
  explicit CallSite(const SourceLocation& where) : CallSite(where.file_name(), where.line()) {
    literal_ = true;
  }
  CallSite(const char* file, uint32_t line);
  ~CallSite();
  CallSite(const CallSite&) = delete;
  CallSite& operator=(const CallSite&) = delete;

  // This thread's outermost CallSite, or null.
  static const CallSite* outermost();
  const char* file() const { return file_; }
  uint32_t line() const { return line_; }
  // Whether file() is a SourceLocation's (it never changes or moves).
  bool literal() const { return literal_; }

 private:
  const char* file_;
  uint32_t line_;
  bool outermost_;
  bool literal_ = false;
};

// What the caller adds to the fingerprint of every collective this thread issues while the
// object lives, for the check of TDIST_DEBUG=detail (ProcessGroup::debug_detail()): the torch layer
// gives the tensors' shapes ("shapes [32, 32]"). Ranks whose texts differ get a DesyncError that
// quotes both. Nested objects: the innermost wins. Without TDIST_DEBUG=detail it is unused.
class CollectiveDetail {
 public:
  explicit CollectiveDetail(std::string text);
  ~CollectiveDetail();
  CollectiveDetail(const CollectiveDetail&) = delete;
  CollectiveDetail& operator=(const CollectiveDetail&) = delete;

  // This thread's innermost text, or empty.
  static const std::string& current();

 private:
  std::string text_;
  const CollectiveDetail* outer_;
};

}  // namespace tdist
