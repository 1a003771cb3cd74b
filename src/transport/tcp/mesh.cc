// Full-mesh connection setup through the store, with a hello handshake on every socket.
#include "transport/tcp/mesh.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "net/address.h"
#include "net/socket.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/store.h"
#include "transport/connect.h"

namespace tdist::transport::tcp {
namespace {

constexpr uint32_t kHelloMagic = 0x74644354;  // "tdCT"
constexpr uint16_t kProtocolVersion = 2;      // 2: several sockets per peer (lane, nsocks)
constexpr size_t kHelloBytes = 24;
constexpr auto kAcceptPollSlice = std::chrono::milliseconds(50);
constexpr auto kRetryPause = std::chrono::milliseconds(20);

struct Hello {
  uint32_t magic = kHelloMagic;
  uint16_t version = kProtocolVersion;
  uint8_t lane = 0;
  uint8_t nsocks = 1;
  uint32_t sender = 0;
  uint32_t receiver = 0;
  uint64_t group_id = 0;
};

template <typename T>
void put(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

template <typename T>
T take(const uint8_t* in) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(T{in[i]} << (8 * i));
  return value;
}

// Little-endian: magic(4) version(2) lane(1) nsocks(1) sender(4) receiver(4) group_id(8).
void encode(const Hello& h, uint8_t* out) {
  std::memset(out, 0, kHelloBytes);
  put(out, h.magic);
  put(out + 4, h.version);
  out[6] = h.lane;
  out[7] = h.nsocks;
  put(out + 8, h.sender);
  put(out + 12, h.receiver);
  put(out + 16, h.group_id);
}

Hello decode(const uint8_t* in) {
  Hello h;
  h.magic = take<uint32_t>(in);
  h.version = take<uint16_t>(in + 4);
  h.lane = in[6];
  h.nsocks = in[7];
  h.sender = take<uint32_t>(in + 8);
  h.receiver = take<uint32_t>(in + 12);
  h.group_id = take<uint64_t>(in + 16);
  return h;
}

// Empty when `h` is a valid hello from `sender_lo..sender_hi` to `receiver`; else why not.
std::string check_hello(const Hello& h, uint64_t group_id, size_t nsocks, int receiver,
                        int sender_lo, int sender_hi) {
  if (h.magic != kHelloMagic) return "not a tdist TCP transport connection (bad magic)";
  if (h.version != kProtocolVersion) {
    return detail::str_cat("protocol version ", h.version, ", expected ", kProtocolVersion);
  }
  if (h.group_id != group_id) {
    return detail::str_cat("group id ", h.group_id, " is not this group's ", group_id,
                           " (a stale connection from another group or attempt)");
  }
  if (h.nsocks != nsocks) {
    return detail::str_cat("it uses ", int{h.nsocks}, " sockets per peer, this rank ", nsocks,
                           " (TDIST_SOCKET_NSOCKS_PERPEER must agree on every rank)");
  }
  if (h.lane >= nsocks) return detail::str_cat("socket index ", int{h.lane}, " out of range");
  if (h.receiver != static_cast<uint32_t>(receiver)) {
    return detail::str_cat("meant for rank ", h.receiver, ", this is rank ", receiver);
  }
  if (h.sender < static_cast<uint32_t>(sender_lo) || h.sender > static_cast<uint32_t>(sender_hi)) {
    return detail::str_cat("sender rank ", h.sender, " is not in [", sender_lo, ", ", sender_hi,
                           "]");
  }
  return {};
}

// Accepts connections from the peers above `rank` on its own thread until all arrived,
// the deadline passed or stop() was called.
class Acceptor {
 public:
  Acceptor(net::Listener listener, int rank, int size, const std::vector<bool>& peers,
           uint64_t group_id, size_t nsocks, Deadline deadline, std::vector<PeerSocket>* sockets)
      : listener_(std::move(listener)),
        rank_(rank),
        size_(size),
        peers_(peers),
        group_id_(group_id),
        nsocks_(nsocks),
        deadline_(deadline),
        sockets_(sockets) {
    thread_ = std::thread([this] { run(); });
  }
  ~Acceptor() {
    stop_ = true;
    finish();
  }

