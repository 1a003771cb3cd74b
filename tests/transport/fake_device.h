// A stand-in for a device-memory channel that runs without a GPU: HostDeviceChannel is
// a shared-memory channel that also "carries device memory" that is host memory of this process
// (ranks are threads): its descriptor is the sender's address, and import_device copies
// from it. It exercises the core's device path (core/wire.h: descriptors, answers,
// release, kind checks) and, with HostDeviceOps, the algorithms' device path
// (collectives/device_ops.h) exactly as cuda_ipc takes them, in every CI tree. It counts
// descriptors exported and released, so tests can check that every one came back.
// Test-only.
#pragma once

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/device_ops.h"
#include "core/reduce_kernels.h"
#include "tdist/store.h"
#include "transport/connect.h"
#include "transport/shm/channel.h"
#include "transport/shm/setup.h"
#include "transport/shm/shm_comm.h"

namespace tdist::transport::testing {

struct DeviceCounters {
  std::atomic<int> exported{0};
  std::atomic<int> released{0};
  std::atomic<int> imported{0};
};

class HostDeviceChannel final : public shm::ShmChannel, public core::DeviceChannel {
 public:
  HostDeviceChannel(shm::PeerLink link, DeviceCounters* counters)
      : ShmChannel(std::move(link), ShmCommOptions{}.single_copy_bytes), counters_(counters) {}

  const char* kind() const override { return "host_device"; }
  std::string describe() const override { return "host_device over " + ShmChannel::describe(); }
  core::DeviceChannel* device() override { return this; }
  void export_device(const void* data, size_t bytes, core::DeviceDescriptor* out) override {
    const uint64_t words[3] = {reinterpret_cast<uint64_t>(data), bytes, kMagic};
    std::memcpy(out->bytes, words, sizeof(words));
    counters_->exported.fetch_add(1);
  }
  std::string import_device(void* dest, size_t bytes, const core::DeviceDescriptor& d) override {
    uint64_t words[3];
    std::memcpy(words, d.bytes, sizeof(words));
    if (words[2] != kMagic || words[1] != bytes) return "bad host_device descriptor";
    // As a real channel reads another process's memory: through the kernel (shm's single
    // copy does the same), which ThreadSanitizer does not see, since the only ordering with
    // the sending thread is the shared-memory ring's, in another mapping of its memory.
    iovec local{dest, bytes};
    iovec remote{reinterpret_cast<void*>(words[0]), bytes};
    if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes)) {
      std::memcpy(dest, reinterpret_cast<const void*>(words[0]), bytes);
    }
    counters_->imported.fetch_add(1);
    return {};
  }
  void release_device(const core::DeviceDescriptor& /*d*/) override {
    counters_->released.fetch_add(1);
  }
  void* allocate_device(size_t bytes) override { return new uint8_t[bytes]; }
  void free_device(void* data, size_t /*bytes*/) override { delete[] static_cast<uint8_t*>(data); }
  std::string copy_device(void* dest, const void* src, size_t bytes) override {
    std::memcpy(dest, src, bytes);
    return {};
  }

 private:
  static constexpr uint64_t kMagic = 0x686f737464657669ull;
  DeviceCounters* counters_;
};

class HostDeviceKind final : public ChannelKind {
 public:
  explicit HostDeviceKind(DeviceCounters* counters) : counters_(counters) {}
  const char* name() const override { return "host_device"; }
  bool can_connect(const std::string& a, const std::string& b) const override { return a == b; }
  ChannelTable connect(Store& store, int rank, int size, const std::vector<bool>& peers, int first,
                       Deadline deadline) const override {
    auto links = shm::link_peers(store, rank, size, peers, first, size_t{1} << 16, deadline);
    ChannelTable table(static_cast<size_t>(size));
    for (int p = 0; p < size; ++p) {
      if (!peers[p]) continue;
      table[p].push_back(std::make_unique<HostDeviceChannel>(std::move(links[p]), counters_));
    }
    return table;
  }

 private:
  DeviceCounters* counters_;
};

inline std::unique_ptr<Comm> connect_host_device(std::shared_ptr<Store> store, int rank, int size,
                                                 DeviceCounters* counters) {
  ChannelKinds kinds;
  kinds.push_back(std::make_unique<HostDeviceKind>(counters));
  return connect_comm(std::move(store), rank, size, std::move(kinds));
}

// DeviceOps over host memory: the CPU kernels, memcpy and the heap.
class HostDeviceOps final : public coll::DeviceOps {
 public:
  void* allocate(size_t bytes) override { return new uint8_t[bytes]; }
  void release(void* data, size_t /*bytes*/) override { delete[] static_cast<uint8_t*>(data); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void reduce(void* dst, const void* a, const void* b, size_t count, DType dtype,
              ReduceOp op) override {
    ++reductions;
    tdist::core::reduce(dst, a, b, count, dtype, op);
  }
  void premultiply(void* data, size_t count, DType dtype, ReduceOp op) override {
    tdist::core::premultiply(data, count, dtype, op);
  }
  void finish(void* data, size_t count, DType dtype, ReduceOp op, int world_size) override {
    tdist::core::finish(data, count, dtype, op, world_size);
  }
  int reductions = 0;
};

}  // namespace tdist::transport::testing
