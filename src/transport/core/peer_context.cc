// Peer: aborting one context of the Comm (comm.h's contexts; peer.h's fail_context) and the
// notices of the peer's.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tdist/error.h"
#include "transport/core/peer.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {
namespace {

// Whether `op` is a message operation of `context` still pending.
bool pending_in(const Op& op, uint32_t context) {
  return !op.done() && !is_control_tag(op.tag) && tag_context(op.tag) == context;
}

}  // namespace

Progress Peer::fail_context(uint32_t context, const std::exception_ptr& error,
                            const std::string* notice) {
  Progress progress;
  {
    MutexLock lock(send_mu_);
    std::vector<Op*> sends;
    for (Lane& lane : lanes_) {
      for (const std::shared_ptr<Op>& op : lane.send_queue) {
        if (pending_in(*op, context)) sends.push_back(op.get());
      }
    }
    for (const auto& [id, op] : rv_sends_) {
      if (pending_in(*op, context)) sends.push_back(op.get());
    }
    for (Op* op : sends) {
      // A device send's buffer stays the peer's to copy until it answers.
      if (op->done() || op->device) continue;
      (void)cancel_send_locked(*op);  // host memory: it goes out whole from a copy
      op->complete(error);
      ++progress.completed;
    }
    if (notice != nullptr && !send_error_ && !peer_gone_.load()) {
      // A control frame with a payload, from a copy: {context} then the reason. It takes no
      // turn in the send order (wire.h); the next flush of lane 0 writes it.
      const std::string text = notice->substr(0, kMaxAbortReasonBytes);
      auto op = make_op(rank_, true, kContextAbortTag, nullptr, sizeof(uint64_t) + text.size());
      op->owned = std::make_unique_for_overwrite<uint8_t[]>(op->bytes);
      const uint64_t id = context;
      std::memcpy(op->owned.get(), &id, sizeof(id));
      if (!text.empty()) std::memcpy(op->owned.get() + sizeof(id), text.data(), text.size());
      op->data = op->owned.get();
      lanes_[0].send_queue.push_back(std::move(op));
      queued_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  MutexLock lock(recv_mu_);
  fail_context_receives_locked(context, error, &progress);
  return progress;
}

void Peer::fail_context_receives_locked(uint32_t context, const std::exception_ptr& error,
                                        Progress* progress) {
  std::vector<std::shared_ptr<Op>> receives;
  for (const std::shared_ptr<Op>& op : posted_) {
    if (pending_in(*op, context)) receives.push_back(op);
  }
  for (Lane& lane : lanes_) {
    if (lane.incoming.op && pending_in(*lane.incoming.op, context))
      receives.push_back(lane.incoming.op);
  }
  for (const auto& [id, op] : rv_recvs_) {
    if (pending_in(*op, context)) receives.push_back(op);
  }
  for (const std::shared_ptr<Op>& op : receives) {
    cancel_recv_locked(*op);
    op->complete(error);
    ++progress->completed;
  }
  // Messages of the context that arrived whole and wait for a receive that will not come.
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (!it->complete || is_control_tag(it->tag) || tag_context(it->tag) != context) {
      ++it;
      continue;
    }
    if (it->rendezvous && !it->asked) {  // its sender waits for an answer
      replies_.push_back({kRvDoneTag, it->rv.id, it->lane});
      rv_exchange_.store(true, std::memory_order_release);
    }
    forget_locked(*it);
    it = unexpected_.erase(it);
  }
}

std::string Peer::context_aborted_locked(size_t lane_index, const std::string& payload,
                                         Progress* progress) {
  uint64_t context = 0;
  std::memcpy(&context, payload.data(), sizeof(context));
  if (context < 1 || context > kMaxContext) {
    return lost(detail::str_cat("protocol error: an abort of context ", context));
  }
  const std::string text = aborted_text(lane_index, "the group", payload.substr(sizeof(context)));
  // Closed and this peer's receives failed here, before anything read after the notice (its
  // goodbye, say) can find them pending; the Engine fails the rest.
  const uint32_t id = static_cast<uint32_t>(context);
  const std::exception_ptr error = error_of_lost(text);
  const bool first = book_.close(id, error);
  fail_context_receives_locked(id, book_.closed_error(in_context(0, id)), progress);
  if (first) {
    context_aborts_.push_back({id, error});
    context_aborts_pending_.store(true, std::memory_order_release);
  }
  return {};
}

std::exception_ptr error_of_lost(const std::string& lost) {
  if (!lost.empty() && lost.front() == kDesyncMark) {
    return std::make_exception_ptr(DesyncError(lost.substr(1)));
  }
  if (!lost.empty() && lost.front() == kTimeoutMark) {
    return std::make_exception_ptr(TimeoutError(lost.substr(1)));
  }
  return std::make_exception_ptr(PeerError(lost));
}

std::vector<Peer::ContextAbort> Peer::take_context_aborts() {
  MutexLock lock(recv_mu_);
  context_aborts_pending_.store(false, std::memory_order_relaxed);
  return std::exchange(context_aborts_, {});
}

}  // namespace tdist::transport::core
