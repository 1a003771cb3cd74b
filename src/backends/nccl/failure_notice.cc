// FailureNotice (failure_notice.h): one thread per notice, publishing and polling the
// group's `nccl/failed` key.
#include "backends/nccl/failure_notice.h"

#include <optional>
#include <thread>
#include <utility>

#include "tdist/logging.h"
#include "tdist/thread_annotations.h"

namespace tdist::backends::nccl {

struct FailureNotice::State {
  State(std::shared_ptr<Store> s, std::function<void(const std::string&)> cb,
        std::chrono::milliseconds p)
      : store(std::move(s)), on_peer_failure(std::move(cb)), poll(p) {}

  const std::shared_ptr<Store> store;
  const std::function<void(const std::string&)> on_peer_failure;  // called under mu
  const std::chrono::milliseconds poll;
  Mutex mu;
  CondVar cv;
  bool alive TDIST_GUARDED_BY(mu) = true;      // the notice exists: on_peer_failure may run
  bool watching TDIST_GUARDED_BY(mu) = false;  // the group has operations pending
  bool done TDIST_GUARDED_BY(mu) = false;      // announced or seen: nothing more to do
  std::optional<std::string> to_announce TDIST_GUARDED_BY(mu);
};

FailureNotice::FailureNotice(std::shared_ptr<Store> store,
                             std::function<void(const std::string&)> on_peer_failure,
                             std::chrono::milliseconds poll)
    : state_(std::make_shared<State>(std::move(store), std::move(on_peer_failure), poll)) {
  std::thread(run, state_).detach();
}

FailureNotice::~FailureNotice() {
  {
    MutexLock lock(state_->mu);  // waits for an on_peer_failure call in progress
    state_->alive = false;
  }
  state_->cv.notify_all();
}

void FailureNotice::announce(std::string text) {
  {
    MutexLock lock(state_->mu);
    if (state_->done || state_->to_announce) return;
    state_->to_announce = std::move(text);
  }
  state_->cv.notify_all();
}

void FailureNotice::watch(bool active) {
  bool wake = false;
  {
    MutexLock lock(state_->mu);
    wake = active && !state_->watching;
    state_->watching = active;
  }
  if (wake) state_->cv.notify_all();
}

void FailureNotice::run(std::shared_ptr<State> state) {
  for (;;) {
    std::optional<std::string> text;
    {
      MutexLock lock(state->mu);
      while (state->alive && !state->to_announce && (state->done || !state->watching)) {
        state->cv.wait(state->mu);
      }
      if (state->to_announce) {
        text = std::move(state->to_announce);
        state->to_announce.reset();
        state->done = true;
      } else if (!state->alive) {
        return;
      } else {
        // Watching: one look per poll interval.
        state->cv.wait_until(state->mu, Clock::now() + state->poll);
        if (!state->alive) return;
        if (state->done || !state->watching || state->to_announce) continue;
      }
    }
    try {
      if (text) {
        state->store->set(kKey, *text);
        continue;
      }
      if (!state->store->check({kKey})) continue;
      const std::string seen = to_string(state->store->get(kKey));
      MutexLock lock(state->mu);
      if (state->alive && !state->done) {
        state->done = true;
        state->on_peer_failure(seen);
      }
    } catch (const std::exception& e) {
      // The store is gone (its host died, say): the deadlines still end every operation.
      TDIST_LOG(kDebug) << "nccl: the failure notice's store call failed: " << e.what();
      MutexLock lock(state->mu);
      if (text) continue;
      state->cv.wait_until(state->mu, Clock::now() + state->poll);
    }
  }
}

}  // namespace tdist::backends::nccl
