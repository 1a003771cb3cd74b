// Engine: the Comm of the shared-memory transport (shm_comm.h) — progress without a
// background thread, sleeping without spinning, abort and clean destruction.
//
// Progress rule (as MPI's): there is no progress thread. isend writes what fits into the
// ring on the caller's thread (a small message completes inside isend). Whoever waits on a
// request (wait, or test once) becomes the driver, one thread at a time: it flushes queued
// sends to every peer and drains every incoming ring (into posted buffers, or the heap for
// unexpected messages) until its own request completes. Other waiters sleep on a condition
// variable and are woken when their request completes or the driver leaves (one of them
// then takes over). So a pending send progresses only while some thread of the receiving
// process waits on this Comm; CommProcessGroup's worker always waits, so collectives are
// fine.
// Sleeping: a driver that can move nothing sets the sleep flags of its rings (ring.h),
// fences, re-checks, then blocks in poll() on every peer's socket plus an eventfd (isend
// queuing work while it sleeps, or abort, write to it) until its deadline. Peers write one
// wake byte when they publish while a flag is set. No spinning before sleeping: measured
// on the 2-core machine (busy with other work, as CI is), a 5/20/50 us spin on the rings
// before sleeping made the 8-byte round trip 33-105/90/183-266 us, against 22-44 us
// without, as the spinner takes the core its peer needs.
// Ownership: owns the Peers (sockets and ring mappings). Thread-safety: as comm.h.
// Failure: a socket's EOF without a goodbye (the peer died), or its abort notice, aborts
// this Comm with PeerError within milliseconds of a driver noticing; abort() notifies
// every peer and shuts the sockets down. Destruction flushes queued sends (up to 2 s),
// says goodbye and unmaps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/fd.h"
#include "transport/comm.h"
#include "transport/shm/peer.h"
#include "transport/shm/request.h"
#include "transport/shm/setup.h"

namespace tdist::transport::shm {

class Engine final : public Comm {
 public:
  Engine(int rank, int size, std::vector<PeerLink> links);
  ~Engine() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override;
  void abort(std::exception_ptr reason) override;
  std::exception_ptr error() const override;

  // For ShmRequest. wait_for returns false when `deadline` passed first.
  bool wait_for(const Op& op, Deadline deadline);
  // Drives progress for `op` without sleeping, unless another thread drives already.
  void try_progress(const Op& op);
  void cancel(Op& op);

 private:
  class DriverLease;

  void check_args(const char* what, int peer, const void* data, size_t bytes) const;
  // The driver's loop: progress, else sleep, until done() or the deadline (false then).
  template <typename Done>
  bool drive(Done done, Deadline deadline);
  Progress progress_pass();
  bool sleep(Deadline deadline);  // false when the deadline passed with nothing to do
  void notify_waiters();
  void wake_driver();
  void report(const std::string& lost);
  void abort_with(const std::exception_ptr& reason, bool log);

  const int rank_;
  const int size_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null at rank_
  net::Fd wake_;                              // eventfd: wakes a sleeping driver
  std::atomic<bool> driver_sleeping_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> destroying_{false};

  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  bool driving_ = false;          // guarded by wait_mu_
  std::atomic<int> sleepers_{0};  // changed under wait_mu_; read without it by completers

  mutable std::mutex error_mu_;
  std::exception_ptr error_;  // guarded by error_mu_
};

}  // namespace tdist::transport::shm
