// The core's device-memory path (comm.h's isend_device/irecv_device, core/wire.h's device
// rendezvous) and the algorithms' (collectives/device_ops.h), without a GPU: ranks are
// threads over HostDeviceChannel, whose "device memory" is host memory (fake_device.h).
// Checks: payloads of every size arrive, posted before or after their message; every
// descriptor a sender exported is released once its receiver answered; receives from any
// source take device messages; a device message
// meeting a host receive (and the reverse) is a DesyncError of that receive only; Comms
// without device channels refuse device memory; and every collective of a CommProcessGroup
// given a device (comm_device.h) computes what the host path computes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/comm/comm_group.h"
#include "support/error_of.h"
#include "tdist/error.h"
#include "tdist/hash_store.h"
#include "transport/comm_test_util.h"
#include "transport/fake_device.h"

namespace tdist::transport::testing {
namespace {

const Deadline kNever = Deadline::never();

TEST(DeviceMessageTest, PayloadsOfEverySizeArriveAndEveryDescriptorIsReleased) {
  DeviceCounters counters;
  const std::vector<size_t> sizes = {1, 31, 4096, 70000, size_t{3} << 20, size_t{5} << 20};
  run_comm_ranks(
      2,
      [&](std::shared_ptr<Store> store, int rank, int world) {
        return connect_host_device(std::move(store), rank, world, &counters);
      },
      [&](Comm& comm) {
        ASSERT_TRUE(comm.carries_device(1 - comm.rank()));
        for (size_t i = 0; i < sizes.size(); ++i) {
          const std::vector<uint8_t> sent = pattern(i + 1, sizes[i]);
          const uint64_t tag = p2p_tag(static_cast<uint32_t>(i));
          if (comm.rank() == 0) {
            comm.isend_device(1, tag, sent.data(), sent.size())->wait(kNever);
          } else {
            std::vector<uint8_t> got(sizes[i]);
            // Odd ones: the receive is posted after the message arrived (unexpected): taken
            // at once below 1 MiB, waiting for the receive from there (wire.h).
            if (i % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            comm.irecv_device(0, tag, got.data(), got.size())->wait(kNever);
            EXPECT_EQ(got, sent) << sizes[i] << " bytes";
          }
        }
      });
  EXPECT_EQ(counters.exported.load(), static_cast<int>(sizes.size()));
  EXPECT_EQ(counters.imported.load(), static_cast<int>(sizes.size()));
  EXPECT_EQ(counters.released.load(), static_cast<int>(sizes.size()));
}

// Ranks 1 and 2 send rank 0 device messages on one tag; rank 0 receives them from any
// source, posted before they arrive and after (taken at once into the channel's device
// memory below 1 MiB, waiting for the receive from there).
TEST(DeviceMessageTest, ReceivesFromAnySourceTakeDeviceMessages) {
  DeviceCounters counters;
  const std::vector<size_t> sizes = {70000, size_t{3} << 20};
  run_comm_ranks(
      3,
      [&](std::shared_ptr<Store> store, int rank, int world) {
        return connect_host_device(std::move(store), rank, world, &counters);
      },
      [&](Comm& comm) {
        for (size_t i = 0; i < sizes.size() * 2; ++i) {
          const size_t bytes = sizes[i % sizes.size()];
          const uint64_t tag = p2p_tag(static_cast<uint32_t>(i));
          if (comm.rank() != 0) {
            const std::vector<uint8_t> sent = pattern(comm.rank() * 10 + i, bytes);
            comm.isend_device(0, tag, sent.data(), bytes)->wait(kNever);
            continue;
          }
          if (i >= sizes.size()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(bytes));
          RequestPtr a = comm.irecv_any_device(tag, got[0].data(), bytes);
          RequestPtr b = comm.irecv_any_device(tag, got[1].data(), bytes);
          a->wait(kNever);
          b->wait(kNever);
          EXPECT_EQ(a->source() + b->source(), 3) << bytes << " bytes";
          EXPECT_EQ(got[0], pattern(a->source() * 10 + i, bytes)) << bytes << " bytes";
          EXPECT_EQ(got[1], pattern(b->source() * 10 + i, bytes)) << bytes << " bytes";
        }
      });
  EXPECT_EQ(counters.released.load(), counters.exported.load());
}

TEST(DeviceMessageTest, AnEmptyDeviceMessageIsAnOrdinaryOne) {
  DeviceCounters counters;
  run_comm_ranks(
      2,
      [&](std::shared_ptr<Store> store, int rank, int world) {
        return connect_host_device(std::move(store), rank, world, &counters);
      },
      [&](Comm& comm) {
        if (comm.rank() == 0) {
          comm.isend_device(1, p2p_tag(7), nullptr, 0)->wait(kNever);
        } else {
          comm.irecv_device(0, p2p_tag(7), nullptr, 0)->wait(kNever);
        }
      });
  EXPECT_EQ(counters.exported.load(), 0);
}

TEST(DeviceMessageTest, MemoryKindsThatDisagreeFailTheReceiveOnly) {
  DeviceCounters counters;
  run_comm_ranks(
      2,
      [&](std::shared_ptr<Store> store, int rank, int world) {
        return connect_host_device(std::move(store), rank, world, &counters);
      },
      [&](Comm& comm) {
        std::vector<uint8_t> buf(2048, 1);
        if (comm.rank() == 0) {
          comm.isend_device(1, p2p_tag(1), buf.data(), buf.size())->wait(kNever);
          comm.isend(1, p2p_tag(2), buf.data(), buf.size())->wait(kNever);
          comm.isend_device(1, p2p_tag(3), buf.data(), buf.size())->wait(kNever);
        } else {
          const std::string a = error_of<DesyncError>(
              [&] { comm.irecv(0, p2p_tag(1), buf.data(), buf.size())->wait(kNever); });
          EXPECT_NE(a.find("is in device memory, but the receive posted for it is in host"),
                    std::string::npos)
              << a;
          const std::string b = error_of<DesyncError>(
              [&] { comm.irecv_device(0, p2p_tag(2), buf.data(), buf.size())->wait(kNever); });
          EXPECT_NE(b.find("is in host memory, but the receive posted for it is in device"),
                    std::string::npos)
              << b;
          // The Comm goes on.
          std::vector<uint8_t> got(buf.size(), 0);
          comm.irecv_device(0, p2p_tag(3), got.data(), got.size())->wait(kNever);
          EXPECT_EQ(got, std::vector<uint8_t>(buf.size(), 1));
        }
      });
  EXPECT_EQ(counters.released.load(), counters.exported.load());
}

TEST(DeviceMessageTest, ACommWithoutDeviceChannelsRefusesDeviceMemory) {
  run_comm_ranks(
      2,
      [](std::shared_ptr<Store> store, int rank, int world) {
        return connect_shm_comm(std::move(store), rank, world);
      },
      [](Comm& comm) {
        uint8_t byte = 0;
        EXPECT_FALSE(comm.carries_device(1 - comm.rank()));
        const std::string e = error_of<InvalidArgument>(
            [&] { comm.isend_device(1 - comm.rank(), p2p_tag(0), &byte, 1); });
        EXPECT_NE(e.find("no channel of this Comm carries device memory"), std::string::npos) << e;
        error_of<InvalidArgument>(
            [&] { comm.irecv_device(1 - comm.rank(), p2p_tag(0), &byte, 1); });
      });
}

// A CommDevice whose "device" is the host (fake_device.h).
class HostCommDevice final : public backends::CommDevice {
 public:
  MemoryKind memory() const override { return MemoryKind::kCuda; }
  coll::DeviceOps* ops() override { return &ops_; }
  void order_after_caller() override {}
  std::shared_ptr<void> complete() override { return nullptr; }
  HostDeviceOps ops_;
};

// Every element of a rank's input: small integers, exact in every dtype tested.
double input(int rank, size_t i) {
  return static_cast<double>((rank + static_cast<int>(i)) % 3 + 1);
}

template <typename T>
std::vector<T> inputs(int rank, size_t count) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<T>(input(rank, i));
  return v;
}

template <typename T>
void check_collectives(ProcessGroup& pg, DType dtype, size_t count) {
  const int n = pg.size();
  const int r = pg.rank();
  const std::vector<T> mine = inputs<T>(r, count);
  // all_reduce sum and max, in place and out of place.
  std::vector<T> sum(count);
  pg.all_reduce(mine.data(), sum.data(), count, dtype, ReduceOpKind::kSum)->wait();
  std::vector<T> max = mine;
  pg.all_reduce(max.data(), count, dtype, ReduceOpKind::kMax)->wait();
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    double m = 0;
    for (int q = 0; q < n; ++q) {
      s += input(q, i);
      m = std::max(m, input(q, i));
    }
    ASSERT_EQ(sum[i], static_cast<T>(s)) << "all_reduce sum, element " << i;
    ASSERT_EQ(max[i], static_cast<T>(m)) << "all_reduce max, element " << i;
  }
  // reduce (min) to root 1, broadcast from root n-1.
  std::vector<T> low(count);
  pg.reduce(mine.data(), low.data(), count, dtype, ReduceOpKind::kMin, 1)->wait();
  if (r == 1) {
    for (size_t i = 0; i < count; ++i) {
      double m = 4;
      for (int q = 0; q < n; ++q) m = std::min(m, input(q, i));
      ASSERT_EQ(low[i], static_cast<T>(m)) << "reduce min, element " << i;
    }
  }
  std::vector<T> b = inputs<T>(r == n - 1 ? 7 : r, count);
  pg.broadcast(b.data(), count, dtype, n - 1)->wait();
  ASSERT_EQ(b, inputs<T>(7, count)) << "broadcast";
  // all_gather, reduce_scatter (sum), all_to_all, gather and scatter.
  std::vector<T> all(count * n);
  pg.all_gather(mine.data(), all.data(), count, dtype)->wait();
  for (int q = 0; q < n; ++q) {
    ASSERT_TRUE(std::equal(all.begin() + q * count, all.begin() + (q + 1) * count,
                           inputs<T>(q, count).begin()))
        << "all_gather block " << q;
  }
  const std::vector<T> wide = inputs<T>(r, count * n);
  std::vector<T> part(count);
  pg.reduce_scatter(wide.data(), part.data(), count, dtype, ReduceOpKind::kSum)->wait();
  for (size_t i = 0; i < count; ++i) {
    double s = 0;
    for (int q = 0; q < n; ++q) s += input(q, r * count + i);
    ASSERT_EQ(part[i], static_cast<T>(s)) << "reduce_scatter, element " << i;
  }
  std::vector<T> swapped(count * n);
  pg.all_to_all(wide.data(), swapped.data(), count, dtype)->wait();
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(swapped[q * count + i], static_cast<T>(input(q, r * count + i))) << "all_to_all";
    }
  }
  std::vector<T> in_place = wide;  // in place: the backend copies the input to device scratch
  pg.all_to_all(in_place.data(), in_place.data(), count, dtype)->wait();
  ASSERT_EQ(in_place, swapped) << "all_to_all in place";
  std::vector<T> gathered(r == 0 ? count * n : 0);
  pg.gather(mine.data(), gathered.data(), count, dtype, 0)->wait();
  if (r == 0) {
    for (int q = 0; q < n; ++q) {
      ASSERT_TRUE(std::equal(gathered.begin() + q * count, gathered.begin() + (q + 1) * count,
                             inputs<T>(q, count).begin()))
          << "gather block " << q;
    }
  }
  std::vector<T> piece(count);
  pg.scatter(wide.data(), piece.data(), count, dtype, 0)->wait();
  const std::vector<T> root_input = inputs<T>(0, count * n);
  ASSERT_TRUE(std::equal(piece.begin(), piece.end(), root_input.begin() + r * count)) << "scatter";
  // Point-to-point around the ring (device messages from the calling thread).
  std::vector<T> from_prev(count);
  WorkPtr sent = pg.isend(mine.data(), count, dtype, (r + 1) % n, 5);
  WorkPtr got = pg.irecv(from_prev.data(), count, dtype, (r + n - 1) % n, 5);
  sent->wait();
  got->wait();
  ASSERT_EQ(from_prev, inputs<T>((r + n - 1) % n, count)) << "isend/irecv";
  // From any source: only the previous rank sends this one.
  sent = pg.isend(mine.data(), count, dtype, (r + 1) % n, 6);
  got = pg.irecv_any(from_prev.data(), count, dtype, 6);
  sent->wait();
  got->wait();
  ASSERT_EQ(got->source_rank(), (r + n - 1) % n) << "irecv_any";
  pg.barrier()->wait();
}

