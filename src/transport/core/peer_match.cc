// Peer: matching receives to messages — a new receive against the unexpected messages, a new
// message against the posted receives and the any-source queue (any_source.h: the earlier
// posted of the two wins) — and the desync judgements of messages that match badly.
#include <algorithm>
#include <cstring>

#include "tdist/error.h"
#include "transport/core/peer.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {

std::shared_ptr<Op> Peer::post_recv(uint64_t tag, void* data, size_t bytes, Check check,
                                    std::string* lost_message, Progress* progress, bool device) {
  activate();
  auto op = make_op(rank_, false, tag, data, bytes, check);
  op->device = device && bytes > 0;
  {
    MutexLock lock(recv_mu_);
    if (recv_error_ || book_.closed(tag)) {  // closed: its context was aborted here
      op->complete(recv_error_ ? recv_error_ : book_.closed_error(tag));
      return op;
    }
    match_posted_locked(op, progress, lost_message);
  }
  if (rv_exchange_.load(std::memory_order_acquire) && lost_message->empty()) {
    *progress += exchange_rendezvous(lost_message);
  }
  return op;
}

void Peer::match_posted_locked(const std::shared_ptr<Op>& op, Progress* progress,
                               std::string* lost_message) {
  const uint64_t tag = op->tag;
  const bool p2p = is_p2p_tag(tag);
  if (p2p) op->post_seq = any_.next_post();
  while (true) {
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it == unexpected_.end()) {
      posted_.push_back(op);
      if (goodbyes_ == nlanes_) {
        *lost_message = lost("it destroyed its Comm, so this receive can never complete");
      }
      return;
    }
    // An any-source receive posted before this one takes the message first (MPI's rule).
    std::shared_ptr<Op> earlier =
        p2p && !any_.empty() ? any_.claim(tag, op->post_seq, rank_) : nullptr;
    if (!earlier) {
      Progress own;  // this receive's completion is its caller's to see
      deliver_locked(it, op, &own, lost_message);
      return;
    }
    deliver_locked(it, earlier, progress, lost_message);
    if (!lost_message->empty()) {
      posted_.push_back(op);  // failed with the rest by the abort that follows
      return;
    }
  }
}

std::shared_ptr<Op> Peer::take_receive_locked(uint64_t tag) {
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& op) { return op->tag == tag; });
  if (is_p2p_tag(tag) && !any_.empty()) {
    const uint64_t before = it == posted_.end() ? AnySourceQueue::kNone : (*it)->post_seq;
    if (std::shared_ptr<Op> op = any_.claim(tag, before, rank_)) return op;
  }
  if (it == posted_.end()) return nullptr;
  std::shared_ptr<Op> op = std::move(*it);
  posted_.erase(it);
  return op;
}

uint64_t Peer::first_arrival(uint64_t tag) {
  MutexLock lock(recv_mu_);
  if (recv_error_) return AnySourceQueue::kNone;
  for (const Unexpected& u : unexpected_) {
    if (u.tag == tag) return u.arrival;
  }
  return AnySourceQueue::kNone;
}

bool Peer::give_unexpected(uint64_t tag, Progress* progress, std::string* lost_message) {
  {
    MutexLock lock(recv_mu_);
    if (recv_error_) return false;
    auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                           [&](const Unexpected& u) { return u.tag == tag; });
    if (it == unexpected_.end()) return false;
    std::shared_ptr<Op> op = any_.claim(tag, AnySourceQueue::kNone, rank_);
    if (!op) return false;
    deliver_locked(it, op, progress, lost_message);
  }
  if (rv_exchange_.load(std::memory_order_acquire) && lost_message->empty()) {
    *progress += exchange_rendezvous(lost_message);
  }
  return true;
}

