// ContextComm: the Comm of a group split from another group, made of that group's Comm: the
// same Engine (core/engine.h), its channels and its progress, for some of its ranks, in a
// context of its own (comm.h's contexts). No connection is made and no channel added: a
// split costs one store exchange among its members, whatever the transport.
//
// Every tag the group uses gets its context (comm.h), so its messages never meet those of
// the parent or of another split, and its collectives are checked in a CollectiveBook of
// their own; peers are the group's ranks, mapped to the Engine's. Its topology is the
// parent's for its ranks; its link class is kShm when every pair of its ranks is joined by
// shared memory. Contexts: each Engine hands out contexts 1, 2, ... (kMaxContext at most);
// the members of a new group take the lowest that none of them has handed out, so that two
// groups sharing two ranks never share a context. Groups that share ranks are split one at
// a time (as torch.distributed requires of group creation).
// Failure: abort() aborts the context only (Engine::abort_context): the group's pending and
// later requests fail, its other ranks are told and abort it too, and the parent and the
// other splits go on. What fails the Engine (a lost link, a desync or a timeout, an abort
// of the parent) fails every context. Destroying either group leaves the other working;
// the Engine closes with the last of them.
// Thread-safety: as comm.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/store.h"
#include "transport/comm.h"

namespace tdist::transport {

namespace core {
class Engine;
}

// The Comm of a group split from `parent`'s group: `members` are its ranks as ranks of
// `parent`, by new rank (this rank among them); `store` is the new group's own namespace.
// Collective over the members (through `store`, by `deadline`). Null, on every member,
// when `parent` cannot share its Engine (a Comm of another kind) or its Engine has no
// context left: the caller then connects a Comm of its own.
std::unique_ptr<Comm> make_context_comm(const std::shared_ptr<Comm>& parent,
                                        const std::vector<int>& members, Store& store,
                                        Deadline deadline);

class ContextComm final : public Comm {
 public:
  // `ranks`: the Engine's rank of each of this Comm's ranks.
  ContextComm(std::shared_ptr<Comm> engine, std::vector<int> ranks, uint32_t context);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  uint32_t context() const { return context_; }

  RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override;
  bool carries_device(int peer) const override;
  RequestPtr isend_device(int peer, uint64_t tag, const void* data, size_t bytes) override;
  RequestPtr irecv_device(int peer, uint64_t tag, void* data, size_t bytes) override;
  RequestPtr irecv_any(uint64_t tag, void* data, size_t bytes) override;
  RequestPtr irecv_any_device(uint64_t tag, void* data, size_t bytes) override;
  void begin_collective(uint64_t seq, const tdist::core::OpFingerprint& fp) override;
  void check_arrivals() override;
  void abort(std::exception_ptr reason) override;
  std::exception_ptr error() const override;

  // For make_context_comm: the Engine and its rank of each of ours.
  const std::shared_ptr<Comm>& engine_comm() const { return owner_; }
  const std::vector<int>& engine_ranks() const { return ranks_; }

 private:
  int engine_rank(int peer) const;  // InvalidArgument outside 0..size()-1
  uint64_t tag_in_context(uint64_t tag) const;
  // A receive whose source() names our rank of the sender.
  RequestPtr ours(RequestPtr request) const;

  const std::shared_ptr<Comm> owner_;
  core::Engine& engine_;
  const std::vector<int> ranks_;
  std::vector<int> ours_;  // by the Engine's rank: ours, or -1
  const uint32_t context_;
  int rank_ = -1;
};

}  // namespace tdist::transport
