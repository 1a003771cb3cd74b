// Peer: the receive side — reading the lanes, header parsing, the unexpected-message queue,
// the rendezvous, the control frames and the end of a stream. Matching is peer_match.cc.
#include <algorithm>
#include <cstring>
#include <new>

#include "tdist/error.h"
#include "transport/comm.h"
#include "transport/core/peer.h"
#include "transport/core/wire.h"

namespace tdist::transport::core {
namespace {

// A direct read at least this long is followed by the next header only (read_lane_locked).
constexpr size_t kDirectOnlyBytes = 32 * 1024;

// The protocol error of a message that is due on a lane that said goodbye already.
std::string out_of_order(uint64_t seq, size_t nlanes) {
  return detail::str_cat("protocol error: message ", seq, " in send order is due on lane ",
                         seq % nlanes, ", which said goodbye already");
}

}  // namespace

std::string Peer::unblock_locked(Progress* progress) {
  while (!recv_error_) {
    const size_t index = static_cast<size_t>(recv_seq_ % nlanes_);
    Lane& lane = lanes_[index];
    if (!lane.blocked) return {};
    lane.blocked = false;
    std::string message = consume_staged_locked(index, progress);
    if (!message.empty()) return message;
  }
  return {};
}

bool Peer::read_direct_locked(Lane& lane, Progress* progress) {
  const uint8_t* data = nullptr;
  const size_t avail = lane.channel->peek(&data);
  if (avail < kHeaderBytes) return false;
  WireHeader header;
  std::memcpy(&header, data, kHeaderBytes);
  // Data in send order, whole in view, small (no rendezvous bit, no control tag).
  if (is_control_tag(header.tag) || header.bytes > avail - kHeaderBytes ||
      lane.next_seq != recv_seq_) {
    return false;
  }
  // With any-source receives waiting, take_receive_locked decides on the path below.
  if (is_p2p_tag(header.tag) && !any_.empty()) return false;
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [&](const std::shared_ptr<Op>& op) { return op->tag == header.tag; });
  if (it == posted_.end() || (*it)->bytes != header.bytes || (*it)->device ||
      !tdist::core::fingerprints_agree((*it)->check(), {header.check[0], header.check[1]})) {
    return false;  // the path below reports it
  }
  std::shared_ptr<Op> op = std::move(*it);
  posted_.erase(it);
  if (header.bytes > 0) std::memcpy(op->data, data + kHeaderBytes, header.bytes);
  lane.channel->consume(kHeaderBytes + header.bytes);
  ++recv_seq_;
  lane.next_seq += nlanes_;
  op->complete(nullptr);
  progress->moved = true;
  ++progress->completed;
  return true;
}

std::string Peer::read_lane_locked(size_t lane_index, Progress* progress) {
  Lane& lane = lanes_[lane_index];
  Incoming& incoming = lane.incoming;
  // Between messages, with nothing staged: messages whose receive is posted come straight
  // from the channel's memory when it has some (Channel::peek). The rest takes the path below.
  if (!incoming.active && lane.staged_begin == lane.staged_end) {
    while (read_direct_locked(lane, progress)) {
    }
    if (!lane.channel->readable()) return {};
  }
  size_t total = 0;
  while (!lane.eof && !recv_error_ && !lane.blocked) {
    std::string message = consume_staged_locked(lane_index, progress);
    if (!message.empty() || lane.blocked) return message;
    if (lane.staged_begin > 0) {  // keep a partial header at the front
      std::memmove(lane.staging.get(), lane.staging.get() + lane.staged_begin,
                   lane.staged_end - lane.staged_begin);
      lane.staged_end -= lane.staged_begin;
      lane.staged_begin = 0;
    }
    iovec iov[2];
    size_t count = 0;
    size_t direct = 0;
    if (incoming.active && incoming.dest != nullptr) {
      direct = incoming.bytes - incoming.got;
      iov[count++] = {incoming.dest + incoming.got, direct};
    }
    // Behind a large direct read, read only the next header: its payload then goes
    // straight to its own receive (when posted) instead of through staging and a copy.
    size_t room = kStagingBytes - lane.staged_end;
    if (direct >= kDirectOnlyBytes) room = std::min(room, kHeaderBytes);
    iov[count++] = {lane.staging.get() + lane.staged_end, room};
    const size_t wanted = direct + room;
    bool eof = false;
    std::string why;
    const size_t got = lane.channel->read(iov, count, &eof, &why);
    if (!why.empty()) return end_of_stream_locked(lane_index, why);
    if (got > 0) progress->moved = true;
    const size_t to_direct = std::min(got, direct);
    if (to_direct > 0) {
      incoming.got += to_direct;
      if (incoming.got == incoming.bytes) {
        message = finish_message_locked(lane_index, progress);
        if (!message.empty()) return message;
      }
    }
    lane.staged_end += got - to_direct;
    total += got;
    if (eof) {
      message = consume_staged_locked(lane_index, progress);
      if (!message.empty()) return message;
      return end_of_stream_locked(lane_index, {});
    }
    if (got < wanted || total >= kReadBudget) return consume_staged_locked(lane_index, progress);
  }
  return {};
}

