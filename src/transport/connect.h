// Building a Comm: every peer gets the best kind of channel that can reach it.
//
// A ChannelKind is one transport (a folder under src/transport: tcp/, shm/): it says
// whether it can reach a peer (NCCL's canConnect) and connects this rank to a set of peers,
// returning their channels (core/channel.h). connect_comm() publishes this rank's host key
// (shm_host_key()) in the store, reads everyone's, and for every pair of ranks picks the
// first kind, in the given order of preference, that can connect them — every rank
// computes the same choice. Then each kind connects its pairs (kinds in order, so setup
// cannot deadlock), and one core::Engine drives all channels. The Comm's topology is set
// from the host keys, and its link class from the pairs' kinds (topology.h). With
// TDIST_LOG_LEVEL=debug each rank logs one line naming the kind of channel to each peer.
//
// Adding a transport: a folder with its Channel and ChannelKind, plus one line in
// kinds.cc (its name and factory, in order of preference).
// Blocking: until every channel is connected or `timeout` (TimeoutError naming the missing
// ranks). InvalidArgument when no allowed kind can reach some peer (naming it) or a kind
// name is unknown. Thread-safe: independent calls may run concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/store.h"
#include "transport/comm.h"
#include "transport/core/channel.h"

namespace tdist::transport {

// Channels by peer rank; each peer's vector holds its lanes (empty for ranks not served).
using ChannelTable = std::vector<std::vector<std::unique_ptr<core::Channel>>>;

class ChannelKind {
 public:
  virtual ~ChannelKind() = default;
  virtual const char* name() const = 0;
  // Called first, before anything is exchanged: checks this kind's settings (e.g. the TCP
  // interface), throwing what a bad setting deserves, and keeps what connect() needs.
  virtual void prepare(Store& store) { (void)store; }
  // Whether a channel of this kind can join ranks whose host keys are `a` and `b`.
  // Symmetric: every rank must reach the same answer for a pair.
  virtual bool can_connect(const std::string& a, const std::string& b) const = 0;
  // Connects `rank` to every rank r with peers[r] (the same pairs on both sides) through
  // `store` (namespaced for this kind and group). `first` is the lowest rank that has any
  // peer of this kind (it may publish what the others read).
  virtual ChannelTable connect(Store& store, int rank, int size, const std::vector<bool>& peers,
                               int first, Deadline deadline) const = 0;
};

using ChannelKinds = std::vector<std::unique_ptr<ChannelKind>>;

// The registered kinds allowed by TDIST_CHANNELS (default "shm,tcp"), in its order:
// InvalidArgument for a name no kind has.
ChannelKinds default_channel_kinds();
// Every registered kind's name, in order of preference (kinds.cc).
std::vector<std::string> registered_channel_kinds();

struct ConnectOptions {
  // Deadline for the whole setup (TimeoutError naming the missing ranks).
  std::chrono::milliseconds timeout = kDefaultStoreTimeout;
  // Ends the InvalidArgument for a peer no kind reaches (e.g. which backend would).
  std::string unreachable_hint;
  // This rank's host key; empty = shm_host_key(). Tests give ranks that are threads of one
  // process different keys to make them "hosts".
  std::string host_key;
};

// Connects rank `rank` of `size` through `store` (namespaced per group by the caller),
// choosing per pair the first of `kinds` that can reach it.
std::unique_ptr<Comm> connect_comm(std::shared_ptr<Store> store, int rank, int size,
                                   ChannelKinds kinds, const ConnectOptions& options = {});

// For kinds' setup: a random 64-bit nonce naming this setup, stored under `key`. The rank
// with `publish` makes and stores it; the others read it (by `deadline`; PeerError when the
// key holds something else).
uint64_t group_nonce(Store& store, const std::string& key, bool publish, Deadline deadline);

// For kinds' setup: the TimeoutError of a setup (`what`, e.g. "TCP transport setup") that
// started at `start` and did not finish: "rank R: <what> (world size N) did not finish
// within Xs; ranks never connected: rank P: <why>; ...<hint>".
[[noreturn]] void throw_setup_timeout(int rank, int size, const std::string& what,
                                      const std::map<int, std::string>& failures,
                                      Clock::time_point start, const std::string& hint = {});

// What connect_comm exchanges first: every rank's host key (this rank's is `key`; connect_comm
// appends a newline and the rank's affinity list), by rank.
std::vector<std::string> exchange_host_keys(Store& store, int rank, int size,
                                            const std::string& key, Deadline deadline);

}  // namespace tdist::transport
