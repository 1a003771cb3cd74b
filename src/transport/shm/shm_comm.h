// The shared-memory transport: channels (channel.h) between ranks of one host that move
// bytes through shared-memory rings instead of sockets.
//
// Setup (setup.h) links every pair of ranks it serves through the store: abstract unix
// sockets for the handshake, wake-ups and failure detection; one memfd ring per ordered
// pair, created by its sender. Messages are copied into the sender's ring and out of it
// into the receiver's buffer: two memcpys, no kernel copy and no TCP stack.
// connect_shm_comm() returns a Comm whose every peer is reached through shared memory (the
// `shm` backend; every rank must be on this host); make_shm_kind() is the kind the `auto`
// backend prefers for peers with the same host key (connect.h).
// Progress: as the core's (core/engine.h): bytes move while some thread of the process
// waits on the Comm.
// Ownership: the caller owns the Comm (destroying it says goodbye to every peer and
// unmaps the rings; pending requests fail with PeerError). The store is used only during
// setup. Thread-safety: as comm.h.
// Failure: a peer process dying (its socket closes without a goodbye) aborts the Comm
// with PeerError "rank R: connection to rank P (shm pid N) lost: ..." on the next wait;
// aborting sends every peer a notice and shuts the sockets down, so they abort too.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "tdist/store.h"
#include "transport/comm.h"
#include "transport/connect.h"

namespace tdist::transport {

// The defaults are the settings' declared ones; from_settings() resolves the environment
// (TDIST_SHM_RING_BYTES) once, where a group is made.
struct ShmCommOptions {
  // Deadline for the whole setup (TimeoutError naming the missing ranks).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // Data bytes of each ring this rank sends on (one per peer), clamped to 4 KiB..1 GiB;
  // ranks may differ.
  size_t ring_bytes = size_t{1} << 20;
  // Messages of at least this many bytes are copied straight from the sender's memory
  // where the kernel allows it (single_copy.h); 0: always through the rings.
  size_t single_copy_bytes = size_t{1} << 20;

  // The environment's values (InvalidArgument naming a bad one).
  static ShmCommOptions from_settings();
};

// Connects rank `rank` of `size` (all on this host, in one network namespace) through
// `store` (already namespaced per group by the caller). Blocks until all are connected.
// Throws InvalidArgument for a bad rank/size or a rank on another host (naming it),
// TimeoutError when some rank did not connect in time, Error when a system call fails,
// PeerError when the store fails.
// `unreachable_hint` ends the error for a rank on another host.
std::unique_ptr<Comm> connect_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                       const ShmCommOptions& options = {},
                                       const std::string& unreachable_hint = {});

// A string equal on two processes exactly when connect_shm_comm can join them: the boot
// id (/proc/sys/kernel/random/boot_id), the inode of the network namespace
// (/proc/self/ns/net) and the hostname (for messages), joined by ':'.
std::string shm_host_key();

// The shared-memory kind of channel (connect.h): reaches peers with this host key.
// `options.timeout` is unused (connect_comm has the deadline).
std::unique_ptr<ChannelKind> make_shm_kind(const ShmCommOptions& options);

}  // namespace tdist::transport
