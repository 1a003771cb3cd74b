// Peer: construction, the send side, cancellation, sleeping, failure and clean close.
// The receive side is in peer_recv.cc.
#include <algorithm>
#include <cstring>
#include <thread>

#include "tdist/error.h"
#include "transport/core/peer.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {
namespace {

constexpr size_t kMaxIov = 64;
// Sends up to this size may go out inside post_send with no Op (see there).
constexpr size_t kInlineSendBytes = 4096;
// How long a goodbye waits between attempts when its channel has no room.
constexpr int kGoodbyePollMs = 10;

}  // namespace

Peer::Peer(int self_rank, int rank, std::vector<std::unique_ptr<Channel>> lanes,
           CollectiveBooks& book, AnySourceQueue& any)
    : self_rank_(self_rank),
      rank_(rank),
      book_(book),
      any_(any),
      lanes_(lanes.size()),
      nlanes_(lanes.size()),
      token_salt_(reinterpret_cast<uint64_t>(this) ^
                  static_cast<uint64_t>(Clock::now().time_since_epoch().count()) *
                      0xBF58476D1CE4E5B9ull) {
  TDIST_CHECK(nlanes_ >= 1 && nlanes_ <= kMaxLanes, InvalidArgument, "rank ", self_rank_, ": ",
              nlanes_, " channels to rank ", rank_, ", expected 1..", kMaxLanes);
  for (size_t i = 0; i < nlanes_; ++i) {
    lanes_[i].channel = std::move(lanes[i]);
    lanes_[i].staging = std::make_unique_for_overwrite<uint8_t[]>(kStagingBytes);
    lanes_[i].next_seq = i;
  }
}

std::string Peer::lost(const std::string& reason) const {
  return detail::str_cat("rank ", self_rank_, ": connection to rank ", rank_, " (",
                         lanes_.front().channel->describe(), ") lost: ", reason);
}

std::shared_ptr<Op> Peer::post_send(uint64_t tag, const void* data, size_t bytes, Check check,
                                    std::string* lost_message, bool device) {
  activate();
  device = device && bytes > 0;  // an empty device message is an ordinary one
  if (book_.closed(tag)) {  // its context was aborted here (fail_context): the send fails alone
    auto op = make_op(rank_, true, tag, const_cast<void*>(data), bytes, check);
    op->complete(book_.closed_error(tag));
    return op;
  }
  if (peer_gone_.load(std::memory_order_acquire)) {
    *lost_message = lost("it already destroyed its Comm, so this send can never be received");
  }
  MutexLock lock(send_mu_);
  const size_t lane = static_cast<size_t>(send_seq_ % nlanes_);
  Channel& channel = *lanes_[lane].channel;
  const size_t single_copy = channel.single_copy_bytes();
  // The short-message path: an eager message that fits the channel now, with nothing
  // queued ahead of it on its lane, is written whole here and needs no Op.
  if (!device && bytes <= kInlineSendBytes && !send_error_ && lanes_[lane].send_queue.empty() &&
      (single_copy == 0 || bytes < single_copy) && lost_message->empty() &&
      ((tag & kP2PTagBit) == 0 || bytes < channel.rendezvous_bytes())) {
    const uint64_t header[kHeaderWords] = {tag, bytes, check.w0, check.w1};
    const iovec iov[2] = {{const_cast<uint64_t*>(header), kHeaderBytes},
                          {const_cast<void*>(data), bytes}};
    std::string why;
    const size_t n = channel.write(iov, bytes > 0 ? 2 : 1, &why);
    if (!why.empty()) {
      *lost_message = lost(why);  // queued below; the abort that follows fails it
    } else if (n == kHeaderBytes + bytes) {
      ++send_seq_;
      note_held_locked();
      return nullptr;
    } else if (n > 0) {  // a prefix went: the rest is queued like any partly written send
      auto op = make_op(rank_, true, tag, const_cast<void*>(data), bytes, check);
      ++send_seq_;
      op->lane = lane;
      op->sent = n;
      lanes_[lane].send_queue.push_back(std::move(op));
      queued_.fetch_add(1, std::memory_order_acq_rel);
      return lanes_[lane].send_queue.back();
    }
  }
  auto op = make_op(rank_, true, tag, const_cast<void*>(data), bytes, check);
  if (send_error_) {
    op->complete(send_error_);
    return op;
  }
  if (device) {
    // Described before anything changes here: a buffer the channel cannot share throws.
    DeviceDescriptor descriptor;
    channel.device()->export_device(data, bytes, &descriptor);
    ++send_seq_;
    op->lane = lane;
    op->device = true;
    // As eager messages (wire.h): taken at once unless a large point-to-point one.
    const bool pull = (tag & kP2PTagBit) == 0 || bytes < channel.rendezvous_bytes();
    make_rendezvous_locked(*op, kRvDevice | (pull ? kRvPull : 0), &descriptor);
  } else {
    ++send_seq_;
    op->lane = lane;
    if (bytes > 0 && (tag & kP2PTagBit) != 0 && bytes >= channel.rendezvous_bytes()) {
      make_rendezvous_locked(*op, 0);
    } else if (single_copy > 0 && bytes >= single_copy) {
      make_rendezvous_locked(*op, kRvPull);
    }
  }
  lanes_[lane].send_queue.push_back(op);
  queued_.fetch_add(1, std::memory_order_acq_rel);
  // Nothing ahead of it on this lane: write now, on the caller's thread.
  if (lanes_[lane].send_queue.size() == 1 && lost_message->empty()) {
    flush_lane_locked(lane, lost_message);
  }
  return op;
}