std::string Peer::end_of_stream_locked(size_t lane_index, const std::string& why) {
  Lane& lane = lanes_[lane_index];
  lane.eof = true;
  if (lane.goodbye) return {};  // e.g. a reset after a clean goodbye
  if (!why.empty()) return lost(why);
  if (lane.channel->departed()) return goodbye_locked(lane_index);  // never connected
  return lost(std::string(kPeerVanished) + " (its process exited or was killed?)");
}

std::string Peer::goodbye_locked(size_t lane_index) {
  Lane& lane = lanes_[lane_index];
  if (!lane.goodbye) {
    lane.goodbye = true;
    ++goodbyes_;
  }
  // A lane waits for the next message in send order, which was to come on this lane.
  if (recv_seq_ % nlanes_ == lane_index &&
      std::any_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.blocked; })) {
    return lost(out_of_order(recv_seq_, nlanes_));
  }
  if (goodbyes_ < nlanes_) return {};
  peer_gone_.store(true, std::memory_order_release);
  if (!posted_.empty() || !rv_recvs_.empty()) {
    return lost(detail::str_cat("it destroyed its Comm while ", posted_.size() + rv_recvs_.size(),
                                " receive(s) from it were pending"));
  }
  return {};
}

std::string Peer::consume_staged_locked(size_t lane_index, Progress* progress) {
  Lane& lane = lanes_[lane_index];
  Incoming& incoming = lane.incoming;
  while (true) {
    const size_t avail = lane.staged_end - lane.staged_begin;
    if (incoming.active) {
      const size_t take = std::min(avail, incoming.bytes - incoming.got);
      if (incoming.dest != nullptr && take > 0) {
        std::memcpy(incoming.dest + incoming.got, lane.staging.get() + lane.staged_begin, take);
      }
      incoming.got += take;
      lane.staged_begin += take;
      if (incoming.got < incoming.bytes) return {};
      std::string message = finish_message_locked(lane_index, progress);
      if (!message.empty()) return message;
      continue;
    }
    if (avail < kHeaderBytes) {
      if (avail == 0) lane.staged_begin = lane.staged_end = 0;
      return {};
    }
    WireHeader header;
    std::memcpy(&header, lane.staging.get() + lane.staged_begin, kHeaderBytes);
    const bool control = is_control_tag(header.tag);
    if (!control && lane.next_seq != recv_seq_) {
      // An earlier message is on another lane: wait for its header, unless that lane said
      // goodbye already (after its last message), so that it never comes.
      if (lanes_[recv_seq_ % nlanes_].goodbye) return lost(out_of_order(recv_seq_, nlanes_));
      lane.blocked = true;
      return {};
    }
    lane.staged_begin += kHeaderBytes;
    std::string message = start_message_locked(lane_index, header, progress);
    if (!message.empty()) return message;
  }
}