TEST(DeviceMessageTest, EveryCollectiveOfADeviceGroupMatchesTheHostResult) {
  // Small chunks, so that the larger counts run several per step (a device group's chunk is
  // 32 MiB unless given: comm_device.h).
  ::setenv("TDIST_CHUNK_BYTES", "65536", 1);
  DeviceCounters counters;
  constexpr int kWorld = 3;
  auto store = std::make_shared<HashStore>();
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto device = std::make_shared<HostCommDevice>();
        backends::CommFactory factory = [&](std::shared_ptr<Store> s, int rank, int size,
                                            std::chrono::milliseconds) {
          return connect_host_device(std::move(s), rank, size, &counters);
        };
        auto pg = std::make_shared<backends::CommProcessGroup>("host_device", factory, store, r,
                                                               kWorld, std::chrono::seconds(60),
                                                               std::vector<int>{}, device);
        EXPECT_EQ(pg->memory_kinds(), memory_bit(MemoryKind::kCuda));
        // Sizes around the chunk size (several chunks, odd splits) and tiny ones.
        for (size_t count : {size_t{1}, size_t{5}, size_t{1000}, size_t{300001}}) {
          check_collectives<float>(*pg, DType::kF32, count);
          check_collectives<double>(*pg, DType::kF64, count);
          check_collectives<int32_t>(*pg, DType::kI32, count);
          check_collectives<int64_t>(*pg, DType::kI64, count);
          check_collectives<int8_t>(*pg, DType::kI8, count);
          check_collectives<uint8_t>(*pg, DType::kU8, count);
        }
        EXPECT_GT(device->ops_.reductions, 0);  // the device kernels did the reducing
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  ::unsetenv("TDIST_CHUNK_BYTES");
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EXPECT_GT(counters.exported.load(), 0);
  EXPECT_EQ(counters.released.load(), counters.exported.load());
}

}  // namespace
}  // namespace tdist::transport::testing
