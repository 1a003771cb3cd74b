// Setup of the shared-memory transport: one unix socket and two rings per pair of ranks.
//
// Only the pairs this kind of channel serves are linked: `peers` (by rank) says which
// peers of this rank, and every participating rank passes the same `first` (the lowest
// rank with any shared-memory peer), which publishes a random 64-bit group nonce under
// "nonce" in the store (namespaced per group by the caller); nothing else goes through
// the store. Every rank listens on the abstract unix stream socket
// "\0tdist-shm-<nonce hex>-<rank>" (no filesystem entry, nothing to clean up; it is closed
// once setup ends). Rank i connects to every peer j < i, in order, and then accepts from
// every peer j > i; this order cannot deadlock, because a rank's connects only need lower
// ranks to reach their accept phase. Each side first checks that the other runs as the same
// user (SO_PEERCRED), and with a token (TDIST_AUTH_TOKEN) the two prove they know it
// (transport/auth_exchange.h; AuthError when they disagree). Then each side sends a hello
// {magic, version, sender, receiver, nonce, pid, ring capacity} with the memfd of the ring
// it will write to that peer attached (SCM_RIGHTS); the other side checks the hello and
// maps the ring. A connection with a wrong hello is closed with a log line and does not
// count. Rings are memfds (MFD_CLOEXEC), so nothing appears in /dev/shm and a SIGKILL
// leaks nothing: the memory goes when the last mapping goes.
// Blocking: returns when every peer is linked; TimeoutError at `deadline` naming the ranks
// that never connected and why; Error when a system call fails (with its strerror);
// PeerError when the store fails. Thread-safe: independent calls may run concurrently.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "net/fd.h"
#include "tdist/deadline.h"
#include "transport/shm/ring.h"

namespace tdist {
class Store;
}

namespace tdist::transport::shm {

// Owns one mapping of a ring (munmap when destroyed). Move-only.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t length) : addr_(addr), length_(length) {}
  ~Mapping();
  Mapping(Mapping&& other) noexcept { swap(other); }
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      Mapping old(std::move(*this));
      swap(other);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  bool valid() const { return addr_ != nullptr; }
  // The ring inside the mapping (control page, then the data area).
  RingView ring() const;

 private:
  void swap(Mapping& other) noexcept {
    std::swap(addr_, other.addr_);
    std::swap(length_, other.length_);
  }
  void* addr_ = nullptr;
  size_t length_ = 0;
};

// Everything one rank holds for one peer once setup is done.
struct PeerLink {
  net::Fd socket;  // connected unix stream socket, non-blocking
  Mapping send;    // the ring this rank writes to the peer (created here)
  Mapping recv;    // the ring the peer writes to this rank (received from it)
  pid_t pid = 0;   // the peer's process id here (SO_PEERCRED; 0: in another pid namespace)
};

// The links by peer rank (entries of non-peers and of `rank` stay empty). `ring_bytes` is the data
// area of each ring this rank sends on (rounded up to 64 bytes); peers may use other sizes.
std::vector<PeerLink> link_peers(Store& store, int rank, int size, const std::vector<bool>& peers,
                                 int first, size_t ring_bytes, Deadline deadline);

// boot id + ':' + inode of this network namespace + ':' + hostname (see shm_comm.h).
std::string host_key();

}  // namespace tdist::transport::shm
