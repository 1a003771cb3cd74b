// Lazy TCP connections: LazyMesh (the listener, the dialer, the pairs' state) and
// LazyChannel (a peer's lane until, and after, its connection is made).
#include "transport/tcp/lazy_mesh.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <thread>

#include "net/address.h"
#include "net/auth.h"
#include "net/socket.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/store.h"
#include "tdist/thread_annotations.h"
#include "transport/connect.h"
#include "transport/tcp/acceptor.h"
#include "transport/tcp/channel.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/tls_channel.h"

namespace tdist::transport::tcp {
namespace {

// One connect attempt of a dial: a peer that published its address listens, so a connect
// that is refused (or unanswered) this long means the peer is gone.
constexpr auto kConnectAttempt = std::chrono::milliseconds(1000);

class LazyMesh;

class LazyChannel final : public core::Channel {
 public:
  // `connected`: the peer's flag (the mesh's), set once every lane has its channel.
  LazyChannel(std::shared_ptr<LazyMesh> mesh, int peer, size_t lane, std::string address,
              const std::atomic<bool>* connected);
  ~LazyChannel() override;

  // From the mesh, under its lock: the connection is in (set on every lane of the peer,
  // then published for all of them at once through the peer's flag: a lane must never
  // look connected while another is not, or a goodbye would go on one lane only), or will
  // never be.
  void set(std::unique_ptr<core::Channel> channel) { owned_ = std::move(channel); }
  void published() { signal(); }
  void fail(const std::string& why) {
    failure_ = why;
    failed_.store(true, std::memory_order_release);
    signal();
  }
  // The peer was found gone before the pair connected: read as an end of stream that the
  // core takes as its goodbye (channel.h's departed()).
  void depart(const std::string& why) {
    departed_ = true;
    fail(why);
  }

  const char* kind() const override { return "tcp"; }
  std::string describe() const override {
    if (core::Channel* c = real()) return c->describe();
    if (departed()) return "tcp " + address_ + ", never connected: " + failure_;
    return "tcp " + address_ + ", not connected";
  }
  size_t write(const iovec* iov, size_t count, std::string* lost) override {
    if (core::Channel* c = real()) return c->write(iov, count, lost);
    report(lost);
    return 0;
  }
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override {
    if (core::Channel* c = real()) return c->read(iov, count, eof, lost);
    if (departed()) {
      *eof = true;
    } else {
      report(lost);
    }
    return 0;
  }
  bool readable() override {
    core::Channel* c = real();
    return c != nullptr ? c->readable() : failed_.load(std::memory_order_acquire);
  }
  bool writable() override {
    core::Channel* c = real();
    return c != nullptr && c->writable();
  }
  bool holds_unsent() override {
    core::Channel* c = real();
    return c != nullptr && c->holds_unsent();
  }
  void refresh() override {
    if (core::Channel* c = real()) c->refresh();
  }
  size_t rendezvous_bytes() const override { return size_t{1} << 20; }  // as TcpChannel's
  void arm(bool want_write) override {
    if (core::Channel* c = real()) c->arm(want_write);
  }
  void disarm() override {
    if (core::Channel* c = real()) c->disarm();
  }
  pollfd poll_for(bool want_read, bool want_write) override {
    if (core::Channel* c = real()) return c->poll_for(want_read, want_write);
    return {event_.get(), POLLIN, 0};
  }
  void on_poll(short revents) override {
    if (core::Channel* c = real()) {
      c->on_poll(revents);
    } else if (revents != 0) {
      uint64_t count = 0;
      (void)!::read(event_.get(), &count, sizeof(count));
    }
  }
  void activate() override;
  bool connected() const override { return real() != nullptr; }
  bool departed() const override { return failed_.load(std::memory_order_acquire) && departed_; }
  void leave(Deadline deadline) override;
  void close(Deadline deadline) override {
    if (core::Channel* c = real()) c->close(deadline);
  }
  void shut_down() override;

 private:
  core::Channel* real() const {
    return connected_->load(std::memory_order_acquire) ? owned_.get() : nullptr;
  }
  void report(std::string* lost) const {
    if (failed_.load(std::memory_order_acquire)) *lost = "never connected: " + failure_;
  }
  void signal() {
    const uint64_t one = 1;
    (void)!::write(event_.get(), &one, sizeof(one));
  }

