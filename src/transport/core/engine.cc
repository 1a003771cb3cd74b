// Engine: waiting and driving, the sleep in poll(), abort and destruction.
#include "transport/core/engine.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "core/coarse_clock.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {
namespace {

// How long destruction may spend flushing sends and saying goodbye.
constexpr auto kCloseTimeout = std::chrono::seconds(2);
// A polling driver yields its core this often.
constexpr auto kPollYieldEvery = std::chrono::microseconds(20);

// The mark (peer.h) an abort notice of `error` begins with, if any.
std::string mark_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const DesyncError&) {
    return std::string(1, kDesyncMark);
  } catch (const TimeoutError&) {
    return std::string(1, kTimeoutMark);
  } catch (...) {
    return {};
  }
}

}  // namespace

// The driver role, held by one thread at a time and taken with one atomic exchange (no
// lock on the path of a lone waiter); released, and the sleepers told so that one of them
// takes over, when the lease goes out of scope. A sleeper counts itself in sleepers_ and
// then re-reads driving_ under wait_mu_; the releaser clears driving_ and then reads
// sleepers_ (both seq_cst): one of the two sees the other, so no sleeper is left behind.
class Engine::DriverLease {
 public:
  // Takes the role when it is free; `held()` says whether it did.
  explicit DriverLease(Engine& engine)
      : engine_(engine), held_(!engine_.driving_.exchange(true, std::memory_order_acquire)) {}
  ~DriverLease() {
    if (!held_) return;
    engine_.driving_.store(false, std::memory_order_seq_cst);
    if (engine_.sleepers_.load(std::memory_order_seq_cst) > 0) {
      MutexLock lock(engine_.wait_mu_);
      engine_.wait_cv_.notify_all();
    }
  }
  DriverLease(const DriverLease&) = delete;
  DriverLease& operator=(const DriverLease&) = delete;
  bool held() const { return held_; }

 private:
  Engine& engine_;
  const bool held_;
};

Engine::Engine(int rank, int size, std::vector<std::vector<std::unique_ptr<Channel>>> channels)
    : rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {
  wake_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) TDIST_THROW(Error, "transport: eventfd failed: ", net::errno_text(errno));
  for (int peer = 0; peer < size; ++peer) {
    if (peer != rank) {
      peers_[peer] = std::make_unique<Peer>(rank, peer, std::move(channels[peer]), book_, any_);
    }
  }
  init_slots();
}

Engine::~Engine() {
  destroying_ = true;
  if (!aborted_.load()) {
    const Deadline deadline = Deadline::after(kCloseTimeout);
    // Sends whose Requests were dropped unfinished still belong to the streams.
    auto queued = [this] {
      for (const auto& peer : peers_) {
        if (peer && (peer->sends_queued() || peer->rendezvous_pending())) return true;
      }
      return false;
    };
    if (queued()) {
      DriverLease lease(*this);
      if (lease.held()) drive([&] { return !queued() || aborted_.load(); }, deadline);
    }
    for (auto& peer : peers_) {
      if (peer && !aborted_.load()) peer->say_goodbye(deadline);
    }
  }
  auto error = std::make_exception_ptr(
      PeerError(detail::str_cat("rank ", rank_, ": the Comm was destroyed")));
  for (auto& peer : peers_) {
    if (peer) peer->fail_all(error, /*tell_peer=*/false, {});
  }
  any_.fail_all(error);
}

void Engine::check_args(const char* what, int peer, uint64_t tag, const void* data,
                        size_t bytes) const {
  TDIST_CHECK(peer >= 0 && peer < size_ && peer != rank_, InvalidArgument, "rank ", rank_, ": ",
              what, " rank ", peer, ": not another rank of this group (size ", size_, ")");
  TDIST_CHECK(!is_control_tag(tag), InvalidArgument, "rank ", rank_, ": tag 0x", std::hex, tag,
              " is reserved by the transport");
  TDIST_CHECK(data != nullptr || bytes == 0, InvalidArgument, "rank ", rank_, ": ", what, " rank ",
              peer, ": null buffer for ", bytes, " bytes");
}

const char* Engine::channel_kind(int peer) const {
  if (peer < 0 || peer >= size_ || !peers_[peer]) return nullptr;
  return peers_[peer]->kind();
}

bool Engine::connected(int peer) const {
  if (peer < 0 || peer >= size_ || !peers_[peer]) return false;
  return peers_[peer]->connected();
}

