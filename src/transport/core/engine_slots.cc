// Engine: the small all-gather through slots (comm.h's "Slots", channel.h's).
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/coarse_clock.h"
#include "core/polling.h"
#include "tdist/error.h"
#include "transport/core/engine.h"

namespace tdist::transport::core {
namespace {

// Looks at a peer's slot this many times before waiting as a request does (polling, then
// sleeping), where waiters may poll (core/polling.h; not on a background thread): a peer
// that keeps in step posts within a few hundred nanoseconds, and the wait costs a
// progress pass.
constexpr int kQuickLooks = 256;

}  // namespace

void Engine::init_slots() {
  if (size_ < 2) return;
  std::vector<Channel*> channels(static_cast<size_t>(size_), nullptr);
  size_t bytes = SIZE_MAX;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Channel& channel = peers_[static_cast<size_t>(r)]->first_channel();
    bytes = std::min(bytes, channel.slot_bytes());
    channels[static_cast<size_t>(r)] = &channel;
  }
  if (bytes == 0) return;
  slot_channels_ = std::move(channels);
  slot_bytes_ = bytes;
}

void Engine::slot_gather(uint64_t tag, const void* mine, size_t bytes, const void** blocks,
                         Deadline deadline) {
  TDIST_CHECK(slot_bytes_ > 0 && bytes <= slot_bytes_, InvalidArgument, "rank ", rank_,
              ": slot_gather of ", bytes, " bytes: the slots of this Comm hold ", slot_bytes_);
  if (has_error_.load(std::memory_order_acquire)) std::rethrow_exception(error());
  if (slot_looks_ < 0) {  // at the first exchange: the topology is known by now
    slot_looks_ =
        tdist::core::poll_limit(local_ranks(), local_cpus()).count() > 0 ? kQuickLooks : 0;
  }
  const uint64_t index = ++slot_index_;
  const CollectiveBook::Check check = book_.check_for(tag);
  const Channel::SlotHeader header{tag, check.w0, check.w1, bytes};
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) slot_channels_[static_cast<size_t>(r)]->slot_post(index, header, mine);
  }
  blocks[rank_] = slot_channels_[static_cast<size_t>(rank_ == 0 ? 1 : 0)]->slot_own(index);
  for (int i = 1; i < size_; ++i) {
    const int r = (rank_ + i) % size_;
    Channel::SlotHeader got;
    const uint8_t* data = slot_channels_[static_cast<size_t>(r)]->slot_peek(index, &got);
    if (data == nullptr) data = await_slot(r, tag, index, &got, deadline);
    if (got.tag != tag || got.bytes != bytes ||
        !tdist::core::fingerprints_agree(check, {got.w0, got.w1})) {
      const CollectiveBook::Check theirs{got.w0, got.w1};
      auto name = [](CollectiveBook::Check c, uint64_t t, size_t n) {
        const tdist::core::OpFingerprint fp = tdist::core::OpFingerprint::decode(c);
        return fp.empty() ? detail::str_cat("an exchange of ", n, " bytes (tag 0x", std::hex, t,
                                            std::dec, ")")
                          : fp.describe(CollectiveBook::tag_seq(t));
      };
      TDIST_THROW(DesyncError,
                  desync_text(rank_, name(check, tag, bytes), r, name(theirs, got.tag, got.bytes)));
    }
    blocks[r] = data;
  }
}

const uint8_t* Engine::await_slot(int peer, uint64_t tag, uint64_t index,
                                  Channel::SlotHeader* header, Deadline deadline) {
  Channel& channel = *slot_channels_[static_cast<size_t>(peer)];
  if (!tdist::core::on_background_thread()) {
    for (int i = 0; i < slot_looks_; ++i) {
      tdist::core::cpu_relax();
      if (const uint8_t* data = channel.slot_peek(index, header)) return data;
    }
  }
  const auto start = tdist::core::coarse_now();  // for the error text only
  (void)wait_slot(peer, index, deadline);
  if (const uint8_t* data = channel.slot_peek(index, header)) return data;
  if (std::exception_ptr failed = error()) std::rethrow_exception(failed);
  if (peers_[static_cast<size_t>(peer)]->gone()) {
    TDIST_THROW(PeerError, "rank ", rank_, ": rank ", peer, " destroyed its Comm (said goodbye) ",
                "before its part of ", book_.describe(tag));
  }
  const auto waited =
      std::chrono::duration_cast<std::chrono::milliseconds>(tdist::core::coarse_now() - start);
  TDIST_THROW(TimeoutError, "rank ", rank_, ": rank ", peer, "'s part of ", book_.describe(tag),
              " (through shared memory) did not come within the deadline (waited ", waited.count(),
              " ms)");
}

}  // namespace tdist::transport::core