  const std::shared_ptr<LazyMesh> mesh_;
  const int peer_;
  const size_t lane_;
  const std::string address_;                                // where the peer listens
  net::Fd event_{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)};  // readable once attached or failed
  const std::atomic<bool>* const connected_;                 // the peer's, in the mesh
  std::unique_ptr<core::Channel> owned_;  // written once, before *connected_ is set
  std::string failure_;                   // written once, before failed_ is published
  bool departed_ = false;                 // likewise
  std::atomic<bool> failed_{false};
};

class LazyMesh final : public AcceptSink {
 public:
  LazyMesh(int rank, const std::vector<bool>& peers, uint64_t group_id,
           const LazyMeshOptions& options, std::vector<std::string> addresses)
      : rank_(rank),
        peers_(peers),
        group_id_(group_id),
        options_(options),
        key_(net::auth::Key::from_settings()),
        addresses_(std::move(addresses)),
        connected_(std::make_unique<std::atomic<bool>[]>(peers.size())),
        state_(peers.size()) {
    for (PeerState& s : state_) {
      s.socket.fds.resize(options_.nsocks);
      s.socket.sessions.resize(options_.nsocks);
      s.lanes.resize(options_.nsocks, nullptr);
    }
  }
  ~LazyMesh() override {
    stop();
    if (dialer_.joinable()) dialer_.join();
    acceptor_.reset();
  }
  LazyMesh(const LazyMesh&) = delete;
  LazyMesh& operator=(const LazyMesh&) = delete;

  const std::atomic<bool>* flag(int peer) const { return &connected_[peer]; }

  void start(net::Listener listener) {
    acceptor_ = std::make_unique<Acceptor>(
        std::move(listener), rank_, static_cast<int>(peers_.size()), 0, group_id_, options_.nsocks,
        key_, options_.tls, Deadline::never(), options_.timeout, this);
    dialer_ = std::thread([this] { dial_loop(); });
  }

  void enlist(int peer, size_t lane, LazyChannel* channel) {
    MutexLock lock(mu_);
    state_[peer].lanes[lane] = channel;
  }
  void forget(int peer, size_t lane) {
    MutexLock lock(mu_);
    state_[peer].lanes[lane] = nullptr;
  }

  // The first operation for `peer`: it is dialled unless a connection from it is coming.
  void want(int peer) {
    MutexLock lock(mu_);
    PeerState& s = state_[peer];
    if (s.phase != Phase::kIdle || stopping_.load() || leaving_) return;
    s.phase = Phase::kDialing;
    dials_.push_back(peer);
    cv_.notify_all();
  }

  // This rank destroys its Comm cleanly, `peer`'s goodbye next (channel.h's leave): from
  // now on a dial from a peer not yet connected is answered kLeft; a connection to `peer`
  // in the making is waited for (by `deadline`), so that the goodbye goes over it.
  void leave(int peer, Deadline deadline) {
    MutexLock lock(mu_);
    leaving_ = true;
    PeerState& s = state_[peer];
    while ((s.phase == Phase::kDialing || s.phase == Phase::kAccepting) && !stopping_.load() &&
           !deadline.expired()) {
      cv_.wait_for(mu_, deadline.remaining());  // deliver, the dial's end and stop() notify
    }
  }

  // Never blocks: the acceptor ends within a poll slice (closing the listener), the
  // dialer between attempts.
  void stop() {
    MutexLock lock(mu_);
    stopping_.store(true);
    cv_.notify_all();
    if (dialing_fd_ >= 0) ::shutdown(dialing_fd_, SHUT_RDWR);  // ends a waiting handshake
  }

