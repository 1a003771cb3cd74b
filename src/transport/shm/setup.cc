// Shared-memory transport setup: nonce, abstract unix sockets, hello handshake, memfd rings.
#include "transport/shm/setup.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/store.h"
#include "transport/auth_exchange.h"
#include "transport/connect.h"
#include "transport/shm/hello_codec.h"

namespace tdist::transport::shm {
namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(10);
constexpr std::string_view kAuthContext = "shm-transport";

// Empty when the process at the other end of `fd` runs as this process's user (SO_PEERCRED);
// else why not. `pid` is its process id as this process sees it (0: outside its pid
// namespace), the one single-copy reads address.
std::string check_credentials(int fd, pid_t* pid) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return detail::str_cat("SO_PEERCRED failed: ", net::errno_text(errno));
  }
  if (cred.uid != ::geteuid()) {
    return detail::str_cat("it runs as user ", cred.uid, ", this rank as user ", ::geteuid());
  }
  *pid = cred.pid;
  return {};
}

[[noreturn]] void throw_errno(const std::string& what, int error = errno) {
  TDIST_THROW(Error, "shared-memory transport: ", what, " failed: ", net::errno_text(error));
}

// The abstract socket address of `rank` in the group `nonce` (sun_path[0] == '\0').
socklen_t abstract_address(uint64_t nonce, int rank, sockaddr_un* out) {
  *out = sockaddr_un{};
  out->sun_family = AF_UNIX;
  int n = std::snprintf(out->sun_path + 1, sizeof(out->sun_path) - 1, "tdist-shm-%016llx-%d",
                        static_cast<unsigned long long>(nonce), rank);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
}

net::Fd unix_socket() {
  net::Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket(AF_UNIX)");
  return fd;
}

// A ring of `capacity` data bytes in a fresh memfd, mapped here; `fd` stays open so that
// it can be passed to the peer.
Mapping create_ring(size_t capacity, net::Fd* fd) {
  *fd = net::Fd(::memfd_create("tdist-shm-ring", MFD_CLOEXEC));
  if (!*fd) throw_errno("memfd_create");
  const size_t length = kRingControlBytes + capacity;
  if (::ftruncate(fd->get(), static_cast<off_t>(length)) != 0) throw_errno("ftruncate(memfd)");
  void* addr =
      ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd->get(), 0);
  if (addr == MAP_FAILED) throw_errno("mmap(memfd)");
  Mapping mapping(addr, length);
  RingControl* control = mapping.ring().control;
  control->magic = kRingMagic;
  control->capacity = capacity;
  return mapping;
}

// Maps a ring received from a peer; empty mapping and `why` set when it is not one.
Mapping map_ring(int fd, uint64_t capacity, std::string* why) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("fstat(memfd)");
  const uint64_t length = kRingControlBytes + capacity;
  if (capacity < kMinRingBytes || capacity > kMaxRingBytes || capacity % kRingAlign != 0 ||
      static_cast<uint64_t>(st.st_size) != length) {
    *why = detail::str_cat("its ring (", st.st_size, " bytes) does not match capacity ", capacity);
    return {};
  }
  void* addr = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (addr == MAP_FAILED) throw_errno("mmap(peer ring)");
  Mapping mapping(addr, length);
  const RingControl* control = mapping.ring().control;
  if (control->magic != kRingMagic || control->capacity != capacity) {
    *why = "its ring has a bad control page";
    return {};
  }
  return mapping;
}

// Sends `hello` with `ring_fd` attached. The socket is fresh, so 40 bytes always fit.
void send_hello(int fd, const Hello& hello, int ring_fd) {
  iovec iov{const_cast<Hello*>(&hello), sizeof(hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), &ring_fd, sizeof(int));
  ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(sizeof(hello))) {
    throw PeerError(detail::str_cat("sending the hello failed: ",
                                    n < 0 ? net::errno_text(errno) : "short write"));
  }
}

// A hello being received: bytes so far and the memfd that came with them.
struct Incoming {
  net::Fd fd;
  std::optional<AuthResponder> auth;  // with a token: the exchange before the hello
  pid_t peer_pid = 0;                 // from SO_PEERCRED
  Hello hello;
  size_t got = 0;
  net::Fd ring;
  bool closed = false;  // EOF or error before the whole hello

  // Reads what is there; true once the hello is complete (or `closed`).
  bool read_some() {
    while (got < sizeof(hello)) {
      iovec iov{reinterpret_cast<uint8_t*>(&hello) + got, sizeof(hello) - got};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      ssize_t n = ::recvmsg(fd.get(), &msg, MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int received = -1;
          std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          net::Fd owned(received);  // only the first one is kept
          if (!ring) ring = std::move(owned);
        }
      }
      if (n <= 0) {
        closed = true;
        return true;
      }
      got += static_cast<size_t>(n);
    }
    return true;
  }
};