void Peer::make_rendezvous_locked(Op& op, uint64_t flags, const DeviceDescriptor* device) {
  op.phase = Op::Phase::kRvRequest;
  op.rv_id = next_rv_id_++;
  // Unguessable enough that memory the token no longer owns will not hold it by chance.
  const uint64_t token = (op.rv_id + 1) * 0x9E3779B97F4A7C15ull ^ token_salt_;
  op.rv_token.store(token, std::memory_order_seq_cst);
  op.header[1] = op.bytes | kRendezvousBit | (device != nullptr ? kDeviceBit : 0);
  const RvDescriptor rv{op.rv_id, reinterpret_cast<uint64_t>(op.data),
                        reinterpret_cast<uint64_t>(&op.rv_token), token, flags};
  std::memcpy(&op.header[kHeaderWords], &rv, sizeof(rv));
  op.header_bytes = kHeaderBytes + sizeof(rv);
  if (device != nullptr) {
    std::memcpy(reinterpret_cast<uint8_t*>(op.header) + op.header_bytes, device, sizeof(*device));
    op.header_bytes += sizeof(*device);
  }
  rv_pending_.fetch_add(1, std::memory_order_acq_rel);
}

Progress Peer::exchange_rendezvous(std::string* lost_message) {
  Progress progress;
  std::vector<RvFrame> replies;
  std::vector<RvFrame> events;
  {
    MutexLock lock(recv_mu_);
    rv_exchange_.store(false, std::memory_order_release);
    replies.swap(replies_);
    events.swap(rv_events_);
  }
  if (replies.empty() && events.empty()) return progress;
  MutexLock lock(send_mu_);
  if (send_error_) return progress;
  for (const RvFrame& e : events) {
    auto it = rv_sends_.find(e.id);
    if (it == rv_sends_.end()) {
      *lost_message = lost(detail::str_cat("protocol error: an answer to rendezvous ", e.id,
                                           ", which is not pending"));
      return progress;
    }
    std::shared_ptr<Op> op = std::move(it->second);
    rv_sends_.erase(it);
    if (e.tag == kRvDoneTag) {
      if (op->device) lanes_[op->lane].channel->device()->release_device(op->device_descriptor());
      op->complete(nullptr);
      ++progress.completed;
      rv_pending_.fetch_sub(1, std::memory_order_acq_rel);
      continue;
    }
    // kRvReadyTag: stream the payload, straight into the receive's buffer over there.
    if (op->device) {
      *lost_message = lost(detail::str_cat("protocol error: the payload of device message ", e.id,
                                           " was asked for through host memory"));
      return progress;
    }
    op->phase = Op::Phase::kRvData;
    op->header[0] = kRvDataTag;
    op->header[1] = sizeof(uint64_t) + op->bytes;
    op->header[2] = op->header[3] = 0;  // a control frame: no check
    op->header[kHeaderWords] = op->rv_id;
    op->header_bytes = kHeaderBytes + sizeof(uint64_t);
    op->sent = 0;
    lanes_[op->lane].send_queue.push_back(std::move(op));
    queued_.fetch_add(1, std::memory_order_acq_rel);
  }
  for (const RvFrame& r : replies) {
    auto op = make_op(rank_, true, r.tag, nullptr, 0);
    op->phase = Op::Phase::kControl;
    op->header[1] = sizeof(uint64_t);
    op->header[kHeaderWords] = r.id;
    op->header_bytes = kHeaderBytes + sizeof(uint64_t);
    op->lane = r.lane;
    lanes_[r.lane].send_queue.push_back(std::move(op));
    queued_.fetch_add(1, std::memory_order_acq_rel);
  }
  progress += flush_locked(lost_message);
  return progress;
}

