// Engine: the one Comm implementation of every transport — a Peer (peer.h) per other rank,
// each over the channels of whatever kind reaches it (channel.h), and one progress engine
// that drives all of them.
//
// Progress rule (as MPI's): there is no progress thread. isend writes what the channel
// takes on the caller's thread (a small message usually completes inside isend). Whoever
// waits on a request (wait, or test once) becomes the driver, one thread at a time: it
// writes queued sends to every peer and reads every channel (into posted buffers, or the
// heap for unexpected messages) until its own request completes — whatever kind each
// channel is, so a rank blocked on a TCP receive still moves its shared-memory sends.
// Other waiters sleep on a condition variable and are woken when their request completes
// or the driver leaves (one of them then takes over). A pending send therefore progresses
// only while some thread of the receiving process waits on its Comm; CommProcessGroup's
// worker always waits, so collectives are fine.
// Poll, then sleep (core/polling.h): a driver that can move nothing first polls every
// channel for an adaptive, bounded time when it may (a thread that waits for its own
// result, on a host with a core per local rank); then it arms every channel, fences,
// re-checks, and blocks in poll() on every channel's descriptor plus an eventfd (isend
// queuing work while it sleeps, or abort, write to it) until its deadline. Background
// threads never poll.
// Ownership: owns the Peers and their channels. Thread-safety: as comm.h.
// Fingerprints (comm.h): begin_collective records the running collective in a
// CollectiveBook; isend/irecv stamp and expect its fingerprint, the Peers check it.
// Any source (comm.h): irecv_any's receives wait in an AnySourceQueue that every Peer
// consults for its point-to-point messages (any_source.h says how the two kinds of receive
// share them).
// Slots (comm.h): where every peer's channel has slots (shm), slot_gather posts this
// rank's block in each and reads the peers' there, with no Op, request or lock; a block
// not there yet is waited for as a request is (polling, then sleeping in poll(), which the
// poster wakes through the channel), while progress runs, so that a peer's message of
// the running collective with another fingerprint is still a DesyncError as it arrives.
// Failure: a channel's end of stream without a goodbye (the peer died), a broken channel,
// or an abort notice aborts this Comm with PeerError (DesyncError for a desync, here or
// told by the peer; TimeoutError when the peer aborted on a timeout) as soon as a driver
// notices (within milliseconds when some thread waits); abort() notifies every peer (and
// says whether for a desync or a timeout) and shuts the channels down. Destruction flushes queued
// sends (up to 2 s), says goodbye, closes.
#pragma once

#include <poll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/polling.h"
#include "net/fd.h"
#include "tdist/thread_annotations.h"
#include "transport/comm.h"
#include "transport/core/any_source.h"
#include "transport/core/channel.h"
#include "transport/core/op.h"
#include "transport/core/peer.h"

