// The CUDA-IPC transport: channels between ranks of one host that carry device memory by
// descriptor (channel.h), over shared-memory channels for the host frames.
//
// make_cuda_ipc_kind() is a kind of channel (connect.h) that reaches peers with this
// rank's host key (shm_host_key), linking them as the shm kind does (shm/setup.h) and
// wrapping each link in a CudaIpcChannel on `device`. It is not one of the registered kinds
// (TDIST_CHANNELS): its channels need the group's device and stream, so the cuda_ipc
// backend builds its Comms with connect_cuda_ipc_comm, where every rank must be on this
// host (InvalidArgument naming a rank on another host, with `unreachable_hint`).
// Blocking, failure and thread-safety: as connect_comm and the shm transport.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tdist/settings.h"
#include "tdist/store.h"
#include "transport/comm.h"
#include "transport/connect.h"
#include "transport/cuda_ipc/device_stream.h"

namespace tdist::transport {

std::unique_ptr<ChannelKind> make_cuda_ipc_kind(
    std::shared_ptr<const cuda_ipc::DeviceStream> device);

std::unique_ptr<Comm> connect_cuda_ipc_comm(std::shared_ptr<Store> store, int rank, int size,
                                            std::shared_ptr<const cuda_ipc::DeviceStream> device,
                                            std::chrono::milliseconds timeout,
                                            const std::string& unreachable_hint = {});

}  // namespace tdist::transport