std::string Peer::start_message_locked(size_t lane_index, const WireHeader& header,
                                       Progress* progress) {
  const uint64_t tag = header.tag;
  const uint64_t wire_bytes = header.bytes;
  const Check check{header.check[0], header.check[1]};
  Lane& lane = lanes_[lane_index];
  Incoming& incoming = lane.incoming;
  if (tag == kGoodbyeTag) return goodbye_locked(lane_index);
  const bool control = is_control_tag(tag);
  const bool rendezvous = !control && (wire_bytes & kRendezvousBit) != 0;
  const bool device = rendezvous && (wire_bytes & kDeviceBit) != 0;
  const uint64_t bytes = rendezvous ? wire_bytes & ~(kRendezvousBit | kDeviceBit) : wire_bytes;
  const bool bad_control =
      (tag == kAbortTag && bytes > kMaxAbortReasonBytes) ||
      ((tag == kRvReadyTag || tag == kRvDoneTag) && bytes != sizeof(uint64_t)) ||
      (tag == kContextAbortTag &&
       (bytes < sizeof(uint64_t) || bytes > sizeof(uint64_t) + kMaxAbortReasonBytes)) ||
      (tag == kRvDataTag && bytes < sizeof(uint64_t)) ||
      (tag == kProbeTag && bytes != kProbeBytes) ||
      (control && tag != kAbortTag && tag != kRvReadyTag && tag != kRvDoneTag &&
       tag != kRvDataTag && tag != kContextAbortTag && tag != kProbeTag);
  if (bytes > kMaxMessageBytes || bad_control) {
    return lost(detail::str_cat("protocol error: a header announces ", bytes, " bytes (tag 0x",
                                std::hex, tag, ")"));
  }
  // finish_message_locked left it inactive with no op, dest or unexpected message.
  incoming.active = true;
  incoming.reading = Reading::kData;
  incoming.tag = tag;
  incoming.bytes = bytes;
  incoming.got = 0;
  incoming.message_bytes = 0;
  incoming.device = device;
  auto* words = reinterpret_cast<uint8_t*>(incoming.words);
  if (tag == kAbortTag || tag == kContextAbortTag) {
    incoming.control.resize(bytes);
    incoming.dest = reinterpret_cast<uint8_t*>(incoming.control.data());
  } else if (tag == kRvReadyTag || tag == kRvDoneTag) {
    incoming.reading = Reading::kRvReply;
    incoming.dest = words;
  } else if (tag == kProbeTag) {
    incoming.reading = Reading::kProbe;
    incoming.dest = words;
  } else if (tag == kRvDataTag) {
    incoming.reading = Reading::kRvDataId;
    incoming.bytes = sizeof(uint64_t);
    incoming.message_bytes = bytes - sizeof(uint64_t);
    incoming.dest = words;
  } else {
    ++recv_seq_;  // matched in send order (see peer.h)
    lane.next_seq += nlanes_;
    if (rendezvous) {
      incoming.reading = Reading::kRvRequest;
      incoming.bytes = sizeof(RvDescriptor) + (device ? sizeof(DeviceDescriptor) : 0);
      incoming.message_bytes = bytes;
      incoming.dest = words;
    }
    if (book_.closed(tag)) {
      // Of a context aborted here: the payload is dropped (a rendezvous is answered at its
      // end, as one whose receive was withdrawn).
    } else if (std::shared_ptr<Op> op = take_receive_locked(tag)) {
      const bool agree = tdist::core::fingerprints_agree(op->check(), check);
      if (!agree || op->bytes != bytes || op->device != device) {  // the payload is dropped
        op->complete(!agree               ? mismatch(tag, op->check(), check)
                     : op->bytes != bytes ? desync(tag, op->bytes, bytes)
                                          : kind_mismatch(tag, op->device));
        ++progress->completed;
      } else if (rendezvous) {
        incoming.op = std::move(op);
      } else {
        incoming.dest = op->data;
        incoming.op = std::move(op);
      }
    } else {
      try {
        unexpected_.push_back(
            Unexpected{tag,
                       bytes,
                       check,
                       rendezvous ? nullptr : std::make_unique_for_overwrite<uint8_t[]>(bytes),
                       false,
                       lane_index,
                       rendezvous,
                       {}});
      } catch (const std::bad_alloc&) {
        return out_of_memory(bytes);
      }
      incoming.unexpected = &unexpected_.back();
      incoming.unexpected->device = device;
      if (is_p2p_tag(tag)) incoming.unexpected->arrival = any_.next_arrival();
      if (!rendezvous) incoming.dest = incoming.unexpected->data.get();
      if (check.w0 != 0) {
        // Counted before the book is read (collective_book.h's `early`).
        book_.early.fetch_add(1);
        std::string report = judge(tag, check);
        if (!report.empty()) return report;
      }
    }
  }
  if (incoming.bytes == 0) return finish_message_locked(lane_index, progress);
  return {};
}

