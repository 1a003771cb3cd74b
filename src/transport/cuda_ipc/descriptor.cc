// The cuda_ipc device descriptor's codec (descriptor.h).
#include "transport/cuda_ipc/descriptor.h"

#include <cstring>

#include "tdist/error.h"

namespace tdist::transport::cuda_ipc {
namespace {

constexpr uint32_t kMagic = 0x43495043;  // "CIPC"

struct Layout {
  uint32_t magic;
  uint32_t slot;
  int32_t device;
  uint32_t reserved;
  uint64_t base;
  uint64_t allocation;
  uint64_t offset;
  uint64_t bytes;
  uint8_t memory[kHandleBytes];
  uint8_t event[kHandleBytes];
};
static_assert(sizeof(Layout) <= core::kDeviceDescriptorBytes);

}  // namespace

void encode(const IpcDescriptor& d, core::DeviceDescriptor* out) {
  Layout l{kMagic, d.slot, d.device, 0, d.base, d.allocation, d.offset, d.bytes, {}, {}};
  std::memcpy(l.memory, d.memory, kHandleBytes);
  std::memcpy(l.event, d.event, kHandleBytes);
  *out = core::DeviceDescriptor{};
  std::memcpy(out->bytes, &l, sizeof(l));
}

std::string decode(const core::DeviceDescriptor& in, IpcDescriptor* d) {
  Layout l;
  std::memcpy(&l, in.bytes, sizeof(l));
  if (l.magic != kMagic) {
    return detail::str_cat("protocol error: a device descriptor with magic 0x", std::hex, l.magic,
                           " (expected 0x", kMagic, ")");
  }
  if (l.offset > l.allocation || l.bytes > l.allocation - l.offset) {
    return detail::str_cat("protocol error: a device descriptor places ", l.bytes,
                           " bytes at offset ", l.offset, " of a ", l.allocation,
                           "-byte allocation");
  }
  std::memcpy(d->memory, l.memory, kHandleBytes);
  std::memcpy(d->event, l.event, kHandleBytes);
  d->base = l.base;
  d->allocation = l.allocation;
  d->offset = l.offset;
  d->bytes = l.bytes;
  d->slot = l.slot;
  d->device = l.device;
  return {};
}

}  // namespace tdist::transport::cuda_ipc
