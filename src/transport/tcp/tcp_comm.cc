// TcpComm: the Comm of the TCP transport — the I/O thread, abort, and clean destruction.
#include "transport/tcp/tcp_comm.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>
#include <vector>

#include "net/fd.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "transport/tcp/interface.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/peer.h"
#include "transport/tcp/request.h"
#include "transport/tcp/wire.h"

namespace tdist::transport {
namespace {

using tcp::Peer;

constexpr uint32_t kWakeToken = ~uint32_t{0};
constexpr int kMaxEvents = 64;
// How long destruction may spend flushing and saying goodbye to all peers together.
constexpr auto kGoodbyeTimeout = std::chrono::seconds(2);

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

class TcpComm final : public Comm {
 public:
  TcpComm(int rank, int size, std::vector<tcp::PeerSocket> sockets, size_t buffer_bytes)
      : rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {
    epoll_ = net::Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) TDIST_THROW(Error, "epoll_create1 failed: ", net::errno_text(errno));
    wake_ = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_) TDIST_THROW(Error, "eventfd failed: ", net::errno_text(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = kWakeToken;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
      TDIST_THROW(Error, "epoll_ctl(eventfd) failed: ", net::errno_text(errno));
    }
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      tcp::PeerSocket& s = sockets[peer];
      peers_[peer] = std::make_unique<Peer>(
          rank, peer, std::move(s.fds), std::move(s.address), epoll_.get(), buffer_bytes,
          [this](const std::string& message) { connection_lost(message); });
    }
    if (size > 1) thread_ = std::thread([this] { run(); });
  }

  ~TcpComm() override {
    stop_thread();
    destroying_ = true;
    auto error = std::make_exception_ptr(
        PeerError(detail::str_cat("rank ", rank_, ": the Comm was destroyed")));
    if (!aborted_.load()) {
      Deadline deadline = Deadline::after(kGoodbyeTimeout);
      for (auto& peer : peers_) {
        if (peer) peer->say_goodbye(deadline);
      }
    }
    for (auto& peer : peers_) {
      if (peer) peer->fail_all(error, /*tell_peer=*/false, {});
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    check_args("isend to", peer, tag, data, bytes);
    return std::make_unique<tcp::TcpRequest>(peers_[peer]->post_send(tag, data, bytes));
  }

  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    check_args("irecv from", peer, tag, data, bytes);
    return std::make_unique<tcp::TcpRequest>(peers_[peer]->post_recv(tag, data, bytes));
  }

  void abort(std::exception_ptr reason) override {
    if (!reason) {
      reason = std::make_exception_ptr(
          PeerError(detail::str_cat("rank ", rank_, ": the Comm was aborted")));
    }
    abort_with(reason, /*log=*/false);
  }

  std::exception_ptr error() const override {
    std::lock_guard<std::mutex> lock(error_mu_);
    return error_;
  }

 private:
  void check_args(const char* what, int peer, uint64_t tag, const void* data, size_t bytes) const {
    TDIST_CHECK(peer >= 0 && peer < size_ && peer != rank_, InvalidArgument, "rank ", rank_, ": ",
                what, " rank ", peer, ": not another rank of this group (size ", size_, ")");
    TDIST_CHECK(tag != tcp::kGoodbyeTag && tag != tcp::kAbortTag, InvalidArgument, "rank ", rank_,
                ": tag 0x", std::hex, tag, " is reserved by the TCP transport");
    TDIST_CHECK(data != nullptr || bytes == 0, InvalidArgument, "rank ", rank_, ": ", what,
                " rank ", peer, ": null buffer for ", bytes, " bytes");
  }

  void connection_lost(const std::string& message) {
    abort_with(std::make_exception_ptr(PeerError(message)), /*log=*/true);
  }

  void abort_with(const std::exception_ptr& reason, bool log) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (error_) return;
      error_ = reason;
    }
    aborted_ = true;
    std::string text = what_of(reason);
    if (log && !destroying_) {
      TDIST_LOG(kWarn) << "TCP transport aborted: " << text;
    }
    for (auto& peer : peers_) {
      if (peer) peer->fail_all(reason, /*tell_peer=*/true, text);
    }
    wake();
  }

  void wake() {
    uint64_t one = 1;
    ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    (void)n;  // the counter saturating still wakes the loop
  }

  void stop_thread() {
    stop_ = true;
    wake();
    if (thread_.joinable()) thread_.join();
  }

  // The I/O thread: blocks in epoll_wait; never spins.
  void run() {
    epoll_event events[kMaxEvents];
    while (!stop_.load(std::memory_order_acquire) && !aborted_.load(std::memory_order_acquire)) {
      int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        connection_lost(detail::str_cat(
            "rank ", rank_, ": TCP transport epoll_wait failed: ", net::errno_text(errno)));
        return;
      }
      for (int i = 0; i < n; ++i) {
        uint32_t token = events[i].data.u32;
        if (token == kWakeToken) {
          uint64_t count = 0;
          ssize_t r = ::read(wake_.get(), &count, sizeof(count));
          (void)r;
          continue;
        }
        if (aborted_.load(std::memory_order_acquire)) return;  // sockets are shut down
        Peer& peer = *peers_[token & ((1u << Peer::kLaneShift) - 1)];
        const size_t lane = token >> Peer::kLaneShift;
        uint32_t ev = events[i].events;
        if ((ev & EPOLLOUT) != 0) peer.on_writable(lane);
        if ((ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) peer.on_readable(lane);
      }
    }
  }

  const int rank_;
  const int size_;
  net::Fd epoll_;
  net::Fd wake_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null at rank_
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  std::atomic<bool> destroying_{false};
  mutable std::mutex error_mu_;
  std::exception_ptr error_;  // guarded by error_mu_
};

}  // namespace

std::unique_ptr<Comm> connect_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const TcpCommOptions& options) {
  TDIST_CHECK(size >= 1, InvalidArgument, "TCP transport: world size ", size, " is not positive");
  TDIST_CHECK(rank >= 0 && rank < size, InvalidArgument, "TCP transport: rank ", rank,
              " is not in [0, ", size, ")");
  TDIST_CHECK(store != nullptr, InvalidArgument, "TCP transport: no store given");
  std::string ip = tcp::choose_local_ip(store.get(), options.ifname);
  const size_t nsocks = static_cast<size_t>(
      std::clamp<int>(options.nsocks_per_peer, 1, static_cast<int>(Peer::kMaxLanes)));
  auto sockets = tcp::build_mesh(*store, rank, size, ip, nsocks, Deadline::after(options.timeout));
  return std::make_unique<TcpComm>(rank, size, std::move(sockets), options.socket_buffer_bytes);
}

}  // namespace tdist::transport