bool Engine::gone(int peer) const {
  if (peer < 0 || peer >= size_ || !peers_[peer]) return false;
  return peers_[peer]->gone();
}

RequestPtr Engine::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  check_args("isend to", peer, tag, data, bytes);
  return post_send(peer, tag, data, bytes, false);
}

RequestPtr Engine::irecv(int peer, uint64_t tag, void* data, size_t bytes) {
  check_args("irecv from", peer, tag, data, bytes);
  return post_recv(peer, tag, data, bytes, false);
}

bool Engine::carries_device(int peer) const {
  return peer >= 0 && peer < size_ && peers_[peer] && peers_[peer]->carries_device();
}

RequestPtr Engine::isend_device(int peer, uint64_t tag, const void* data, size_t bytes) {
  check_args("isend to", peer, tag, data, bytes);
  if (!carries_device(peer)) return Comm::isend_device(peer, tag, data, bytes);  // throws
  return post_send(peer, tag, data, bytes, true);
}

RequestPtr Engine::irecv_device(int peer, uint64_t tag, void* data, size_t bytes) {
  check_args("irecv from", peer, tag, data, bytes);
  if (!carries_device(peer)) return Comm::irecv_device(peer, tag, data, bytes);  // throws
  return post_recv(peer, tag, data, bytes, true);
}

RequestPtr Engine::post_send(int peer, uint64_t tag, const void* data, size_t bytes, bool device) {
  std::string lost;
  std::shared_ptr<Op> op =
      peers_[peer]->post_send(tag, data, bytes, book_.check_for(tag), &lost, device);
  if (!op) return std::make_unique<CoreRequest>(nullptr, nullptr);  // written whole
  if (!lost.empty()) {
    report(lost);
  } else if (!op->done()) {
    wake_driver();  // a sleeping driver must learn that this send waits for room
  }
  return std::make_unique<CoreRequest>(this, std::move(op));
}

RequestPtr Engine::post_recv(int peer, uint64_t tag, void* data, size_t bytes, bool device) {
  std::string lost;
  Progress others;
  std::shared_ptr<Op> op =
      peers_[peer]->post_recv(tag, data, bytes, book_.check_for(tag), &lost, &others, device);
  completed_elsewhere(others);
  if (!lost.empty()) report(lost);
  return std::make_unique<CoreRequest>(this, std::move(op));
}

void Engine::completed_elsewhere(const Progress& progress) {
  if (progress.completed == 0) return;
  notify_waiters();
  wake_driver();
}

void Engine::begin_collective(uint64_t seq, const tdist::core::OpFingerprint& fp) {
  begin_context_collective(0, seq, fp);
}

void Engine::begin_context_collective(uint32_t context, uint64_t seq,
                                      const tdist::core::OpFingerprint& fp) {
  book_.begin(context, seq, fp);
  if (book_.early.load() == 0) return;  // collective_book.h's `early`
  for (const auto& peer : peers_) {
    if (!peer) continue;
    const std::string report = peer->find_desync();
    if (!report.empty()) throw DesyncError(report.substr(1));
  }
}

void Engine::read_arrivals() {
  DriverLease lease(*this);
  if (!lease.held()) return;  // the driver reads them
  Progress progress = progress_pass();
  // What a socket holds shows through poll() (tcp's readable flag): one look without
  // waiting, then read what it showed.
  (void)sleep(Deadline::after(Clock::duration::zero()));
  progress += progress_pass();
  if (progress.completed > 0) notify_waiters();
}

void Engine::check_arrivals() {
  read_arrivals();
  if (has_error_.load(std::memory_order_acquire)) std::rethrow_exception(error());
}

void Engine::open_context(uint32_t context, std::vector<int> ranks) {
  TDIST_CHECK(context >= 1 && context <= kMaxContext, InvalidArgument, "transport: context ",
              context, " is outside 1..", kMaxContext);
  MutexLock lock(error_mu_);
  context_ranks_[context] = std::move(ranks);
}

void Engine::abort_context(uint32_t context, std::exception_ptr reason) {
  if (book_.close(context, reason)) spread_context_abort(context, reason);
}