std::string Peer::finish_message_locked(size_t lane_index, Progress* progress) {
  Lane& lane = lanes_[lane_index];
  Incoming& incoming = lane.incoming;
  if (incoming.reading == Reading::kData && incoming.tag != kAbortTag &&
      incoming.tag != kContextAbortTag) {
    // The common case, without moving the whole Incoming: a data message is complete.
    incoming.active = false;
    incoming.dest = nullptr;
    if (incoming.op) {
      incoming.op->complete(nullptr);
      incoming.op.reset();
      ++progress->completed;
    }
    if (incoming.unexpected != nullptr) {
      incoming.unexpected->complete = true;
      incoming.unexpected = nullptr;
    }
    return {};
  }
  Incoming done = std::move(incoming);
  incoming = Incoming{};
  if (done.tag == kContextAbortTag)
    return context_aborted_locked(lane_index, done.control, progress);
  if (done.tag == kAbortTag) {
    lane.eof = true;
    return aborted_text(lane_index, "its Comm", done.control);
  }
  return finish_rendezvous_locked(lane_index, done, progress);
}

std::string Peer::aborted_text(size_t lane_index, const char* what,
                               const std::string& reason) const {
  const bool marked = is_marked(reason);  // a desync or a timeout over there: kept marked
  return detail::str_cat(marked ? reason.substr(0, 1) : std::string(), "rank ", self_rank_,
                         ": rank ", rank_, " (", lanes_[lane_index].channel->describe(),
                         ") aborted ", what, ": ", reason.substr(marked ? 1 : 0));
}

std::string Peer::finish_rendezvous_locked(size_t lane_index, Incoming& done, Progress* progress) {
  Lane& lane = lanes_[lane_index];
  switch (done.reading) {
    case Reading::kRvReply:
      rv_events_.push_back({done.tag, done.words[0], lane_index});
      rv_exchange_.store(true, std::memory_order_release);
      return {};
    case Reading::kProbe:
      return judge_probe(done.words[0], Check{done.words[1], done.words[2]});
    case Reading::kRvDataId: {
      // The payload of a receive this side asked for follows: straight into its buffer
      // (or dropped, when the receive was withdrawn meanwhile).
      Incoming& next = lane.incoming;
      next.active = true;
      next.tag = kRvDataTag;
      next.bytes = done.message_bytes;
      auto it = rv_recvs_.find(done.words[0]);
      auto early =
          it != rv_recvs_.end()
              ? unexpected_.end()
              : std::find_if(unexpected_.begin(), unexpected_.end(), [&](const Unexpected& u) {
                  return u.rendezvous && u.asked && u.rv.id == done.words[0];
                });
      if (early != unexpected_.end()) {
        // A single-copy message that could not be copied, still without its receive: it
        // arrives now as an ordinary unexpected message.
        if (early->bytes != done.message_bytes) {
          return lost(detail::str_cat("protocol error: rendezvous ", done.words[0], " brings ",
                                      done.message_bytes, " bytes for a message of ",
                                      early->bytes));
        }
        try {
          if (!early->data) early->data = std::make_unique_for_overwrite<uint8_t[]>(early->bytes);
        } catch (const std::bad_alloc&) {
          return out_of_memory(early->bytes);
        }
        early->rendezvous = false;
        early->complete = false;
        early->lane = lane_index;
        next.unexpected = &*early;
        next.dest = early->data.get();
      } else if (it != rv_recvs_.end()) {
        if (it->second->bytes != done.message_bytes) {
          return lost(detail::str_cat("protocol error: rendezvous ", done.words[0], " brings ",
                                      done.message_bytes, " bytes for a receive of ",
                                      it->second->bytes));
        }
        next.op = std::move(it->second);
        next.dest = next.op->data;
        rv_recvs_.erase(it);
      }
      if (next.bytes == 0) return finish_message_locked(lane_index, progress);
      return {};
    }
    case Reading::kRvRequest: {
      RvDescriptor rv;
      std::memcpy(&rv, done.words, sizeof(rv));
      if (done.device != ((rv.flags & kRvDevice) != 0)) {
        return fail_op(done.op,
                       detail::str_cat("protocol error: rendezvous ", rv.id,
                                       " disagrees with its header on the memory kind"),
                       progress);
      }
      const auto* device =
          done.device ? reinterpret_cast<const DeviceDescriptor*>(&done.words[sizeof(rv) / 8])
                      : nullptr;
      if (device != nullptr && lanes_[lane_index].channel->device() == nullptr) {
        return lost(detail::str_cat("protocol error: rendezvous ", rv.id,
                                    " brings device memory over a host channel"));
      }
      if (done.op) {
        return fetch_locked(lane_index, done.op, rv, device, progress);
      } else if (done.unexpected != nullptr) {
        done.unexpected->rv = rv;
        done.unexpected->complete = true;
        if (device != nullptr) {
          done.unexpected->device_descriptor = std::make_unique<DeviceDescriptor>(*device);
          if ((rv.flags & kRvPull) != 0) {
            return pull_unexpected_device_locked(lane_index, *done.unexpected);
          }
        } else if ((rv.flags & kRvPull) != 0) {
          return pull_unexpected_locked(lane_index, *done.unexpected);
        }
      } else {  // desynced, or its receive was withdrawn: let the send complete
        replies_.push_back({kRvDoneTag, rv.id, lane_index});
        rv_exchange_.store(true, std::memory_order_release);
      }
      return {};
    }
    case Reading::kData:
      break;
  }
  return {};
}