  // A dial from `peer` arrived. Two ranks that dial each other at once keep the higher
  // one's dial: the lower one's is answered kCrossed, and it waits for the other.
  std::string refuse(int peer, size_t lane) override {
    if (!peers_[peer]) {
      return detail::str_cat("rank ", peer, " is reached by another kind of channel");
    }
    MutexLock lock(mu_);
    if (stopping_.load()) return "this rank's group is shutting down";
    PeerState& s = state_[peer];
    switch (s.phase) {
      case Phase::kIdle:
        if (leaving_) {
          s.phase = Phase::kLeft;
          return AcceptSink::kLeft;
        }
        s.phase = Phase::kAccepting;
        return {};
      case Phase::kDialing:
        if (peer < rank_) return AcceptSink::kCrossed;
        s.phase = Phase::kAccepting;  // our own dial will be answered kCrossed
        return {};
      case Phase::kAccepting:
        if (!s.socket.fds[lane]) return {};
        break;
      case Phase::kDelivered:  // through the peer's own dial, which crossed this one
        if (lane == 0) return AcceptSink::kCrossed;
        break;
      case Phase::kLeft:
        return AcceptSink::kLeft;
      case Phase::kFailed:
      case Phase::kGone:
        break;
    }
    return "rank already connected on this socket index (duplicate)";
  }
  void take(int peer, size_t lane, net::Fd fd, std::unique_ptr<net::tls::Session> session,
            const std::string& address) override {
    MutexLock lock(mu_);
    if (stopping_.load()) return;  // closes it
    PeerState& s = state_[peer];
    s.socket.fds[lane] = std::move(fd);
    s.socket.sessions[lane] = std::move(session);
    s.socket.address = address;
    if (++s.arrived == options_.nsocks) deliver_locked(peer);
  }
  bool done() override { return stopping_.load(); }

 private:
  // A pair's connection: idle until either side wants it; then this rank dials it, or
  // accepts the peer's dial (which wins when both dial); delivered to the channels once
  // every lane is through, or failed; or found gone (the peer left, or nothing listens at
  // its address); or this rank left before the pair connected (leave).
  enum class Phase { kIdle, kDialing, kAccepting, kDelivered, kFailed, kGone, kLeft };
  struct PeerState {
    Phase phase = Phase::kIdle;
    PeerSocket socket;
    size_t arrived = 0;               // lanes accepted
    std::vector<LazyChannel*> lanes;  // by lane; null once its channel is gone
  };

  void deliver_locked(int peer) TDIST_REQUIRES(mu_) {
    PeerState& s = state_[peer];
    TDIST_LOG(kDebug) << "rank " << rank_ << ": TCP connection to rank " << peer << " made ("
                      << (s.phase == Phase::kDialing ? "dialled" : "accepted") << ", "
                      << options_.nsocks << " socket(s))";
    s.phase = Phase::kDelivered;
    for (size_t lane = 0; lane < options_.nsocks; ++lane) {
      std::unique_ptr<core::Channel> channel;
      if (s.socket.sessions[lane]) {
        channel = std::make_unique<TlsChannel>(std::move(s.socket.fds[lane]),
                                               std::move(s.socket.sessions[lane]), s.socket.address,
                                               options_.socket_buffer_bytes);
      } else {
        channel = std::make_unique<TcpChannel>(std::move(s.socket.fds[lane]), s.socket.address,
                                               options_.socket_buffer_bytes);
      }
      if (s.lanes[lane] != nullptr) s.lanes[lane]->set(std::move(channel));
    }
    connected_[peer].store(true, std::memory_order_release);
    for (LazyChannel* lane : s.lanes) {
      if (lane != nullptr) lane->published();
    }
    cv_.notify_all();  // leave() waits for it
  }

  // The dialer's socket in its handshake (-1: none), for stop().
  void watch(int fd) {
    MutexLock lock(mu_);
    dialing_fd_ = fd;
    if (fd >= 0 && stopping_.load()) ::shutdown(fd, SHUT_RDWR);
  }

  void dial_loop() {
    UniqueLock lock(mu_);
    while (true) {
      while (dials_.empty() && !stopping_.load()) cv_.wait(mu_);
      if (stopping_.load()) return;
      const int peer = dials_.front();
      dials_.pop_front();
      if (state_[peer].phase != Phase::kDialing) continue;  // its dial came first: taken
      PeerSocket socket;
      socket.fds.resize(options_.nsocks);
      socket.sessions.resize(options_.nsocks);
      std::string why;
      {
        MutexUnlock unlocked(mu_);
        try {
          DialRetry retry{kConnectAttempt, &stopping_, [this](int fd) { watch(fd); }};
          why = dial_peer(rank_, peer, addresses_[peer], group_id_, options_.nsocks, key_,
                          options_.tls, Deadline::after(options_.timeout), retry, &socket);
        } catch (const Error& e) {  // AuthError: a refused token or certificate
          why = e.what();
        }
      }
      PeerState& s = state_[peer];
      if (s.phase != Phase::kDialing) continue;  // the peer's dial won: ours was crossed
      if (why.empty()) {
        s.socket = std::move(socket);
        deliver_locked(peer);
      } else if (why == kCrossedDial) {
        s.phase = Phase::kAccepting;  // its dial is on the way
      } else {
        const bool gone = is_gone_dial(why);
        s.phase = gone ? Phase::kGone : Phase::kFailed;
        for (LazyChannel* lane : s.lanes) {
          if (lane == nullptr) continue;
          if (gone) {
            lane->depart(why.substr(kGoneDial.size()));
          } else {
            lane->fail(why);
          }
        }
        cv_.notify_all();  // leave() waits for it
      }
    }
  }