void Engine::spread_context_abort(uint32_t context, const std::exception_ptr& reason) {
  std::vector<int> tell;
  {
    MutexLock lock(error_mu_);
    tell = context_ranks_[context];
  }
  // Closed first (seq_cst), then failed: a request posted meanwhile sees one or the other.
  const std::string notice = mark_of(reason) + detail::what_of(reason);
  Progress progress;
  for (int peer = 0; peer < size_; ++peer) {
    if (!peers_[peer]) continue;
    const bool told = std::find(tell.begin(), tell.end(), peer) != tell.end();
    progress += peers_[peer]->fail_context(context, reason, told ? &notice : nullptr);
  }
  progress.completed += any_.fail_context(context, reason);
  completed_elsewhere(progress);
  // The notices go out with the next progress: now, unless a driver is at work.
  DriverLease lease(*this);
  if (lease.held()) {
    (void)progress_pass();
  } else {
    wake_driver();
  }
}

std::exception_ptr Engine::context_error(uint32_t context) const {
  if (std::exception_ptr failed = error()) return failed;
  return book_.closed_error(in_context(0, context));
}

void Engine::claim_context(uint32_t context) {
  uint32_t free = free_context_.load(std::memory_order_relaxed);
  while (free <= context && !free_context_.compare_exchange_weak(free, context + 1)) {
  }
}

void Engine::abort(std::exception_ptr reason) {
  if (!reason) {
    reason = std::make_exception_ptr(
        PeerError(detail::str_cat("rank ", rank_, ": the Comm was aborted")));
  }
  abort_with(reason, /*log=*/false);
}

std::exception_ptr Engine::error() const {
  if (!has_error_.load(std::memory_order_acquire)) return nullptr;  // the common case: no lock
  MutexLock lock(error_mu_);
  return error_;
}

void Engine::cancel(Op& op) {
  int peer = op.peer;
  if (peer == kAnySource) {
    if (any_.withdraw(op)) return;  // still unclaimed
    peer = op.source();             // claimed under the Peer's lock, which cancel takes
    if (peer < 0) return;           // failed unclaimed
  }
  const std::string lost = peers_[peer]->cancel(op);
  if (!lost.empty()) report(lost);
}

bool Engine::wait_for(const Op& op, Deadline deadline) {
  // A collective receive that has waited kProbeAfter asks its peer, once, whether it runs
  // the same collective (wire.h's kProbeTag): of two ranks that both wait to receive, each
  // naming itself the root of a reduce or gather, the probe names the desync at once,
  // where both would otherwise wait until the timeout.
  if (!op.is_send && op.peer != kAnySource && op.check().w0 != 0 && !is_control_tag(op.tag) &&
      !is_p2p_tag(op.tag) && !op.probed.load(std::memory_order_relaxed)) {
    // The coarse clock: a receive's wait is a hot path, and a tick early or late is nothing.
    const Deadline probe_at = tdist::core::coarse_deadline_after(kProbeAfter);
    if (deadline.is_never() || probe_at.time() < deadline.time()) {
      if (wait_unprobed(op, probe_at)) return true;
      if (!op.probed.exchange(true)) {
        peers_[static_cast<size_t>(op.peer)]->send_probe(op.tag, op.check());
        wake_driver();
      }
    }
  }
  return wait_unprobed(op, deadline);
}

bool Engine::wait_unprobed(const Op& op, Deadline deadline) {
  return wait_until([&] { return op.done(); }, deadline, Clock::duration::zero());
}

template <typename Done>
bool Engine::wait_until(Done done, Deadline deadline, Clock::duration recheck) {
  while (!done()) {
    {
      DriverLease lease(*this);
      if (lease.held()) return drive(done, deadline);
    }
    if (deadline.expired()) return false;
    MutexLock lock(wait_mu_);
    // Counted before the re-check, so that a completer or a leaving driver either sees a
    // sleeper (and notifies under the lock) or this thread sees what it did.
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (!done() && driving_.load(std::memory_order_seq_cst)) {
      Deadline until = deadline;
      if (recheck > Clock::duration::zero()) {
        const Deadline bound = Deadline::after(recheck);
        if (deadline.is_never() || bound.time() < deadline.time()) until = bound;
      }
      if (until.is_never()) {
        wait_cv_.wait(wait_mu_);
      } else {
        wait_cv_.wait_until(wait_mu_, until.time());
      }
    }
    sleepers_.fetch_sub(1);
  }
  return true;
}