// Empty when `in` holds a valid hello from a rank in [lo, hi] to `receiver`, with a ring
// memfd; else why not.
std::string check_incoming(const Incoming& in, uint64_t nonce, int receiver, int lo, int hi) {
  if (in.closed) return "the connection closed before its hello";
  std::string why = check_hello(in.hello, nonce, receiver, lo, hi);
  if (!why.empty()) return why;
  if (!in.ring) return "no ring memfd came with the hello";
  return {};
}

// Connects to lower rank `peer`; empty on success, else why not (the deadline passed).
std::string connect_to(int rank, int peer, uint64_t nonce, size_t capacity,
                       const net::auth::Key& key, Deadline deadline, PeerLink* link) {
  sockaddr_un address;
  const socklen_t length = abstract_address(nonce, peer, &address);
  std::string last_error = "it never listened";
  while (!deadline.expired()) {
    Incoming in{unix_socket()};
    if (::connect(in.fd.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
      if (errno != ECONNREFUSED && errno != EAGAIN && errno != ENOENT && errno != EINTR) {
        throw_errno("connect(AF_UNIX)");
      }
      last_error = detail::str_cat("connect: ", net::errno_text(errno));
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }
    const std::string what = detail::str_cat("shared-memory transport: rank ", peer);
    if (std::string why = check_credentials(in.fd.get(), &in.peer_pid); !why.empty()) {
      TDIST_THROW(AuthError, what, "'s socket is not this job's: ", why);
    }
    net::Fd ring_fd;
    Mapping send = create_ring(capacity, &ring_fd);
    try {
      if (key.enabled()) authenticate_initiator(in.fd.get(), key, kAuthContext, deadline, what);
      send_hello(in.fd.get(), hello_to(rank, peer, nonce, capacity), ring_fd.get());
    } catch (const PeerError& e) {
      last_error = e.what();
      continue;
    }
    while (!in.read_some()) {
      pollfd p{in.fd.get(), POLLIN, 0};
      if (::poll(&p, 1, deadline.poll_timeout_ms()) == 0) return "it never answered the hello";
    }
    if (in.got >= 4 && is_refusal(reinterpret_cast<const uint8_t*>(&in.hello))) {
      TDIST_THROW(AuthError, what, " requires authentication, and this process has no token (",
                  net::auth::kTokenHint, ")");
    }
    std::string why = check_incoming(in, nonce, rank, peer, peer);
    Mapping recv;
    if (why.empty()) recv = map_ring(in.ring.get(), in.hello.capacity, &why);
    if (!why.empty()) {
      TDIST_LOG(kWarn) << "shared-memory transport rank " << rank << ": bad reply from rank "
                       << peer << ": " << why;
      last_error = "bad hello reply: " + why;
      std::this_thread::sleep_for(kRetryPause);
      continue;
    }
    *link = PeerLink{std::move(in.fd), std::move(send), std::move(recv), in.peer_pid};
    return {};
  }
  return last_error;
}

// Accepts from every higher peer until all are linked or the deadline passes.
void accept_all(int listen_fd, int rank, int size, const std::vector<bool>& peers, uint64_t nonce,
                size_t capacity, const net::auth::Key& key, Deadline deadline,
                std::vector<PeerLink>* links) {
  int missing = 0;
  for (int peer = rank + 1; peer < size; ++peer) missing += peers[peer] ? 1 : 0;
  std::vector<Incoming> pending;
  while (missing > 0 && !deadline.expired()) {
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    for (const Incoming& in : pending) fds.push_back({in.fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), deadline.poll_timeout_ms()) <= 0) continue;
    for (size_t i = pending.size(); i-- > 0;) {
      if (fds[i + 1].revents == 0) continue;
      if (std::optional<AuthResponder>& auth = pending[i].auth) {
        const AuthResponder::State state = auth->progress(pending[i].fd.get(), deadline);
        if (state == AuthResponder::State::kMore) continue;
        if (state == AuthResponder::State::kRefused) {
          TDIST_LOG(kWarn) << "shared-memory transport rank " << rank
                           << ": rejected a connection: " << auth->why();
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        auth.reset();  // authenticated: its hello follows
      }
      if (!pending[i].read_some()) continue;
      Incoming in = std::move(pending[i]);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      if (!key.enabled() && in.got >= 4 && is_auth_hello(reinterpret_cast<uint8_t*>(&in.hello))) {
        refuse_no_token(in.fd.get());
        TDIST_LOG(kWarn) << "shared-memory transport rank " << rank
                         << ": rejected a connection: it authenticates, and this rank has no "
                            "token ("
                         << net::auth::kTokenHint << ")";
        continue;
      }
      std::string why = check_incoming(in, nonce, rank, rank + 1, size - 1);
      if (why.empty() && !peers[in.hello.route.sender])
        why = "not a shared-memory peer of this rank";
      if (why.empty() && (*links)[in.hello.route.sender].socket) why = "rank already connected";
      Mapping recv;
      if (why.empty()) recv = map_ring(in.ring.get(), in.hello.capacity, &why);
      if (!why.empty()) {
        TDIST_LOG(kWarn) << "shared-memory transport rank " << rank
                         << ": rejected a connection: " << why;
        continue;
      }
      const int peer = static_cast<int>(in.hello.route.sender);
      net::Fd ring_fd;
      Mapping send = create_ring(capacity, &ring_fd);
      try {
        send_hello(in.fd.get(), hello_to(rank, peer, nonce, capacity), ring_fd.get());
      } catch (const PeerError& e) {
        TDIST_LOG(kWarn) << "shared-memory transport rank " << rank << ": hello to rank " << peer
                         << ": " << e.what();
        continue;
      }
      (*links)[peer] = PeerLink{std::move(in.fd), std::move(send), std::move(recv), in.peer_pid};
      --missing;
    }
    if (fds[0].revents != 0) {
      while (true) {
        net::Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) break;
        Incoming in{std::move(fd)};
        if (std::string why = check_credentials(in.fd.get(), &in.peer_pid); !why.empty()) {
          TDIST_LOG(kWarn) << "shared-memory transport rank " << rank
                           << ": rejected a connection: " << why;
          continue;
        }
        if (key.enabled()) in.auth.emplace(key, kAuthContext, kHelloBytes);
        pending.push_back(std::move(in));
      }
    }
  }
}

}  // namespace