bool Peer::copy_out_locked(size_t lane_index, void* dest, size_t bytes, const RvDescriptor& rv) {
  Channel& channel = *lanes_[lane_index].channel;
  uint64_t token = 0;
  // The token is read after the payload: still valid then, the payload was valid throughout
  // (the sender zeroes it before it lets the buffer go; wire.h).
  const bool copied = channel.read_remote(dest, rv.address, bytes) &&
                      channel.read_remote(&token, rv.token_address, sizeof(token)) &&
                      token == rv.token;
  replies_.push_back({copied ? kRvDoneTag : kRvReadyTag, rv.id, lane_index});
  rv_exchange_.store(true, std::memory_order_release);
  return copied;
}

std::string Peer::fetch_locked(size_t lane_index, const std::shared_ptr<Op>& op,
                               const RvDescriptor& rv, const DeviceDescriptor* device,
                               Progress* progress) {
  if (device != nullptr) {
    // Device to device by the channel, complete when it returns; then the sender may go on.
    const std::string why =
        lanes_[lane_index].channel->device()->import_device(op->data, op->bytes, *device);
    if (!why.empty()) return fail_op(op, why, progress);
    replies_.push_back({kRvDoneTag, rv.id, lane_index});
    rv_exchange_.store(true, std::memory_order_release);
    op->complete(nullptr);
    ++progress->completed;
  } else if (copy_out_locked(lane_index, op->data, op->bytes, rv)) {
    op->complete(nullptr);
    ++progress->completed;
  } else {
    return await_payload_locked(op, rv.id, progress);
  }
  return {};
}

std::string Peer::await_payload_locked(const std::shared_ptr<Op>& op, uint64_t id,
                                       Progress* progress) {
  if (rv_recvs_.try_emplace(id, op).second) return {};
  // A sender numbers its rendezvous afresh: a second one under an id still awaited would
  // replace the first receive, which then never completes.
  return fail_op(op, detail::str_cat("protocol error: rendezvous ", id, " is already in flight"),
                 progress);
}

std::string Peer::pull_unexpected_locked(size_t lane_index, Unexpected& u) {
  try {
    u.data = std::make_unique_for_overwrite<uint8_t[]>(u.bytes);
  } catch (const std::bad_alloc&) {
    return out_of_memory(u.bytes);
  }
  if (copy_out_locked(lane_index, u.data.get(), u.bytes, u.rv)) {
    u.rendezvous = false;  // now an ordinary unexpected message, complete
  } else {
    u.asked = true;
  }
  return {};
}

std::string Peer::pull_unexpected_device_locked(size_t lane_index, Unexpected& u) {
  DeviceChannel& channel = *lanes_[lane_index].channel->device();
  void* data = channel.allocate_device(u.bytes);
  if (data == nullptr) {
    return lost(detail::str_cat("out of device memory buffering a ", u.bytes,
                                "-byte device message that arrived before its receive"));
  }
  const size_t bytes = u.bytes;
  u.device_data =
      std::shared_ptr<void>(data, [&channel, bytes](void* p) { channel.free_device(p, bytes); });
  const std::string why = channel.import_device(data, bytes, *u.device_descriptor);
  if (!why.empty()) return lost(why);
  replies_.push_back({kRvDoneTag, u.rv.id, lane_index});
  rv_exchange_.store(true, std::memory_order_release);
  u.rendezvous = false;  // now an unexpected message whose payload is here
  return {};
}

std::string Peer::fail_op(const std::shared_ptr<Op>& op, const std::string& reason,
                          Progress* progress) const {
  std::string message = lost(reason);
  if (op) {
    op->complete(std::make_exception_ptr(PeerError(message)));
    ++progress->completed;
  }
  return message;
}

std::string Peer::out_of_memory(size_t bytes) const {
  return lost(detail::str_cat("out of memory buffering a ", bytes,
                              "-byte message that arrived before its receive"));
}

}  // namespace tdist::transport::core
