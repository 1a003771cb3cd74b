// ElasticGroup: a job's process group that survives dead ranks. When a rank dies (or hangs
// past the timeout), the others catch the error of their collective, call reconfigure(),
// and go on in a new generation of the group: with a replacement that took the dead rank's
// place (tdistrun --elastic starts one), or without it (the job shrinks).
//
//   auto job = tdist::ElasticGroup::join({.backend = "tcp"});   // env://, under tdistrun
//   for (;;) {
//     try {
//       ... train on job->group(); commit each step with job->commit() ...
//     } catch (const tdist::PeerError&) {
//       job->reconfigure();                                      // the next generation
//       tdist::elastic::recover(...);                            // torch/elastic.h
//     } catch (const tdist::TimeoutError&) { job->reconfigure(); ... }
//   }
//
// Slots and generations. Each process of the job holds a slot: its RANK at start, in
// 0..WORLD_SIZE-1; a replacement takes the dead process's slot. Generation 0 is formed by
// every slot. Each later generation g is formed by those who arrive for it: the members of
// generation g-1 that call reconfigure(), and processes that start while it forms (a
// replacement's join()). A generation closes as soon as every slot that can still come has
// arrived (every slot, less those tdistrun marked as not replaced: mark_slot_gone), or
// once `join_window` has passed since the first member of the previous generation arrived
// (those that did not arrive are left out: a rank frozen, a dead host). Ranks are given in
// slot order: with a replacement the ranks do not change; after a shrink they are
// renumbered 0..size-1. Each generation's group is a fresh group of the backend over its own
// store prefix (tdist/elastic/g/<g>/pg/), so nothing of an old generation reaches it.
//
// A process that arrives after the generation it asked for closed without it -- a rank that
// was frozen (SIGSTOP) and wakes up after the others moved on -- gets
// StaleMemberError naming its slot and both generations, and must exit; the job goes on.
// A replacement that arrives after a generation closed waits for the next one (the next
// reconfigure of the others) until `timeout`.
//
// The store must outlive every rank: tdistrun's (its agent hosts it) or etcd
// (--rdzv-backend etcd-v2), or one the caller passes; join() refuses, on every rank, a store
// that rank 0 hosts (tcp://, env:// without tdistrun).
//
// Keys, under "tdist/elastic/" in the job's store:
//   closed              the last closed generation
//   g/<g>/in/<slot>     the arrival of <slot> ("s" a member of g-1, "n" a newcomer)
//   g/<g>/arrived       arrivals (add)
//   g/<g>/members       the closed generation: its slots, comma-separated, in rank order
//   gone/<slot>         tdistrun will not replace <slot> (mark_slot_gone)
//   spare/<id>          the slot spare <id> takes (assign_spare)
//
// Thread-safety: one thread drives an ElasticGroup; its group() is a ProcessGroup as any.
// Failures: InvalidArgument for bad options or a store that does not survive ranks;
// TimeoutError when generation 0 does not fill within `timeout`, or a newcomer finds no
// generation to join; Error when a generation would have fewer than min_size members.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/process_group.h"
#include "tdist/rendezvous.h"
#include "tdist/store.h"

namespace tdist {

// A process that asked to join a generation that closed without it.
class StaleMemberError : public Error {
 public:
  using Error::Error;
};

struct ElasticOptions {
  std::string backend = "tcp";  // a registered backend (backend.h)
  // The groups' timeout (collectives, and how long a newcomer waits for a generation).
  std::chrono::milliseconds timeout = default_pg_timeout();
  // How long a generation waits for slots that have not arrived; default
  // TDIST_ELASTIC_JOIN_WINDOW.
  std::chrono::milliseconds join_window{-1};
  // The fewest members a generation may have.
  int min_size = 1;
};

class ElasticGroup {
 public:
  // Joins the job through init_method (env:// under tdistrun: RANK is the slot, WORLD_SIZE
  // the slots). A process started while the job runs (a replacement) joins the next
  // generation and newcomer() is true. A spare (TDIST_ELASTIC_SPARE set, by tdistrun
  // --elastic-spares) first waits, as long as the job runs, until tdistrun gives it the slot
  // of a dead worker; everything a program does before join() is then already done.
  static std::unique_ptr<ElasticGroup> join(ElasticOptions options = {},
                                            const std::string& init_method = "env://");
  // The same on a store the caller keeps alive, for slot `slot` of `slots`.
  static std::unique_ptr<ElasticGroup> join(std::shared_ptr<Store> store, int slot, int slots,
                                            ElasticOptions options = {});
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // The current generation's group.
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  int generation() const { return generation_; }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  int slot() const { return slot_; }
  int slots() const { return slots_; }
  // The members' slots, by rank.
  const std::vector<int>& members() const { return members_; }
  // This process joined a running job (generation > 0 at its join): its state must come
  // from a member (elastic::recover).
  bool newcomer() const { return newcomer_; }

  // Aborts the current group (its pending operations fail; peers still waiting on it get
  // PeerError at once) and joins the next generation. Every member of the current
  // generation that is alive calls it after a failure. StaleMemberError when the next
  // generation closed without this slot.
  void reconfigure();

  // The per-step vote: true when every rank voted ok (one all_reduce of one int). A rank
  // whose vote completes knows that every rank finished the step's reductions before it
  // voted; a failure (PeerError, TimeoutError) means the step may be complete on some ranks
  // only: reconfigure(), then elastic::recover() brings every rank to the most advanced one.
  bool commit(bool ok = true);

  // How long the last reconfigure() took (abort to new group ready).
  std::chrono::microseconds last_reconfigure() const { return last_reconfigure_; }

  // tdistrun's: slot `slot` will not be replaced, so generations stop waiting for it.
  // `store` is the job's store (the workers' prefix).
  static void mark_slot_gone(Store& store, int slot);
  // tdistrun --elastic-spares: the spare process started with TDIST_ELASTIC_SPARE=`spare`
  // takes slot `slot` (its join() has been waiting for this; it then joins as a newcomer).
  static void assign_spare(Store& store, const std::string& spare, int slot);

 private:
  ElasticGroup(std::shared_ptr<Store> store, int slot, int slots, ElasticOptions options);
  void enter(int generation, bool survivor);
  std::vector<int> close(int generation, bool survivor);

  std::shared_ptr<Store> store_;  // "tdist/elastic/" in the job's store
  int slot_;
  int slots_;
  ElasticOptions options_;
  int generation_ = -1;
  bool newcomer_ = false;
  std::vector<int> members_;
  std::shared_ptr<ProcessGroup> group_;
  std::chrono::microseconds last_reconfigure_{0};
};

}  // namespace tdist