Mapping::~Mapping() {
  if (addr_ != nullptr) ::munmap(addr_, length_);
}

RingView Mapping::ring() const {
  auto* base = static_cast<uint8_t*>(addr_);
  auto* control = reinterpret_cast<RingControl*>(base);
  auto* slots = reinterpret_cast<SlotArea*>(base + kSlotAreaOffset);
  return RingView{control, slots, base + kRingControlBytes, length_ - kRingControlBytes};
}

std::vector<PeerLink> link_peers(Store& store, int rank, int size, const std::vector<bool>& peers,
                                 int first, size_t ring_bytes, Deadline deadline) {
  std::vector<PeerLink> links(static_cast<size_t>(size));
  if (size <= 1) return links;
  const size_t capacity = (std::clamp(ring_bytes, kMinRingBytes, kMaxRingBytes) + kRingAlign - 1) /
                          kRingAlign * kRingAlign;
  const auto start = Clock::now();
  const uint64_t nonce = group_nonce(store, "nonce", rank == first, deadline);
  const net::auth::Key key = net::auth::Key::from_settings();
  net::Fd listener = unix_socket();
  sockaddr_un address;
  const socklen_t length = abstract_address(nonce, rank, &address);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    throw_errno(detail::str_cat("bind(\\0", address.sun_path + 1, ")"), error);
  }
  if (::listen(listener.get(), size) != 0) throw_errno("listen(AF_UNIX)");
  std::map<int, std::string> failures;
  for (int peer = 0; peer < rank; ++peer) {
    if (!peers[peer]) continue;
    std::string why = connect_to(rank, peer, nonce, capacity, key, deadline, &links[peer]);
    if (!why.empty()) failures[peer] = why;
  }
  accept_all(listener.get(), rank, size, peers, nonce, capacity, key, deadline, &links);
  for (int peer = rank + 1; peer < size; ++peer) {
    if (peers[peer] && !links[peer].socket) failures[peer] = "it never connected to this rank";
  }
  if (failures.empty()) return links;
  throw_setup_timeout(rank, size, "shared-memory transport setup", failures, start,
                      " (all ranks must run on one host, in one network namespace)");
}

std::string host_key() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  struct stat st {};
  if (boot_id.empty() || ::stat("/proc/self/ns/net", &st) != 0) {
    // Unknown: a key no other process shares, so shared memory is never assumed.
    return detail::str_cat("unknown:", host, ":", ::getpid());
  }
  return detail::str_cat(boot_id, ":", st.st_ino, ":", host);
}

}  // namespace tdist::transport::shm
