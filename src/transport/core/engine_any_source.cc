// Engine: receives from any source (comm.h's "Any source"; any_source.h).
#include "tdist/error.h"
#include "transport/core/engine.h"

namespace tdist::transport::core {

void Engine::check_any_args(uint64_t tag, const void* data, size_t bytes) const {
  TDIST_CHECK(size_ > 1, InvalidArgument, "rank ", rank_,
              ": irecv from any rank: no other rank is in this group (size ", size_, ")");
  TDIST_CHECK(!is_control_tag(tag), InvalidArgument, "rank ", rank_, ": tag 0x", std::hex, tag,
              " is reserved by the transport");
  TDIST_CHECK(is_p2p_tag(tag), InvalidArgument, "rank ", rank_, ": irecv from any rank: tag 0x",
              std::hex, tag, " is not a point-to-point tag (p2p_tag)");
  TDIST_CHECK(data != nullptr || bytes == 0, InvalidArgument, "rank ", rank_,
              ": irecv from any rank: null buffer for ", bytes, " bytes");
}

RequestPtr Engine::irecv_any(uint64_t tag, void* data, size_t bytes) {
  check_any_args(tag, data, bytes);
  return post_any(tag, data, bytes, false);
}

RequestPtr Engine::irecv_any_device(uint64_t tag, void* data, size_t bytes) {
  check_any_args(tag, data, bytes);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && !carries_device(peer)) {
      return Comm::irecv_any_device(tag, data, bytes);  // throws
    }
  }
  return post_any(tag, data, bytes, true);
}

RequestPtr Engine::post_any(uint64_t tag, void* data, size_t bytes, bool device) {
  for (auto& peer : peers_) {
    if (peer) peer->activate();  // lazy channels: any peer may be the source
  }
  std::shared_ptr<Op> op = make_op(kAnySource, false, tag, data, bytes, book_.check_for(tag));
  op->device = device && bytes > 0;
  if (!any_.post(op)) return std::make_unique<CoreRequest>(this, std::move(op));  // aborted
  // Its context aborted meanwhile (abort_context closes it, then fails what is queued).
  if (book_.closed(tag) && any_.withdraw(*op)) op->complete(book_.closed_error(tag));
  // The messages that arrived before it go, earliest first, to the any-source receives that
  // wait for them: this one, or ones posted before it (any_source.h).
  Progress progress;
  std::string lost;
  while (op->source() < 0 && !op->done() && lost.empty()) {
    int first = -1;
    uint64_t first_arrival = AnySourceQueue::kNone;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const uint64_t arrival = peers_[peer]->first_arrival(tag);
      if (arrival < first_arrival) {
        first = peer;
        first_arrival = arrival;
      }
    }
    if (first < 0) break;
    // False when another thread took the message meanwhile: look again.
    peers_[first]->give_unexpected(tag, &progress, &lost);
  }
  completed_elsewhere(progress);
  if (!lost.empty()) report(lost);
  return std::make_unique<CoreRequest>(this, std::move(op));
}

}  // namespace tdist::transport::core
