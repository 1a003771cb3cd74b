// The shared-memory transport: a Comm between ranks of one host that moves bytes through
// shared-memory rings instead of sockets.
//
// connect_shm_comm() links every pair of ranks through the store (setup.h: abstract unix
// sockets for the handshake, wake-ups and failure detection; one memfd ring per ordered
// pair, created by its sender) and returns a Comm (engine.h) whose messages are copied
// into the sender's ring and out of it into the receiver's buffer: two memcpys, no kernel
// copy and no TCP stack. The contract is comm.h's: tagged non-blocking isend/irecv, FIFO
// per (peer, tag), unexpected messages buffered, exact-length receives (DesyncError for
// that receive only), zero-byte messages, abort that reaches every peer, TimeoutError at
// a wait's deadline without aborting.
// Progress: no background thread. A pending send progresses only while some thread of
// the receiving process waits on its Comm (engine.h); the collectives always wait.
// Ownership: the caller owns the Comm (destroying it says goodbye to every peer and
// unmaps the rings; pending requests fail with PeerError). The store is used only during
// connect_shm_comm. Thread-safety: as comm.h.
// Failure: a peer process dying (its socket closes without a goodbye) aborts the Comm
// with PeerError "rank R: shared-memory peer rank P (pid N) lost: ..." on the next wait;
// aborting sends every peer a notice and shuts the sockets down, so they abort too.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "tdist/settings.h"
#include "tdist/store.h"
#include "transport/comm.h"

namespace tdist::transport {

struct ShmCommOptions {
  // Deadline for the whole setup (TimeoutError naming the missing ranks).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // Data bytes of each ring this rank sends on (one per peer), clamped to 4 KiB..1 GiB;
  // ranks may differ.
  size_t ring_bytes = static_cast<size_t>(setting_int("TDIST_SHM_RING_BYTES"));
};

// Connects rank `rank` of `size` (all on this host, in one network namespace) through
// `store` (already namespaced per group by the caller). Blocks until all are connected.
// Throws InvalidArgument for a bad rank/size, TimeoutError when some rank did not connect
// in time (e.g. it runs on another host), Error when a system call fails, PeerError when
// the store fails.
std::unique_ptr<Comm> connect_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const ShmCommOptions& options = {});

// A string equal on two processes exactly when connect_shm_comm can join them: the boot
// id (/proc/sys/kernel/random/boot_id), the inode of the network namespace
// (/proc/self/ns/net) and the hostname (for messages), joined by ':'.
std::string shm_host_key();

}  // namespace tdist::transport