bool Engine::wait_slot(int peer, uint64_t index, Deadline deadline) {
  Channel& channel = *slot_channels_[static_cast<size_t>(peer)];
  const Peer& from = *peers_[static_cast<size_t>(peer)];
  auto done = [&] {
    return channel.slot_peek(index, nullptr) != nullptr || from.gone() || aborted_.load();
  };
  // A driver (this thread or another) wakes for the slot: sleep() re-checks it after arming
  // the channels, and another thread's drive() tells this one when it is posted.
  slot_wait_index_.store(index, std::memory_order_relaxed);
  slot_wait_channel_.store(&channel, std::memory_order_seq_cst);
  struct Clear {
    std::atomic<Channel*>& channel;
    ~Clear() { channel.store(nullptr, std::memory_order_relaxed); }
  } clear{slot_wait_channel_};
  // Asleep while another thread drives, a 1 ms bound covers a post that raced the re-check.
  return wait_until(done, deadline, std::chrono::milliseconds(1));
}

bool Engine::slot_posted() const {
  Channel* channel = slot_wait_channel_.load(std::memory_order_acquire);
  return channel != nullptr &&
         channel->slot_peek(slot_wait_index_.load(std::memory_order_relaxed), nullptr) != nullptr;
}

void Engine::try_progress(const Op& op) {
  DriverLease lease(*this);
  if (lease.held()) drive([&] { return op.done(); }, Deadline::after(Clock::duration::zero()));
}

template <typename Done>
bool Engine::drive(Done done, Deadline deadline) {
  idle_since_.reset();
  while (true) {
    Progress progress = progress_pass();
    // A slot_gather that waits on another thread counts as a waiter whose request completed.
    if (progress.completed > 0 || slot_posted()) notify_waiters();
    if (idle_since_ && (progress.moved || progress.completed > 0)) {
      poll_budget_->record(Clock::now() - *idle_since_);  // polled, slept, now work came
      idle_since_.reset();
    }
    if (done()) {
      // Polled, slept, and the wait ended with no progress of this thread's (a request
      // completed elsewhere, a slot posted): judged as work that came.
      if (idle_since_) poll_budget_->record(Clock::now() - *idle_since_);
      return true;
    }
    if (aborted_.load()) return done();
    if (progress.moved) continue;
    if (poll_channels(done, deadline)) continue;
    if (!sleep(deadline)) return done();
  }
}

int Engine::local_ranks() const {
  const Topology& topo = topology();
  if (topo.machine_of.empty()) return size_;
  return static_cast<int>(
      topo.ranks_on_machine(topo.machine_of[static_cast<size_t>(rank_)]).size());
}

int Engine::local_cpus() const {
  const Topology& topo = topology();
  if (topo.machine_of.empty()) return 0;
  const auto machine = static_cast<size_t>(topo.machine_of[static_cast<size_t>(rank_)]);
  return machine < topo.machine_cpus.size() ? topo.machine_cpus[machine] : 0;
}

template <typename Done>
bool Engine::poll_channels(Done done, Deadline deadline) {
  if (tdist::core::on_background_thread()) return false;
  if (!poll_budget_) {
    const int local = local_ranks();
    const int cpus = local_cpus();
    poll_budget_.emplace(tdist::core::poll_limit(local, cpus));
    TDIST_LOG(kDebug) << "rank " << rank_ << ": waiters poll for up to "
                      << poll_budget_->current().count() / 1000 << " us ("
                      << (cpus > 0 ? cpus : tdist::core::usable_cores()) << " cores for the "
                      << std::max(local, tdist::core::launcher_local_ranks())
                      << " local ranks; 0 = sleep at once)";
  }
  const auto budget = poll_budget_->current();
  if (budget.count() <= 0) return false;
  // The clock is read every 8th spin only, from the 8th on: a message that comes within
  // the first few spins (the common case when the peers keep in step) costs no clock read.
  // `start` is then that first reading, a few spins late, which the budget can bear.
  Clock::time_point start{};
  Clock::time_point now{};
  Clock::time_point end{};
  Clock::time_point yield_at{};
  for (unsigned spin = 1;; ++spin) {
    bool hint = false;
    for (auto& peer : peers_) {
      if (peer && peer->poll_hint()) hint = true;
    }
    if (hint) {
      Progress progress = progress_pass();
      if (progress.completed > 0) notify_waiters();
      if (progress.moved || progress.completed > 0) {
        poll_budget_->record(now - start);
        return true;
      }
    }
    if (done() || aborted_.load()) {  // completed by another thread, or a slot posted
      poll_budget_->record(now - start);
      return true;
    }
    tdist::core::cpu_relax();
    if (spin % 8 != 0) continue;  // reading the clock costs as much as a look at the rings
    now = Clock::now();
    if (spin == 8) {
      start = now;
      end = start + std::chrono::duration_cast<Clock::duration>(budget);
      if (!deadline.is_never() && deadline.time() < end) end = deadline.time();
      yield_at = start + kPollYieldEvery;
    }
    if (now >= end) {
      idle_since_ = start;  // judged when work comes (drive)
      return false;
    }
    if (now >= yield_at) {  // let a thread that shares this core run now and then
      ::sched_yield();
      yield_at = now + kPollYieldEvery;
    }
  }
}