  const int rank_;
  const std::vector<bool> peers_;
  const uint64_t group_id_;
  const LazyMeshOptions options_;
  const net::auth::Key key_;
  const std::vector<std::string> addresses_;  // every peer's ("host:port"), by rank
  // By peer: its lanes have their channels (LazyChannel::real); set once, under mu_.
  const std::unique_ptr<std::atomic<bool>[]> connected_;
  Mutex mu_;
  CondVar cv_;
  std::vector<PeerState> state_ TDIST_GUARDED_BY(mu_);
  std::deque<int> dials_ TDIST_GUARDED_BY(mu_);
  int dialing_fd_ TDIST_GUARDED_BY(mu_) = -1;
  bool leaving_ TDIST_GUARDED_BY(mu_) = false;  // this rank destroys its Comm (leave)
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Acceptor> acceptor_;
  std::thread dialer_;
};

LazyChannel::LazyChannel(std::shared_ptr<LazyMesh> mesh, int peer, size_t lane, std::string address,
                         const std::atomic<bool>* connected)
    : mesh_(std::move(mesh)),
      peer_(peer),
      lane_(lane),
      address_(std::move(address)),
      connected_(connected) {
  TDIST_CHECK(event_, Error, "TCP transport: eventfd failed: ", net::errno_text(errno));
}

LazyChannel::~LazyChannel() { mesh_->forget(peer_, lane_); }

void LazyChannel::activate() { mesh_->want(peer_); }

void LazyChannel::leave(Deadline deadline) { mesh_->leave(peer_, deadline); }

void LazyChannel::shut_down() {
  if (core::Channel* c = real()) c->shut_down();
  mesh_->stop();
}

}  // namespace

std::vector<std::vector<std::unique_ptr<core::Channel>>> make_lazy_mesh(
    Store& store, int rank, int size, const std::vector<bool>& peers, int first,
    const LazyMeshOptions& options, Deadline deadline) {
  TDIST_CHECK(options.nsocks >= 1 && options.nsocks <= kLeftLane, InvalidArgument,
              "TCP transport: ", options.nsocks, " sockets per peer is out of range");
  const auto start = Clock::now();
  const uint64_t group_id = group_nonce(store, "group_id", rank == first, deadline);
  net::Listener listener = net::listen_tcp(options.local_ip, 0);
  store.set("addr/" + std::to_string(rank),
            net::format_host_port(options.local_ip, listener.port()));
  std::vector<std::string> keys;
  std::vector<int> listed;  // every peer of this kind: either side may dial
  for (int peer = 0; peer < size; ++peer) {
    if (!peers[peer]) continue;
    keys.push_back("addr/" + std::to_string(peer));
    listed.push_back(peer);
  }
  std::vector<std::string> addresses(static_cast<size_t>(size));
  if (!keys.empty()) {
    std::vector<Bytes> values;
    try {
      values = store.multi_get(keys, deadline);
    } catch (const TimeoutError&) {
      std::map<int, std::string> missing;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (!store.check({keys[i]})) missing[listed[i]] = "it never published its address";
      }
      throw_setup_timeout(rank, size, "TCP transport setup (lazy)", missing, start);
    }
    for (size_t i = 0; i < listed.size(); ++i) addresses[listed[i]] = to_string(values[i]);
  }
  auto mesh = std::make_shared<LazyMesh>(rank, peers, group_id, options, addresses);
  std::vector<std::vector<std::unique_ptr<core::Channel>>> table(static_cast<size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    if (!peers[peer]) continue;
    for (size_t lane = 0; lane < options.nsocks; ++lane) {
      auto channel =
          std::make_unique<LazyChannel>(mesh, peer, lane, addresses[peer], mesh->flag(peer));
      mesh->enlist(peer, lane, channel.get());
      table[peer].push_back(std::move(channel));
    }
  }
  mesh->start(std::move(listener));
  return table;
}

}  // namespace tdist::transport::tcp