  // Waits until every higher rank connected or the deadline passed.
  void finish() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Pending {
    net::Fd fd;
    uint8_t hello[kHelloBytes] = {};
    size_t got = 0;
  };

  void run() {
    int missing = 0;
    for (int peer = rank_ + 1; peer < size_; ++peer) {
      if (peers_[peer]) missing += static_cast<int>(nsocks_);
    }
    std::vector<Pending> pending;
    while (missing > 0 && !stop_ && !deadline_.expired()) {
      std::vector<pollfd> fds;
      fds.push_back({listener_.fd.get(), POLLIN, 0});
      for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
      Deadline slice = Deadline::earliest(deadline_, Deadline::after(kAcceptPollSlice));
      if (::poll(fds.data(), fds.size(), slice.poll_timeout_ms()) <= 0) continue;
      if (fds[0].revents != 0) accept_all(&pending);
      for (size_t i = pending.size(); i-- > 0;) {
        if (fds.size() <= i + 1 || fds[i + 1].revents == 0) continue;
        if (progress(&pending[i], &missing)) pending.erase(pending.begin() + i);
      }
    }
  }

  void accept_all(std::vector<Pending>* pending) {
    while (true) {
      int error = 0;
      net::Fd fd = net::accept_tcp(listener_.fd.get(), &error);
      if (!fd) {
        if (error != 0) {
          TDIST_LOG(kWarn) << "TCP transport: accept failed: " << net::errno_text(error);
        }
        return;
      }
      pending->push_back(Pending{std::move(fd)});
    }
  }

