// NcclProcessGroup's collectives (nccl_group.h): NCCL's own where it has one, grouped
// ncclSend/ncclRecv for the rest.
#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "backends/nccl/nccl_group.h"
#include "backends/nccl/nccl_runtime.h"
#include "core/reduce_kernels.h"
#include "tdist/error.h"

namespace tdist::backends::nccl {
namespace {

using Transfer = Enqueuer::Transfer;

size_t bytes_of(size_t count, DType dtype) { return count * dtype_size(dtype); }

const uint8_t* at(const void* base, size_t count, DType dtype) {
  return static_cast<const uint8_t*>(base) + bytes_of(count, dtype);
}
uint8_t* at(void* base, size_t count, DType dtype) {
  return static_cast<uint8_t*>(base) + bytes_of(count, dtype);
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  return a_bytes != 0 && b_bytes != 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Offsets of back-to-back blocks of `counts` elements.
std::vector<size_t> offsets(std::span<const size_t> counts) {
  std::vector<size_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

// premul_sum's factor as one element of `dtype` (f16/bf16 rounded as the CPU kernels do).
void premul_scalar(DType dtype, ReduceOp op, uint8_t (&out)[8]) {
  std::memset(out, 0, sizeof(out));
  switch (dtype) {
    case DType::kF32: {
      const auto v = static_cast<float>(op.scale);
      std::memcpy(out, &v, sizeof(v));
      return;
    }
    case DType::kF64:
      std::memcpy(out, &op.scale, sizeof(op.scale));
      return;
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t one = dtype == DType::kF16 ? 0x3C00 : 0x3F80;  // 1.0
      std::memcpy(out, &one, sizeof(one));
      core::premultiply(out, 1, dtype, op);  // 1.0 * scale, rounded to the dtype
      return;
    }
    default:
      TDIST_THROW(InvalidArgument, "premul_sum: dtype ", dtype_name(dtype), " is not floating");
  }
}

// Runs `call(red)` with NCCL's op for `op` on `dtype`: a premul_sum op is made for the
// call and destroyed after it (NCCL allows that once the call returned).
template <typename Call>
void with_op(const Enqueuer& e, const char* what, ReduceOp op, DType dtype, Call call) {
  if (op.kind != ReduceOpKind::kPremulSum) {
    call(nccl_reduce_op(what, op.kind, dtype));
    return;
  }
  uint8_t scalar[8];
  premul_scalar(dtype, op, scalar);
  ncclRedOp_t red{};
  e.await(ncclRedOpCreatePreMulSum(&red, scalar, nccl_datatype(dtype), ncclScalarHostImmediate,
                                   e.comm()),
          "ncclRedOpCreatePreMulSum");
  try {
    call(red);
  } catch (...) {
    ncclRedOpDestroy(red, e.comm());
    throw;
  }
  ncclRedOpDestroy(red, e.comm());
}

// A stream-ordered device copy of a send buffer that overlaps the receive buffer, released
// on the stream after the operation that reads it was enqueued (its scope's end).
class SendCopy {
 public:
  SendCopy(const Enqueuer& e, const void* send, size_t bytes, bool needed)
      : e_(e), ptr_(needed ? e.copy_of(send, bytes) : nullptr), send_(send) {}
  ~SendCopy() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, e_.stream());
  }
  SendCopy(const SendCopy&) = delete;
  SendCopy& operator=(const SendCopy&) = delete;
  const void* get() const { return ptr_ != nullptr ? ptr_ : send_; }

 private:
  const Enqueuer& e_;
  void* ptr_;
  const void* send_;
};

// Checks the op before anything is numbered-and-launched (InvalidArgument for bitwise).
void check_op(const char* what, ReduceOp op, DType dtype) {
  if (op.kind != ReduceOpKind::kPremulSum) nccl_reduce_op(what, op.kind, dtype);
}

}  // namespace

WorkPtr NcclProcessGroup::do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype, ReduceOp op) {
  check_buffer("all_reduce", "send", send, count);
  check_buffer("all_reduce", "recv", recv, count);
  check_op("all_reduce", op, dtype);
  return launch("all_reduce", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    with_op(e, "all_reduce", op, dtype, [&](ncclRedOp_t red) {
      e.await(ncclAllReduce(send, recv, count, nccl_datatype(dtype), red, e.comm(), e.stream()),
              "ncclAllReduce");
    });
  });
}

