// Live recovery for an elastic job (tdist/elastic.h): after a reconfigure, the members
// agree on the most advanced committed state and every member behind it -- a replacement
// that just started, a survivor whose last step's vote did not complete -- receives it from
// that member: model, optimizer state and values (a checkpoint::State, as for checkpoints),
// the step, and the sampler's place in the epoch. No file is read or written.
//
//   auto job = tdist::ElasticGroup::join();
//   tdist::elastic::Progress progress;                  // step -1: nothing committed yet
//   if (!job->newcomer()) progress.step = 0;             // generation 0 starts from scratch
//   tdist::elastic::recover(*job, state, progress, &sampler);
//   for (;;) {
//     try {
//       auto batch = sampler.next(B);  ... forward, backward (DDP's all_reduces) ...
//       if (job->commit()) { optimizer.step(); progress.advance(batch->size()); }
//     } catch (const tdist::PeerError&) {                 // or TimeoutError
//       job->reconfigure();
//       ddp.set_group(job->group()) ...;                  // the new generation's group
//       tdist::elastic::recover(*job, state, progress, &sampler);
//     }
//   }
//
// A rank's committed state must be the state after progress.step steps, identical on every
// rank at the same step (DDP's replicated parameters and optimizer state). The source is
// the lowest rank of the highest step; only the ranks behind it receive (point to point,
// tensor by tensor, straight into the live tensors, or fresh ones where an optimizer has no
// state yet). With a sampler, every rank's sampler is moved to the new world (set_world)
// and resumed after what the old world consumed at the source's step (world_mask of
// progress.taken), so that no sample of the epoch is lost or read twice; progress.taken
// restarts at 0. State entries must be replicated: a fully_shard state is not held whole by
// any rank, so its recovery is a checkpoint's (checkpoint.h).
//
// Every member calls recover (collective over job.group()). Before anything is sent, every
// member checks the source's catalog against its own state (names, shapes, dtypes); a member
// that differs -- a replacement started with another model -- raises InvalidArgument naming
// the generation, its slot and the first difference, and must exit; the others reconfigure
// without it and recover again, so the job goes on. A failure of a member during the
// transfer (PeerError, TimeoutError) raises; call reconfigure() and recover() again.
#pragma once

#include <chrono>
#include <cstdint>

#include "tdist/elastic.h"
#include "tdist/torch/checkpoint.h"
#include "tdist/torch/sampler.h"

namespace tdist::elastic {

// What a rank has committed.
struct Progress {
  int64_t step = -1;  // steps committed; -1: none (a newcomer before its recovery)
  int64_t epoch = 0;  // the sampler's epoch
  int64_t taken = 0;  // samples this rank took from the sampler's current order, committed
  // After a committed step that took `samples`.
  void advance(int64_t samples) {
    ++step;
    taken += samples;
  }
  // At a new epoch (after sampler.set_epoch(epoch)).
  void next_epoch(int64_t new_epoch) {
    epoch = new_epoch;
    taken = 0;
  }
};

struct Recovery {
  int generation = 0;
  int64_t step = 0;   // the step every member is at now
  int source = 0;     // the rank that sent it
  int received = 0;   // members that received (0: all were at the step)
  int64_t bytes = 0;  // tensor bytes sent to each of them
  std::chrono::microseconds took{0};
};

Recovery recover(ElasticGroup& job, const checkpoint::State& state, Progress& progress,
                 tdist::torch::DistributedSampler* sampler = nullptr);

}  // namespace tdist::elastic