Progress Engine::progress_pass() {
  Progress progress;
  std::string lost;
  for (auto& peer : peers_) {
    if (peer && lost.empty()) progress += peer->progress(&lost);
  }
  if (!lost.empty()) report(lost);
  for (auto& peer : peers_) {  // contexts the peers aborted (their notices)
    if (!peer || !peer->has_context_aborts()) continue;
    for (const Peer::ContextAbort& notice : peer->take_context_aborts()) {
      spread_context_abort(notice.context, notice.error);
      progress.moved = true;
      ++progress.completed;  // the Peer failed receives already: wake their waiters
    }
  }
  return progress;
}

bool Engine::sleep(Deadline deadline) {
  driver_sleeping_.store(true);
  std::vector<pollfd>& fds = poll_fds_;
  std::vector<size_t>& first = poll_first_;
  fds.assign(1, {wake_.get(), POLLIN, 0});
  first.assign(peers_.size(), 0);
  for (size_t r = 0; r < peers_.size(); ++r) {
    first[r] = fds.size();
    if (peers_[r]) peers_[r]->prepare_sleep(&fds);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool ready = aborted_.load() || slot_posted();  // the poster wakes an armed channel too
  for (auto& peer : peers_) {
    if (!ready && peer) ready = peer->ready();
  }
  bool timed_out = false;
  std::string lost;
  int n = 0;
  if (!ready) {
    n = ::poll(fds.data(), fds.size(), deadline.poll_timeout_ms());
    if (n < 0 && errno != EINTR) {
      lost = detail::str_cat("rank ", rank_, ": transport poll failed: ", net::errno_text(errno));
    }
    timed_out = n == 0 && deadline.expired();
    if (n > 0 && fds[0].revents != 0) {
      uint64_t count = 0;
      (void)!::read(wake_.get(), &count, sizeof(count));
    }
  }
  for (size_t r = 0; r < peers_.size(); ++r) {
    if (!peers_[r]) continue;
    if (n <= 0) {
      for (size_t i = first[r]; i < first[r] + peers_[r]->lane_count(); ++i) fds[i].revents = 0;
    }
    peers_[r]->wake_up(&fds[first[r]]);
  }
  driver_sleeping_.store(false);
  if (!lost.empty()) report(lost);
  return !timed_out;
}

void Engine::notify_waiters() {
  if (sleepers_.load() == 0) return;
  MutexLock lock(wait_mu_);
  wait_cv_.notify_all();
}

void Engine::wake_driver() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!driver_sleeping_.load()) return;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));  // a saturated counter still wakes it
}

void Engine::report(const std::string& lost) { abort_with(error_of_lost(lost), /*log=*/true); }

void Engine::abort_with(const std::exception_ptr& reason, bool log) {
  {
    MutexLock lock(error_mu_);
    if (error_) return;
    error_ = reason;
    has_error_.store(true, std::memory_order_release);
  }
  const std::string text = detail::what_of(reason);
  if (log && !destroying_) TDIST_LOG(kWarn) << "transport aborted: " << text;
  // The peers learn the reason, and whether it is a desync or a timeout (they then fail with
  // DesyncError or TimeoutError too).
  const std::string notice = mark_of(reason) + text;
  for (auto& peer : peers_) {
    if (peer) peer->fail_all(reason, /*tell_peer=*/true, notice);
  }
  any_.fail_all(reason);
  // Only now: a driver that sees aborted_ finds every pending Op completed.
  aborted_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  MutexLock lock(wait_mu_);
  wait_cv_.notify_all();
}

}  // namespace tdist::transport::core
