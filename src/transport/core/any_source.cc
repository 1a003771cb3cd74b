// AnySourceQueue (any_source.h): the waiting any-source receives, claimed in posting order.
#include "transport/core/any_source.h"

#include <algorithm>

namespace tdist::transport::core {

bool AnySourceQueue::post(const std::shared_ptr<Op>& op) {
  MutexLock lock(mu_);
  if (error_) {
    op->complete(error_);
    return false;
  }
  op->post_seq = next_post();
  ops_.push_back(op);
  pending_.store(static_cast<int>(ops_.size()), std::memory_order_release);
  return true;
}

std::shared_ptr<Op> AnySourceQueue::claim(uint64_t tag, uint64_t posted_before, int source) {
  MutexLock lock(mu_);
  // In posting order: the first one of `tag` is the earliest.
  auto it = std::find_if(ops_.begin(), ops_.end(),
                         [&](const std::shared_ptr<Op>& op) { return op->tag == tag; });
  if (it == ops_.end() || (*it)->post_seq >= posted_before) return nullptr;
  std::shared_ptr<Op> op = std::move(*it);
  ops_.erase(it);
  pending_.store(static_cast<int>(ops_.size()), std::memory_order_release);
  op->set_source(source);
  return op;
}

bool AnySourceQueue::withdraw(const Op& op) {
  MutexLock lock(mu_);
  auto it = std::find_if(ops_.begin(), ops_.end(),
                         [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
  if (it == ops_.end()) return false;
  ops_.erase(it);
  pending_.store(static_cast<int>(ops_.size()), std::memory_order_release);
  return true;
}

int AnySourceQueue::fail_context(uint32_t context, const std::exception_ptr& error) {
  MutexLock lock(mu_);
  int failed = 0;
  for (auto it = ops_.begin(); it != ops_.end();) {
    if (tag_context((*it)->tag) != context) {
      ++it;
      continue;
    }
    (*it)->complete(error);
    it = ops_.erase(it);
    ++failed;
  }
  pending_.store(static_cast<int>(ops_.size()), std::memory_order_release);
  return failed;
}

void AnySourceQueue::fail_all(const std::exception_ptr& error) {
  MutexLock lock(mu_);
  if (!error_) error_ = error;
  for (const std::shared_ptr<Op>& op : ops_) op->complete(error_);
  ops_.clear();
  pending_.store(0, std::memory_order_release);
}

}  // namespace tdist::transport::core
