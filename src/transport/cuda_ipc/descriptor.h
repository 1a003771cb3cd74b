// The cuda_ipc channel's device descriptor (core/wire.h's DeviceDescriptor, opaque to the
// core): what a receiver needs to copy a payload out of the sender's device memory.
//
//   memory            cudaIpcMemHandle_t of the allocation that holds the payload
//   event             cudaIpcEventHandle_t of an interprocess event the sender recorded on
//                     its stream after the work that produced the payload
//   base, allocation  the allocation's address in the sender and its size: with `memory`
//                     they tell a new allocation at a reused address from the old one
//   offset, bytes     where the payload lies in the allocation
//   slot              the sender's event slot, handed back when the receiver answered
//   device            the sender's device ordinal (for messages)
// Handles are CUDA's opaque 64-byte blobs, carried here as bytes, so this header and its
// codec need no CUDA. Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/core/wire.h"

namespace tdist::transport::cuda_ipc {

inline constexpr size_t kHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t), (cudaIpcEventHandle_t)

struct IpcDescriptor {
  uint8_t memory[kHandleBytes] = {};
  uint8_t event[kHandleBytes] = {};
  uint64_t base = 0;
  uint64_t allocation = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t slot = 0;
  int32_t device = 0;
};

// Writes `d` into `out` (with a magic word that decode checks).
void encode(const IpcDescriptor& d, core::DeviceDescriptor* out);
// Reads what encode wrote; "" on success, else why the bytes are no descriptor (a wrong
// magic word, a payload outside its allocation).
std::string decode(const core::DeviceDescriptor& in, IpcDescriptor* d);

}  // namespace tdist::transport::cuda_ipc