Progress Peer::flush_locked(std::string* lost_message) {
  Progress progress;
  for (size_t i = 0; i < nlanes_ && lost_message->empty(); ++i) {
    if (wants_write_locked(lanes_[i]) && lanes_[i].channel->writable()) {
      progress += flush_lane_locked(i, lost_message);
    }
  }
  // After its goodbye the peer reads nothing more: what is still queued cannot go out.
  if (peer_gone_.load(std::memory_order_acquire)) {
    drop_settled_locked();
    held_.store(false, std::memory_order_release);
  } else {
    note_held_locked();
  }
  if (lost_message->empty() && (sends_queued() || rendezvous_pending()) &&
      peer_gone_.load(std::memory_order_acquire)) {
    *lost_message =
        lost(detail::str_cat("it destroyed its Comm while ", queued_.load() + rv_pending_.load(),
                             " send(s) to it were pending"));
  }
  return progress;
}

bool Peer::wants_write_locked(Lane& lane) {
  return !lane.send_queue.empty() || lane.channel->holds_unsent();
}

void Peer::note_held_locked() {
  bool held = false;
  for (size_t i = 0; i < nlanes_ && !held; ++i) held = lanes_[i].channel->holds_unsent();
  // Written only when it changes: a store on every short send would bounce the line.
  if (held != held_.load(std::memory_order_relaxed)) held_.store(held, std::memory_order_release);
}

void Peer::send_probe(uint64_t tag, Check check) {
  MutexLock lock(send_mu_);
  if (send_error_ || peer_gone_.load(std::memory_order_acquire)) return;
  auto op = make_op(rank_, true, kProbeTag, nullptr, 0);
  op->phase = Op::Phase::kControl;
  op->header[1] = kProbeBytes;
  op->header[kHeaderWords] = tag;
  op->header[kHeaderWords + 1] = check.w0;
  op->header[kHeaderWords + 2] = check.w1;
  op->header_bytes = kHeaderBytes + kProbeBytes;
  lanes_[0].send_queue.push_back(std::move(op));
  queued_.fetch_add(1, std::memory_order_acq_rel);
}