  // Reads hello bytes; true when the connection is finished with (kept or rejected).
  bool progress(Pending* p, int* missing) {
    ssize_t n = ::recv(p->fd.get(), p->hello + p->got, kHelloBytes - p->got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    std::string peer = net::SocketAddress::peer_of(p->fd.get()).to_string();
    if (n <= 0) {
      TDIST_LOG(kInfo) << "TCP transport: connection from " << peer << " closed before its hello";
      return true;
    }
    p->got += static_cast<size_t>(n);
    if (p->got < kHelloBytes) return false;
    Hello h = decode(p->hello);
    std::string why = check_hello(h, group_id_, nsocks_, rank_, rank_ + 1, size_ - 1);
    if (why.empty() && !peers_[h.sender]) {
      why = detail::str_cat("rank ", h.sender, " is reached by another kind of channel");
    }
    if (why.empty() && (*sockets_)[h.sender].fds[h.lane]) {
      why = "rank already connected on this socket index (duplicate)";
    }
    if (!why.empty()) {
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": rejected connection from " << peer
                       << ": " << why;
      return true;
    }
    uint8_t reply[kHelloBytes];
    encode(Hello{.lane = h.lane,
                 .nsocks = static_cast<uint8_t>(nsocks_),
                 .sender = static_cast<uint32_t>(rank_),
                 .receiver = h.sender,
                 .group_id = group_id_},
           reply);
    try {
      net::write_full(p->fd.get(), reply, kHelloBytes, deadline_, peer);
    } catch (const Error& e) {
      TDIST_LOG(kWarn) << "TCP transport rank " << rank_ << ": hello to rank " << h.sender
                       << " failed: " << e.what();
      return true;
    }
    (*sockets_)[h.sender].fds[h.lane] = std::move(p->fd);
    (*sockets_)[h.sender].address = peer;
    --*missing;
    return true;
  }

  net::Listener listener_;
  int rank_;
  int size_;
  std::vector<bool> peers_;
  uint64_t group_id_;
  size_t nsocks_;
  Deadline deadline_;
  std::vector<PeerSocket>* sockets_;  // the acceptor writes only entries > rank_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Connects to lower rank `peer` on every lane; empty on success, else why it failed
// (deadline passed).
std::string connect_to(Store& store, int rank, int peer, uint64_t group_id, size_t nsocks,
                       Deadline deadline, PeerSocket* out) {
  std::string address;
  try {
    address = to_string(store.get("addr/" + std::to_string(peer), deadline));
  } catch (const TimeoutError&) {
    return "it never published its address in the store";
  }
  net::HostPort hp = net::parse_host_port(address);
  out->address = address;
  for (size_t lane = 0; lane < nsocks; ++lane) {
    std::string last_error;
    while (!out->fds[lane] && !deadline.expired()) {
      try {
        net::Fd fd = net::connect_tcp(hp.host, hp.port, deadline);
        uint8_t hello[kHelloBytes];
        encode(Hello{.lane = static_cast<uint8_t>(lane),
                     .nsocks = static_cast<uint8_t>(nsocks),
                     .sender = static_cast<uint32_t>(rank),
                     .receiver = static_cast<uint32_t>(peer),
                     .group_id = group_id},
               hello);
        net::write_full(fd.get(), hello, kHelloBytes, deadline, address);
        net::read_full(fd.get(), hello, kHelloBytes, deadline, address);
        Hello reply = decode(hello);
        std::string why = check_hello(reply, group_id, nsocks, rank, peer, peer);
        if (why.empty() && reply.lane != lane) {
          why = detail::str_cat("socket index ", int{reply.lane}, ", expected ", lane);
        }
        if (why.empty()) {
          out->fds[lane] = std::move(fd);
          break;
        }
        last_error = "bad hello reply: " + why;
        TDIST_LOG(kWarn) << "TCP transport rank " << rank << ": " << address << " (rank " << peer
                         << "): " << last_error;
      } catch (const TimeoutError& e) {
        last_error = e.what();
      } catch (const PeerError& e) {
        last_error = e.what();  // e.g. the listener rejected us as a duplicate; retry
      }
      std::this_thread::sleep_for(kRetryPause);
    }
    if (!out->fds[lane]) return "no connection to " + address + ": " + last_error;
  }
  return {};
}

}  // namespace

std::vector<PeerSocket> build_mesh(Store& store, int rank, int size, const std::vector<bool>& peers,
                                   int first, const std::string& local_ip, size_t nsocks,
                                   Deadline deadline) {
  TDIST_CHECK(nsocks >= 1 && nsocks <= 255, InvalidArgument, "TCP transport: ", nsocks,
              " sockets per peer is out of range");
  std::vector<PeerSocket> sockets(static_cast<size_t>(size));
  for (PeerSocket& s : sockets) s.fds.resize(nsocks);
  if (size <= 1) return sockets;
  const auto start = Clock::now();
  uint64_t group_id = group_nonce(store, "group_id", rank == first, deadline);
  net::Listener listener = net::listen_tcp(local_ip, 0);
  std::string my_address = net::format_host_port(local_ip, listener.port());
  std::map<int, std::string> failures;
  {
    Acceptor acceptor(std::move(listener), rank, size, peers, group_id, nsocks, deadline, &sockets);
    store.set("addr/" + std::to_string(rank), my_address);
    for (int peer = 0; peer < rank; ++peer) {
      if (!peers[peer]) continue;
      std::string why = connect_to(store, rank, peer, group_id, nsocks, deadline, &sockets[peer]);
      if (!why.empty()) failures[peer] = why;
    }
    acceptor.finish();
  }
  for (int peer = rank + 1; peer < size; ++peer) {
    if (!peers[peer]) continue;
    for (const net::Fd& fd : sockets[peer].fds) {
      if (!fd) failures[peer] = "it never connected to " + my_address;
    }
  }
  if (failures.empty()) return sockets;
  std::ostringstream list;
  for (const auto& [peer, why] : failures) {
    list << (peer == failures.begin()->first ? "" : "; ") << "rank " << peer << ": " << why;
  }
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  TDIST_THROW(TimeoutError, "rank ", rank, ": TCP transport setup (world size ", size,
              ") did not finish within ", static_cast<int64_t>(secs * 10 + 0.5) / 10.0,
              "s; ranks never connected: ", list.str());
}

}  // namespace tdist::transport::tcp