namespace tdist::transport::core {

class Engine final : public Comm {
 public:
  // `channels[r]` are the lanes to rank r (empty at `rank`).
  Engine(int rank, int size, std::vector<std::vector<std::unique_ptr<Channel>>> channels);
  ~Engine() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override;
  bool carries_device(int peer) const override;
  RequestPtr isend_device(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv_device(int peer, uint64_t tag, void* data, size_t bytes) override;
  RequestPtr irecv_any(uint64_t tag, void* data, size_t bytes) override;
  RequestPtr irecv_any_device(uint64_t tag, void* data, size_t bytes) override;
  void begin_collective(uint64_t seq, const tdist::core::OpFingerprint& fp) override;
  void check_arrivals() override;
  size_t slot_bytes() const override { return slot_bytes_; }
  void slot_gather(uint64_t tag, const void* mine, size_t bytes, const void** blocks,
                   Deadline deadline) override;
  void abort(std::exception_ptr reason) override;
  std::exception_ptr error() const override;

  // One progress pass unless another thread drives: reads what has arrived (check_arrivals
  // without the throw; a ContextComm's check_arrivals).
  void read_arrivals();
  // Collective `seq` of context `context` (comm.h; a ContextComm's begin_collective).
  void begin_context_collective(uint32_t context, uint64_t seq,
                                const tdist::core::OpFingerprint& fp);
  // A context's ranks (a ContextComm's, this one among them), told of its abort.
  void open_context(uint32_t context, std::vector<int> ranks);
  // Aborts context `context` (>= 1) only (a ContextComm's abort; comm.h): its pending and
  // later requests fail with `reason`, its arriving messages are dropped, and its other
  // ranks get the notice (wire.h's kContextAbortTag) and abort it too, telling theirs in
  // turn, so a rank that leaves at once cannot outrun the notice. The Engine and its other
  // contexts go on. Idempotent; the first reason wins.
  void abort_context(uint32_t context, std::exception_ptr reason);
  // The Engine's abort reason, else the context's (null while both are healthy).
  std::exception_ptr context_error(uint32_t context) const;
  // Contexts handed out (context_comm.h): the lowest one this Engine has not, and marking
  // `context` and all below it handed out.
  uint32_t free_context() const { return free_context_.load(std::memory_order_acquire); }
  void claim_context(uint32_t context);

  // The kind of channel that reaches `peer` ("tcp", "shm"); null for this rank.
  const char* channel_kind(int peer) const;
  // Whether the channels to `peer` are connected: always, except lazy ones (Channel::
  // activate) before the pair's first exchange; false for this rank.
  bool connected(int peer) const;
  // Whether `peer` said goodbye (destroyed its Comm), or was found gone before its lazy
  // channels connected (Channel::departed), as this rank has read so far.
  bool gone(int peer) const;

  // For CoreRequest. wait_for returns false when `deadline` passed first. A collective
  // receive still waiting after kProbeAfter probes its peer once (wire.h's kProbeTag).
  bool wait_for(const Op& op, Deadline deadline);
  static constexpr std::chrono::milliseconds kProbeAfter{1000};
  // Drives progress for `op` without sleeping, unless another thread drives already.
  void try_progress(const Op& op);
  void cancel(Op& op);

 private:
  // After the close of `context` (abort_context's or a Peer's, at a notice): fails its
  // requests on every Peer and tells its other ranks.
  void spread_context_abort(uint32_t context, const std::exception_ptr& reason);
  class DriverLease;

  // Slots (comm.h; engine_slots.cc).
  void init_slots();
  // The peer's exchange `index` (its header in *header), once it is posted; throws when the
  // Comm aborts, the peer leaves or the deadline passes first.
  const uint8_t* await_slot(int peer, uint64_t tag, uint64_t index, Channel::SlotHeader* header,
                            Deadline deadline);
  // Drives progress (or sleeps while another thread drives) until the peer's first channel
  // holds exchange `index`, the Comm aborts, the peer leaves or the deadline passes (false).
  bool wait_slot(int peer, uint64_t index, Deadline deadline);
  // Whether the exchange a slot_gather waits for is posted (a driver wakes for it).
  bool slot_posted() const;

  void check_args(const char* what, int peer, uint64_t tag, const void* data, size_t bytes) const;
  RequestPtr post_send(int peer, uint64_t tag, const void* data, size_t bytes, bool device);
  RequestPtr post_recv(int peer, uint64_t tag, void* data, size_t bytes, bool device);
  void check_any_args(uint64_t tag, const void* data, size_t bytes) const;
  RequestPtr post_any(uint64_t tag, void* data, size_t bytes, bool device);
  // Wakes whoever waits for the `progress.completed` Ops that another thread completed.
  void completed_elsewhere(const Progress& progress);
  // The driver's loop: progress, else sleep, until done() or the deadline (false then).
  bool wait_unprobed(const Op& op, Deadline deadline);  // wait_for without the probe
  // Until done() or the deadline (false then): as the driver while this thread can take the
  // role, else asleep until the driver notifies or leaves, or `recheck` (when not zero)
  // passes.
  template <typename Done>
  bool wait_until(Done done, Deadline deadline, Clock::duration recheck);
  template <typename Done>
  bool drive(Done done, Deadline deadline);
  Progress progress_pass();
  // Polls while the budget lasts; true when something moved or the wait is over.
  template <typename Done>
  bool poll_channels(Done done, Deadline deadline);
  int local_ranks() const;        // this rank's machine's ranks (topology.h)
  int local_cpus() const;         // the CPUs of those ranks together; 0 unknown
  bool sleep(Deadline deadline);  // false when the deadline passed with nothing to do
  void notify_waiters();
  void wake_driver();
  void report(const std::string& lost);
  void abort_with(const std::exception_ptr& reason, bool log);

  const int rank_;
  const int size_;
  CollectiveBooks book_;                      // before peers_, which refer to it
  AnySourceQueue any_;                        // the same
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null at rank_
  net::Fd wake_;                              // eventfd: wakes a sleeping driver
  std::atomic<bool> driver_sleeping_{false};
  // The driver's poll set (eventfd, then every peer's lanes) and where each peer's part
  // starts; reused by every sleep, touched only by the driver.
  std::vector<pollfd> poll_fds_;
  std::vector<size_t> poll_first_;
  std::optional<tdist::core::PollBudget> poll_budget_;  // the driver's; made at its first poll
  std::optional<Clock::time_point> idle_since_;         // the driver's: its last poll ran out
  std::atomic<bool> aborted_{false};
  std::atomic<bool> destroying_{false};
  std::atomic<uint32_t> free_context_{1};  // 0 is the Engine's own
  // Slots: each peer's first channel while every peer's has slots (else none), the
  // smallest payload among them, the exchanges so far, and the one a slot_gather waits for.
  std::vector<Channel*> slot_channels_;
  size_t slot_bytes_ = 0;
  uint64_t slot_index_ = 0;
  int slot_looks_ = -1;  // quick looks before a slot wait; 0 where waiters may not poll
  std::atomic<Channel*> slot_wait_channel_{nullptr};  // null: no slot_gather waits
  std::atomic<uint64_t> slot_wait_index_{0};

  Mutex wait_mu_;
  CondVar wait_cv_;
  std::atomic<bool> driving_{false};  // a thread holds the driver role (DriverLease)
  std::atomic<int> sleepers_{0};      // changed under wait_mu_; read without it

  mutable Mutex error_mu_;
  std::exception_ptr error_ TDIST_GUARDED_BY(error_mu_);
  // Each open context's ranks (open_context).
  std::array<std::vector<int>, kMaxContext + 1> context_ranks_ TDIST_GUARDED_BY(error_mu_);
  std::atomic<bool> has_error_{false};  // error_ is set (read without the lock)
};

}  // namespace tdist::transport::core