WorkPtr NcclProcessGroup::do_broadcast(uint64_t seq, void* data, size_t count, DType dtype,
                                       int root) {
  check_buffer("broadcast", "data", data, count);
  return launch("broadcast", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    e.await(ncclBroadcast(data, data, count, nccl_datatype(dtype), root, e.comm(), e.stream()),
            "ncclBroadcast");
  });
}

WorkPtr NcclProcessGroup::do_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, ReduceOp op, int root) {
  check_buffer("reduce", "send", send, count);
  if (rank() == root) check_buffer("reduce", "recv", recv, count);
  check_op("reduce", op, dtype);
  return launch("reduce", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    with_op(e, "reduce", op, dtype, [&](ncclRedOp_t red) {
      e.await(ncclReduce(send, recv, count, nccl_datatype(dtype), red, root, e.comm(), e.stream()),
              "ncclReduce");
    });
  });
}

WorkPtr NcclProcessGroup::do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  check_buffer("all_gather", "send", send, count);
  check_buffer("all_gather", "recv", recv, count);
  const size_t all = count * static_cast<size_t>(size());
  const void* mine = at(recv, count * static_cast<size_t>(rank()), dtype);
  // NCCL's in-place form is send at this rank's block; any other overlap goes from a copy.
  const bool copy =
      send != mine && overlap(send, bytes_of(count, dtype), recv, bytes_of(all, dtype));
  return launch("all_gather", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    const SendCopy src(e, send, bytes_of(count, dtype), copy);
    e.await(ncclAllGather(src.get(), recv, count, nccl_datatype(dtype), e.comm(), e.stream()),
            "ncclAllGather");
  });
}

WorkPtr NcclProcessGroup::do_reduce_scatter(uint64_t seq, const void* send, void* recv,
                                            size_t count, DType dtype, ReduceOp op) {
  check_buffer("reduce_scatter", "send", send, count);
  check_buffer("reduce_scatter", "recv", recv, count);
  check_op("reduce_scatter", op, dtype);
  const size_t all = count * static_cast<size_t>(size());
  const void* mine = at(send, count * static_cast<size_t>(rank()), dtype);
  const bool copy =
      recv != mine && overlap(send, bytes_of(all, dtype), recv, bytes_of(count, dtype));
  return launch("reduce_scatter", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    const SendCopy src(e, send, bytes_of(all, dtype), copy);
    with_op(e, "reduce_scatter", op, dtype, [&](ncclRedOp_t red) {
      e.await(ncclReduceScatter(src.get(), recv, count, nccl_datatype(dtype), red, e.comm(),
                                e.stream()),
              "ncclReduceScatter");
    });
  });
}

WorkPtr NcclProcessGroup::do_all_gatherv(uint64_t seq, const void* send, size_t send_count,
                                         void* recv, std::span<const size_t> recv_counts,
                                         DType dtype) {
  check_buffer("all_gatherv", "send", send, send_count);
  check_buffer("all_gatherv", "recv", recv,
               std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}));
  const std::vector<size_t> counts(recv_counts.begin(), recv_counts.end());
  const std::vector<size_t> offs = offsets(recv_counts);
  const int me = rank();
  const int world = size();
  return launch("all_gatherv", seq, [=](Enqueuer& e) {
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    for (int p = 0; p < world; ++p) {
      if (p == me) continue;
      const auto i = static_cast<size_t>(p);
      sends.push_back({p, const_cast<void*>(send), send_count});
      recvs.push_back({p, at(recv, offs[i], dtype), counts[i]});
    }
    e.exchange(sends, recvs, dtype, send, at(recv, offs[static_cast<size_t>(me)], dtype),
               bytes_of(send_count, dtype));
  });
}

WorkPtr NcclProcessGroup::do_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, int root) {
  check_buffer("gather", "send", send, count);
  if (rank() == root) check_buffer("gather", "recv", recv, count);
  const int me = rank();
  const int world = size();
  return launch("gather", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    if (me != root) {
      sends.push_back({root, const_cast<void*>(send), count});
      e.exchange(sends, recvs, dtype);
      return;
    }
    for (int p = 0; p < world; ++p) {
      if (p != me) recvs.push_back({p, at(recv, count * static_cast<size_t>(p), dtype), count});
    }
    e.exchange(sends, recvs, dtype, send, at(recv, count * static_cast<size_t>(me), dtype),
               bytes_of(count, dtype));
  });
}