void Peer::deliver_locked(std::list<Unexpected>::iterator it, const std::shared_ptr<Op>& op,
                          Progress* progress, std::string* lost_message) {
  const uint64_t tag = op->tag;
  const size_t bytes = op->bytes;
  Incoming* incoming = it->complete ? nullptr : &lanes_[it->lane].incoming;
  const bool agree = tdist::core::fingerprints_agree(op->check(), it->check);
  if (!agree || it->bytes != bytes || it->device != op->device) {
    op->complete(!agree               ? mismatch(tag, op->check(), it->check)
                 : it->bytes != bytes ? desync(tag, bytes, it->bytes)
                                      : kind_mismatch(tag, op->device));
    ++progress->completed;
    if (it->rendezvous && it->complete && !it->asked) {
      replies_.push_back({kRvDoneTag, it->rv.id, it->lane});  // let the send complete
      rv_exchange_.store(true, std::memory_order_release);
    } else if (incoming != nullptr) {  // still arriving: drop the rest (a rendezvous
      incoming->unexpected = nullptr;  // then answers kRvDoneTag)
      if (!it->rendezvous) incoming->dest = nullptr;
    }
  } else if (it->rendezvous) {
    if (it->asked) {  // its payload is on the way: into this receive
      *lost_message = await_payload_locked(op, it->rv.id, progress);
    } else if (incoming == nullptr) {
      *lost_message = fetch_locked(it->lane, op, it->rv, it->device_descriptor.get(), progress);
    } else {  // its descriptor is still arriving
      incoming->op = op;
      incoming->unexpected = nullptr;
    }
  } else if (it->device_data) {  // a device payload imported before its receive
    const std::string why =
        lanes_[it->lane].channel->device()->copy_device(op->data, it->device_data.get(), bytes);
    if (why.empty()) {
      op->complete(nullptr);
      ++progress->completed;
    } else {
      *lost_message = fail_op(op, why, progress);
    }
  } else if (incoming == nullptr) {
    if (bytes > 0) std::memcpy(op->data, it->data.get(), bytes);
    op->complete(nullptr);
    ++progress->completed;
  } else {
    // It is the message being read: take what arrived, the rest goes straight to `data`.
    if (incoming->got > 0) std::memcpy(op->data, it->data.get(), incoming->got);
    incoming->dest = op->data;
    incoming->op = op;
    incoming->unexpected = nullptr;
  }
  forget_locked(*it);
  unexpected_.erase(it);
}

void Peer::forget_locked(const Unexpected& u) {
  if (u.check.w0 != 0) book_.early.fetch_sub(1);
}

std::string Peer::find_desync() {
  MutexLock lock(recv_mu_);
  for (const Unexpected& u : unexpected_) {
    if (u.check.w0 == 0) continue;
    std::string report = judge(u.tag, u.check);
    if (!report.empty()) return report;
  }
  return {};
}

std::string Peer::judge(uint64_t tag, Check theirs) const {
  const CollectiveBook::View view = book_.view(tag);
  if (view.finished) return stale(tag, theirs);
  if (tdist::core::fingerprints_agree(view.running, theirs)) return {};
  return kDesyncMark + mismatch_text(tag, view.running, theirs);
}

std::string Peer::judge_probe(uint64_t tag, Check theirs) const {
  if (is_control_tag(tag) || is_p2p_tag(tag) || book_.closed(tag)) return {};
  const CollectiveBook::View view = book_.view(tag);
  if (view.finished || tdist::core::fingerprints_agree(view.running, theirs)) return {};
  return kDesyncMark + mismatch_text(tag, view.running, theirs) +
         detail::str_cat(" (rank ", rank_, " waits to receive in it, and so does rank ", self_rank_,
                         ")");
}

std::string Peer::mismatch_text(uint64_t tag, Check mine, Check theirs) const {
  const uint64_t seq = CollectiveBook::tag_seq(tag);
  return desync_text(self_rank_, tdist::core::OpFingerprint::decode(mine).describe(seq), rank_,
                     tdist::core::OpFingerprint::decode(theirs).describe(seq));
}

std::exception_ptr Peer::mismatch(uint64_t tag, Check mine, Check theirs) const {
  return std::make_exception_ptr(DesyncError(mismatch_text(tag, mine, theirs)));
}

std::string Peer::stale(uint64_t tag, Check theirs) const {
  const uint64_t seq = CollectiveBook::tag_seq(tag);
  return kDesyncMark +
         desync_text(self_rank_, book_.describe(tag), rank_,
                     tdist::core::OpFingerprint::decode(theirs).describe(seq)) +
         detail::str_cat(" (rank ", rank_, " sent a message that rank ", self_rank_,
                         "'s operation finished without receiving)");
}

std::exception_ptr Peer::kind_mismatch(uint64_t tag, bool receive_on_device) const {
  return std::make_exception_ptr(DesyncError(detail::str_cat(
      "rank ", self_rank_, ": message from rank ", rank_, " with tag 0x", std::hex, tag, std::dec,
      " is in ", receive_on_device ? "host" : "device",
      " memory, but the receive posted for it is in ", receive_on_device ? "device" : "host",
      " memory (ranks disagree on where the buffers are)")));
}

std::exception_ptr Peer::desync(uint64_t tag, size_t expected, size_t actual) const {
  return std::make_exception_ptr(DesyncError(detail::str_cat(
      "rank ", self_rank_, ": message from rank ", rank_, " with tag 0x", std::hex, tag, std::dec,
      " has ", actual, " bytes, but the receive posted for it expects ", expected,
      " bytes (ranks disagree on the operation or its size)")));
}

}  // namespace tdist::transport::core
