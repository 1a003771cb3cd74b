// Ring: the layout of one shared-memory byte ring (one per ordered pair of ranks) and the
// wrap-aware copies in and out of it. It carries the core's byte stream (core/wire.h).
//
// The ring lives in a memfd created by its sender (setup.h) and mapped by both processes:
// a 4 KiB control page, then `capacity` bytes of data. It is a single-producer,
// single-consumer byte stream: `head` (bytes ever published, written only by the sender)
// and `tail` (bytes ever consumed, written only by the receiver) are monotonic 64-bit
// counters on separate cache lines, so the two sides never write the same line. Data is
// published with release stores of head/tail and read after acquire loads. The sleep flags
// have lines of their own, written only around a sleep: a publisher checks its peer's flag
// on every publication, and a line the peer keeps writing (its counter) would cost a cache
// miss each time. The sender also keeps the tail it last read and reloads it only when
// that leaves too little room, so a message costs the sender no read of the receiver's line.
//
// Sleeping without lost wakeups (Dekker style): a side that can make no progress sets its
// flag (`reader_sleeping` when it waits for head to move, `writer_sleeping` when it waits
// for tail to move), issues a seq_cst fence and re-reads the other counter before it
// blocks in poll(); the other side, after publishing its counter, issues a seq_cst fence
// and clears a set flag, and whoever cleared it writes one wake byte to the pair's unix
// socket. Either the sleeper sees the new counter or the publisher sees the flag.
// Slots: after the control page comes the sender's two message slots (SlotArea), which
// the core's small collective exchanges use instead of the byte stream (core/channel.h's
// "Slots"): slot k % 2 holds the sender's k-th exchange, published by a release store of
// its `index` after the payload and the header, and woken like head (reader_sleeping).
// Thread-safety: the struct is shared between two processes; each field has one writer
// (above); callers serialise each side with their own locks.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tdist::transport::shm {

inline constexpr uint64_t kRingMagic = 0x676e6952'4d536474ull;  // "tdSMRing"
// The control page and the slot area: the data area starts here.
inline constexpr size_t kRingControlBytes = 16384;
inline constexpr size_t kRingAlign = 64;  // capacities are multiples of this
// Smallest and largest data area accepted (TDIST_SHM_RING_BYTES is clamped to these).
inline constexpr size_t kMinRingBytes = 4096;
inline constexpr size_t kMaxRingBytes = size_t{1} << 30;

struct alignas(64) RingControl {
  // Written once by the creator before the memfd is passed on.
  uint64_t magic;
  uint64_t capacity;
  // The sender's cache line.
  alignas(64) std::atomic<uint64_t> head;
  // The receiver's cache line.
  alignas(64) std::atomic<uint64_t> tail;
  // Set by the side about to sleep, cleared by the side that wakes it.
  alignas(64) std::atomic<uint32_t> writer_sleeping;
  alignas(64) std::atomic<uint32_t> reader_sleeping;
};
// Where the slot area starts: the control page's end.
inline constexpr size_t kSlotAreaOffset = 4096;
static_assert(sizeof(RingControl) <= kSlotAreaOffset);

// Payload bytes of one slot.
inline constexpr size_t kSlotBytes = 4096;

// One slot: its header on a line of its own, then the payload.
struct alignas(64) Slot {
  std::atomic<uint64_t> index;  // the exchange it holds (from 1); stored last, with release
  uint64_t tag;
  uint64_t w0;  // the fingerprint's words (core/wire.h)
  uint64_t w1;
  uint64_t bytes;
  alignas(64) uint8_t data[kSlotBytes];
};

struct SlotArea {
  Slot slot[2];
};
static_assert(kSlotAreaOffset + sizeof(SlotArea) <= kRingControlBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory counters must be lock-free to work across processes");

// A mapped ring as seen by one side. Plain pointers into a mapping owned elsewhere.
struct RingView {
  RingControl* control = nullptr;
  SlotArea* slots = nullptr;  // kSlotAreaOffset bytes after control
  uint8_t* data = nullptr;
  uint64_t capacity = 0;

  // Copies `n` bytes to ring position `pos` (a monotonic counter), wrapping at the end.
  void write(uint64_t pos, const void* src, size_t n) const {
    const size_t at = static_cast<size_t>(pos % capacity);
    const size_t first = std::min<size_t>(n, capacity - at);
    std::memcpy(data + at, src, first);
    if (first < n) std::memcpy(data, static_cast<const uint8_t*>(src) + first, n - first);
  }
  // Copies `n` bytes from ring position `pos` to `dst`, wrapping at the end.
  void read(uint64_t pos, void* dst, size_t n) const {
    const size_t at = static_cast<size_t>(pos % capacity);
    const size_t first = std::min<size_t>(n, capacity - at);
    std::memcpy(dst, data + at, first);
    if (first < n) std::memcpy(static_cast<uint8_t*>(dst) + first, data, n - first);
  }
};

}  // namespace tdist::transport::shm
