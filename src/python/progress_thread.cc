// ProgressThread (progress_thread.h).
#include "python/progress_thread.h"

#include <deque>
#include <thread>
#include <utility>

#include "core/polling.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::python {

struct ProgressThread::State {
  Mutex mu;
  CondVar cv;
  std::deque<WorkPtr> queue TDIST_GUARDED_BY(mu);
  bool stopping TDIST_GUARDED_BY(mu) = false;
  std::thread thread TDIST_GUARDED_BY(mu);  // started by the first add()
};

ProgressThread::ProgressThread() : state_(std::make_shared<State>()) {}

ProgressThread::~ProgressThread() { stop(); }

void ProgressThread::add(std::vector<WorkPtr> works) {
  {
    MutexLock lock(state_->mu);
    if (state_->stopping) return;
    for (auto& w : works) state_->queue.push_back(std::move(w));
    if (!state_->thread.joinable()) {
      state_->thread = std::thread([state = state_] { run(state); });
    }
  }
  state_->cv.notify_all();
}

void ProgressThread::stop() {
  std::thread thread;
  {
    MutexLock lock(state_->mu);
    state_->stopping = true;
    state_->queue.clear();
    thread = std::move(state_->thread);
  }
  state_->cv.notify_all();
  if (!thread.joinable()) return;
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();  // called from a callback on the thread itself: it ends on its own
  } else {
    thread.join();
  }
}

void ProgressThread::run(const std::shared_ptr<State>& state) {
  const core::BackgroundThread background;  // waits for nobody: never polls
  while (true) {
    WorkPtr work;
    {
      MutexLock lock(state->mu);
      while (state->queue.empty() && !state->stopping) state->cv.wait(state->mu);
      if (state->stopping) return;
      work = state->queue.front();
    }
    while (!work->is_completed()) {
      try {
        work->synchronize(Deadline::after(kStopPoll));
      } catch (const TimeoutError&) {
        // this wait's own deadline, or the operation's timeout (then it is complete)
      } catch (...) {
        // the Work failed: its future reports it
      }
      MutexLock lock(state->mu);
      if (state->stopping) return;
    }
    MutexLock lock(state->mu);
    if (state->stopping) return;
    state->queue.pop_front();
  }
}

}  // namespace tdist::python
