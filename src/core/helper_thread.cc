// HelperThread (helper_thread.h).
#include "core/helper_thread.h"

#include <utility>

#include "tdist/error.h"

namespace tdist::core {

HelperThread::~HelperThread() {
  {
    MutexLock lock(mu_);
    if (!thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HelperThread::start(std::function<void()> task) {
  {
    MutexLock lock(mu_);
    if (busy_) throw Error("HelperThread::start: the previous task has not been joined");
    task_ = std::move(task);
    busy_ = true;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_all();
}

void HelperThread::join() {
  MutexLock lock(mu_);
  while (busy_) cv_.wait(mu_);
}

void HelperThread::loop() {
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (!task_ && !stop_) cv_.wait(mu_);
      if (!task_) return;  // stopping, and nothing left to run
      task = std::move(task_);
      task_ = nullptr;
    }
    task();
    {
      MutexLock lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace tdist::core