WorkPtr NcclProcessGroup::do_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                     DType dtype, int root) {
  check_buffer("scatter", "recv", recv, count);
  if (rank() == root) check_buffer("scatter", "send", send, count);
  const int me = rank();
  const int world = size();
  return launch("scatter", seq, [=](Enqueuer& e) {
    if (count == 0) return;
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    if (me != root) {
      recvs.push_back({root, recv, count});
      e.exchange(sends, recvs, dtype);
      return;
    }
    for (int p = 0; p < world; ++p) {
      if (p != me) {
        sends.push_back(
            {p, const_cast<uint8_t*>(at(send, count * static_cast<size_t>(p), dtype)), count});
      }
    }
    e.exchange(sends, recvs, dtype, at(send, count * static_cast<size_t>(me), dtype), recv,
               bytes_of(count, dtype));
  });
}

namespace {

// all_to_allv's enqueue (all_to_all's too, with equal counts).
std::function<void(Enqueuer&)> all_to_allv_enqueue(const void* send,
                                                   std::span<const size_t> send_counts, void* recv,
                                                   std::span<const size_t> recv_counts, DType dtype,
                                                   int me) {
  const std::vector<size_t> scounts(send_counts.begin(), send_counts.end());
  const std::vector<size_t> rcounts(recv_counts.begin(), recv_counts.end());
  const std::vector<size_t> soffs = offsets(send_counts);
  const std::vector<size_t> roffs = offsets(recv_counts);
  const size_t stotal = std::accumulate(scounts.begin(), scounts.end(), size_t{0});
  const size_t rtotal = std::accumulate(rcounts.begin(), rcounts.end(), size_t{0});
  // An overlapping send (the in-place form) goes from a copy.
  const bool copy = overlap(send, bytes_of(stotal, dtype), recv, bytes_of(rtotal, dtype));
  return [=](Enqueuer& e) {
    const SendCopy src(e, send, bytes_of(stotal, dtype), copy);
    std::vector<Transfer> sends;
    std::vector<Transfer> recvs;
    for (size_t p = 0; p < scounts.size(); ++p) {
      if (p == static_cast<size_t>(me)) continue;
      const int peer = static_cast<int>(p);
      sends.push_back({peer, const_cast<uint8_t*>(at(src.get(), soffs[p], dtype)), scounts[p]});
      recvs.push_back({peer, at(recv, roffs[p], dtype), rcounts[p]});
    }
    const auto m = static_cast<size_t>(me);
    e.exchange(sends, recvs, dtype, at(src.get(), soffs[m], dtype), at(recv, roffs[m], dtype),
               bytes_of(std::min(scounts[m], rcounts[m]), dtype));
  };
}

}  // namespace

WorkPtr NcclProcessGroup::do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  check_buffer("all_to_all", "send", send, count);
  check_buffer("all_to_all", "recv", recv, count);
  const std::vector<size_t> counts(static_cast<size_t>(size()), count);
  return launch("all_to_all", seq, all_to_allv_enqueue(send, counts, recv, counts, dtype, rank()));
}

WorkPtr NcclProcessGroup::do_all_to_allv(uint64_t seq, const void* send,
                                         std::span<const size_t> send_counts, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype) {
  check_buffer("all_to_allv", "send", send,
               std::accumulate(send_counts.begin(), send_counts.end(), size_t{0}));
  check_buffer("all_to_allv", "recv", recv,
               std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}));
  return launch("all_to_allv", seq,
                all_to_allv_enqueue(send, send_counts, recv, recv_counts, dtype, rank()));
}

WorkPtr NcclProcessGroup::do_barrier(uint64_t seq) {
  void* scratch = scratch_;
  return launch("barrier", seq, [=](Enqueuer& e) {
    e.await(ncclAllReduce(scratch, scratch, 1, ncclFloat32, ncclSum, e.comm(), e.stream()),
            "ncclAllReduce (barrier)");
  });
}

}  // namespace tdist::backends::nccl