void Peer::drop_settled_locked() {
  for (Lane& lane : lanes_) {
    for (auto it = lane.send_queue.begin(); it != lane.send_queue.end();) {
      Op& op = **it;
      if (!op.done() && op.tag != kContextAbortTag && op.tag != kProbeTag) {
        ++it;
        continue;
      }
      if (op.phase == Op::Phase::kRvRequest || op.phase == Op::Phase::kRvData) {
        rv_pending_.fetch_sub(1, std::memory_order_acq_rel);
      }
      it = lane.send_queue.erase(it);
      queued_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  for (auto it = rv_sends_.begin(); it != rv_sends_.end();) {
    if (!it->second->done() || it->second->device) {
      ++it;
      continue;
    }
    it = rv_sends_.erase(it);
    rv_pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

Progress Peer::flush_lane_locked(size_t lane_index, std::string* lost_message) {
  Progress progress;
  if (send_error_) return progress;
  Lane& lane = lanes_[lane_index];
  std::deque<std::shared_ptr<Op>>& queue = lane.send_queue;
  if (queue.empty()) {  // only what the channel holds (Channel::holds_unsent)
    std::string why;
    if (lane.channel->write(nullptr, 0, &why) == 0 && !why.empty()) *lost_message = lost(why);
    return progress;
  }
  while (!queue.empty()) {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t wanted = 0;
    for (const std::shared_ptr<Op>& op : queue) {
      if (count + 2 > kMaxIov) break;
      size_t sent = op->sent;
      if (sent < op->header_bytes) {
        iov[count++] = {reinterpret_cast<uint8_t*>(op->header) + sent, op->header_bytes - sent};
        wanted += op->header_bytes - sent;
        sent = op->header_bytes;
      }
      const size_t done = sent - op->header_bytes;
      if (op->payload_follows() && done < op->bytes) {
        iov[count++] = {op->data + done, op->bytes - done};
        wanted += op->bytes - done;
      }
    }
    std::string why;
    const size_t n = lane.channel->write(iov, count, &why);
    if (!why.empty()) {
      *lost_message = lost(why);
      return progress;
    }
    if (n > 0) progress.moved = true;
    size_t left = n;
    while (!queue.empty()) {
      std::shared_ptr<Op>& op = queue.front();
      const size_t total = op->wire_bytes();
      const size_t take = std::min(left, total - op->sent);
      op->sent += take;
      left -= take;
      if (op->sent < total) break;
      if (op->phase == Op::Phase::kRvRequest) {
        rv_sends_.emplace(op->rv_id, std::move(op));  // until the receiver answers
      } else {
        if (op->phase == Op::Phase::kRvData) rv_pending_.fetch_sub(1, std::memory_order_acq_rel);
        op->complete(nullptr);
        ++progress.completed;
      }
      queue.pop_front();
      queued_.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (n < wanted) break;  // the channel is full
  }
  return progress;
}

bool Peer::write_frame_locked(size_t lane_index, uint64_t tag, const std::string& payload,
                              Deadline deadline) {
  Channel& channel = *lanes_[lane_index].channel;
  uint64_t header[kHeaderWords] = {tag, payload.size(), 0, 0};
  size_t done = 0;
  const size_t total = kHeaderBytes + payload.size();
  while (done < total) {
    iovec iov[2];
    size_t count = 0;
    if (done < kHeaderBytes) {
      iov[count++] = {reinterpret_cast<uint8_t*>(header) + done, kHeaderBytes - done};
      iov[count++] = {const_cast<char*>(payload.data()), payload.size()};
    } else {
      iov[count++] = {const_cast<char*>(payload.data()) + (done - kHeaderBytes), total - done};
    }
    std::string why;
    const size_t n = channel.write(iov, count, &why);
    if (!why.empty()) return false;
    done += n;
    if (done == total) break;
    if (n > 0) continue;
    if (deadline.expired()) return false;
    channel.arm(/*want_write=*/true);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!channel.writable()) {
      pollfd p = channel.poll_for(false, true);
      (void)::poll(&p, 1, std::min(kGoodbyePollMs, deadline.poll_timeout_ms()));
      channel.on_poll(p.revents);
    }
    channel.disarm();
  }
  return true;
}

Progress Peer::progress_streams(std::string* lost_message) {
  Progress progress;
  if (sends_queued() || rendezvous_pending()) {
    MutexLock lock(send_mu_);
    progress += flush_locked(lost_message);
  }
  if (!lost_message->empty()) return progress;
  MutexLock lock(recv_mu_);
  if (recv_error_) return progress;
  for (size_t i = 0; i < nlanes_ && lost_message->empty(); ++i) {
    Lane& lane = lanes_[i];
    if (!lane.eof && !lane.blocked && lane.channel->readable()) {
      *lost_message = read_lane_locked(i, &progress);
    }
  }
  if (lost_message->empty()) *lost_message = unblock_locked(&progress);
  return progress;
}

Progress Peer::progress(std::string* lost_message) {
  Progress progress = progress_streams(lost_message);
  if (lost_message->empty() && rv_exchange_.load(std::memory_order_acquire)) {
    progress += exchange_rendezvous(lost_message);
  }
  return progress;
}

std::string Peer::cancel(Op& op) {
  if (op.is_send) {
    MutexLock lock(send_mu_);
    return op.done() ? std::string() : cancel_send_locked(op);
  }
  MutexLock lock(recv_mu_);
  if (!op.done()) cancel_recv_locked(op);
  return {};
}

std::string Peer::cancel_send_locked(Op& op) {
  if (op.device) {
    return lost(detail::str_cat(op.describe(),
                                " of device memory was dropped before the peer copied it, "
                                "so its buffer may go while the peer reads it"));
  }
  // A rendezvous's payload may be copied out of the caller's buffer until the answer:
  // void the token first (wire.h), so a copy that overlaps the buffer's end is refused.
  const bool rendezvous = op.phase == Op::Phase::kRvRequest || op.phase == Op::Phase::kRvData;
  if (rendezvous) op.rv_token.store(0, std::memory_order_seq_cst);
  std::deque<std::shared_ptr<Op>>& queue = lanes_[op.lane].send_queue;
  auto it = std::find_if(queue.begin(), queue.end(),
                         [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
  if (it == queue.end() && !rendezvous) return {};
  // comm.h: a dropped send is still delivered in full (with several lanes it already
  // has its number in the send order the peer matches by), from a private copy, since
  // the caller's buffer goes away.
  if (!op.owned) {
    op.owned = std::make_unique_for_overwrite<uint8_t[]>(op.bytes);
    if (op.bytes > 0) std::memcpy(op.owned.get(), op.data, op.bytes);
    op.data = op.owned.get();
  }
  return {};
}

void Peer::cancel_recv_locked(Op& op) {
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& p) { return p.get() == &op; });
  if (it != posted_.end()) {
    posted_.erase(it);
    return;
  }
  for (Lane& lane : lanes_) {
    if (lane.incoming.op.get() == &op) {
      lane.incoming.op.reset();
      lane.incoming.dest = nullptr;  // drop the rest of the payload
    }
  }
  // A receive whose payload was asked for: the payload is dropped when it comes.
  for (auto awaited = rv_recvs_.begin(); awaited != rv_recvs_.end(); ++awaited) {
    if (awaited->second.get() == &op) {
      rv_recvs_.erase(awaited);
      break;
    }
  }
}

void Peer::prepare_sleep(std::vector<pollfd>* fds) {
  bool want_write[kMaxLanes] = {};
  {
    MutexLock lock(send_mu_);
    for (size_t i = 0; i < nlanes_; ++i) {
      want_write[i] = !send_error_ && wants_write_locked(lanes_[i]);
    }
  }
  MutexLock lock(recv_mu_);
  for (size_t i = 0; i < nlanes_; ++i) {
    Lane& lane = lanes_[i];
    const bool want_read = !lane.eof && !lane.blocked && !recv_error_;
    if (!want_read && !want_write[i]) {
      fds->push_back({-1, 0, 0});
      continue;
    }
    lane.channel->arm(want_write[i]);
    fds->push_back(lane.channel->poll_for(want_read, want_write[i]));
  }
}

bool Peer::ready() {
  {
    MutexLock lock(send_mu_);
    for (Lane& lane : lanes_) {
      if (!send_error_ && wants_write_locked(lane) && lane.channel->writable()) return true;
    }
  }
  MutexLock lock(recv_mu_);
  if (recv_error_) return false;
  for (Lane& lane : lanes_) {
    if (!lane.eof && !lane.blocked && lane.channel->readable()) return true;
  }
  return false;
}

void Peer::wake_up(const pollfd* fds) {
  for (size_t i = 0; i < nlanes_; ++i) {
    if (fds[i].fd < 0) continue;
    lanes_[i].channel->on_poll(fds[i].revents);
    lanes_[i].channel->disarm();
  }
}

void Peer::fail_all(const std::exception_ptr& error, bool tell_peer, const std::string& reason) {
  {
    MutexLock lock(send_mu_);
    if (!send_error_) send_error_ = error;
    for (size_t i = 0; i < nlanes_; ++i) {
      Lane& lane = lanes_[i];
      const bool at_boundary = lane.send_queue.empty() || lane.send_queue.front()->sent == 0;
      for (const std::shared_ptr<Op>& op : lane.send_queue) op->complete(error);
      lane.send_queue.clear();
      if (tell_peer) {
        // Best effort, never blocks: the peer learns why before it sees the shutdown.
        if (at_boundary && !peer_gone_.load()) {
          write_frame_locked(i, kAbortTag, reason.substr(0, kMaxAbortReasonBytes),
                             Deadline::after(Clock::duration::zero()));
        }
        lane.channel->shut_down();
      }
    }
    queued_.store(0, std::memory_order_release);
    for (auto& [id, op] : rv_sends_) op->complete(error);
    rv_sends_.clear();
    rv_pending_.store(0, std::memory_order_release);
  }
  MutexLock lock(recv_mu_);
  if (!recv_error_) recv_error_ = error;
  for (const std::shared_ptr<Op>& op : posted_) op->complete(error);
  posted_.clear();
  for (auto& [id, op] : rv_recvs_) op->complete(error);
  rv_recvs_.clear();
  replies_.clear();
  rv_events_.clear();
  for (Lane& lane : lanes_) {
    if (lane.incoming.op) lane.incoming.op->complete(error);
    lane.incoming = Incoming{};
  }
  unexpected_.clear();
}

void Peer::say_goodbye(Deadline deadline) {
  for (Lane& lane : lanes_) lane.channel->leave(deadline);  // lazy channels (channel.h)
  {
    MutexLock lock(send_mu_);
    if (send_error_ || sends_queued()) return;
    for (size_t i = 0; i < nlanes_; ++i) {
      if (!lanes_[i].channel->connected()) return;  // a lazy channel: nobody to tell
      if (!write_frame_locked(i, kGoodbyeTag, {}, deadline)) return;
    }
  }
  MutexLock lock(recv_mu_);
  for (Lane& lane : lanes_) lane.channel->close(deadline);
}

}  // namespace tdist::transport::core
