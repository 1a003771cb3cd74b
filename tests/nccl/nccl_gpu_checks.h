// The checks of nccl_gpu_test: every collective x dtype (x reduce op, in place and not) on
// device buffers of a ProcessGroup against a host reference (cudaMemcpy in and out),
// point-to-point, async Work and sub-groups, as one sequence of calls that every rank of
// the group makes in the same order. Failures are collected in a Report (a worker process
// runs them without gtest). Test-only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "pg/pg_reduce_ref.h"
#include "pg/pg_test_util.h"
#include "tdist/error.h"
#include "tdist/process_group.h"

namespace tdist::nccl_gpu_test {

using pg_test::case_name;
using pg_test::check_reduction;
using pg_test::fill_inputs;
using pg_test::fill_pattern;
using pg_test::ops_for;
using pg_test::pattern_mismatch;

// Failures of one rank's checks (gtest is not running in a worker process).
struct Report {
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what) {
    if (!ok && failures.size() < 50) failures.push_back(what);
  }
};

inline void cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
  }
}

// `bytes` of device memory (at least 1, so a count of 0 still has a valid pointer).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cuda(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc");
    cuda(cudaMemset(ptr_, 0xEE, bytes == 0 ? 1 : bytes), "cudaMemset");
  }
  explicit DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  void upload(const std::vector<uint8_t>& host) {
    cuda(cudaMemcpy(ptr_, host.data(), host.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> host(bytes_);
    cuda(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

inline std::vector<uint8_t> pattern(size_t bytes, uint64_t seed, int src, int dst) {
  std::vector<uint8_t> out(bytes);
  fill_pattern(out.data(), bytes, seed, src, dst);
  return out;
}

inline std::vector<uint8_t> inputs(DType t, ReduceOp op, int rank, size_t count, size_t first,
                                   uint64_t seed) {
  std::vector<uint8_t> out(count * dtype_size(t));
  fill_inputs(t, op, rank, out.data(), count, first, seed);
  return out;
}

inline bool bitwise(ReduceOp op) {
  return op.kind == ReduceOpKind::kBand || op.kind == ReduceOpKind::kBor ||
         op.kind == ReduceOpKind::kBxor;
}

inline constexpr size_t kCounts[] = {1, 3, 1023, 4099};

// `bitwise_ops`: the group reduces with band/bor/bxor (cuda_ipc); else it must refuse them
// (NCCL lacks them).
inline void check_reductions(ProcessGroup& pg, DType t, size_t n, uint64_t& seed, Report& rep,
                             bool bitwise_ops = false) {
  const int r = pg.rank();
  const int w = pg.size();
  const size_t es = dtype_size(t);
  for (ReduceOp op : ops_for(t)) {
    if (bitwise(op) && !bitwise_ops) {
      DeviceBuffer buf(n * es);
      bool refused = false;
      try {
        pg.all_reduce(buf.get(), n, t, op);
      } catch (const InvalidArgument& e) {
        refused = std::string(e.what()).find(reduce_op_name(op.kind)) != std::string::npos;
      }
      rep.expect(refused, "all_reduce " + case_name(t, op, n, true) + ": not refused by name");
      continue;
    }
    for (bool in_place : {true, false}) {
      const std::string name = case_name(t, op, n, in_place);
      ++seed;
      // all_reduce
      DeviceBuffer send(inputs(t, op, r, n, 0, seed));
      DeviceBuffer recv(n * es);
      uint8_t* out = in_place ? send.get() : recv.get();
      pg.all_reduce(send.get(), out, n, t, op)->wait();
      std::vector<uint8_t> got = in_place ? send.download() : recv.download();
      std::string bad = check_reduction(t, op, w, got.data(), n, 0, seed);
      rep.expect(bad.empty(), "all_reduce " + name + ": " + bad);
      // reduce to the last rank
      ++seed;
      const int root = w - 1;
      DeviceBuffer rsend(inputs(t, op, r, n, 0, seed));
      DeviceBuffer rrecv(n * es);
      uint8_t* rout = in_place ? rsend.get() : rrecv.get();
      pg.reduce(rsend.get(), rout, n, t, op, root)->wait();
      if (r == root) {
        got = in_place ? rsend.download() : rrecv.download();
        bad = check_reduction(t, op, w, got.data(), n, 0, seed);
        rep.expect(bad.empty(), "reduce " + name + ": " + bad);
      }
      // reduce_scatter: rank r gets block r (in place: recv is send's block r)
      ++seed;
      const size_t all = n * static_cast<size_t>(w);
      DeviceBuffer ssend(inputs(t, op, r, all, 0, seed));
      DeviceBuffer srecv(n * es);
      uint8_t* sout = in_place ? ssend.get() + n * es * static_cast<size_t>(r) : srecv.get();
      pg.reduce_scatter(ssend.get(), sout, n, t, op)->wait();
      got = in_place ? ssend.download() : srecv.download();
      const uint8_t* mine = in_place ? got.data() + n * es * static_cast<size_t>(r) : got.data();
      bad = check_reduction(t, op, w, mine, n, n * static_cast<size_t>(r), seed);
      rep.expect(bad.empty(), "reduce_scatter " + name + ": " + bad);
    }
  }
}

inline void check_data_movement(ProcessGroup& pg, DType t, size_t n, uint64_t& seed, Report& rep) {
  const int r = pg.rank();
  const int w = pg.size();
  const auto W = static_cast<size_t>(w);
  const size_t b = n * dtype_size(t);
  const std::string name = std::string(dtype_name(t)) + "/n=" + std::to_string(n);
  auto expect_block = [&](const std::vector<uint8_t>& got, size_t offset, size_t bytes, uint64_t s,
                          int src, int dst, const std::string& what) {
    const int64_t at = pattern_mismatch(got.data() + offset, bytes, s, src, dst);
    rep.expect(at < 0, what + " " + name + ": block from rank " + std::to_string(src) +
                           " differs at byte " + std::to_string(at));
  };
  for (int root = 0; root < w; root += std::max(1, w - 1)) {
    // broadcast
    ++seed;
    DeviceBuffer data(r == root ? pattern(b, seed, root, 0) : std::vector<uint8_t>(b, 0));
    pg.broadcast(data.get(), n, t, root)->wait();
    expect_block(data.download(), 0, b, seed, root, 0, "broadcast");
    // gather (root's own block from its send)
    ++seed;
    DeviceBuffer gsend(pattern(b, seed, r, root));
    DeviceBuffer grecv(b * W);
    pg.gather(gsend.get(), grecv.get(), n, t, root)->wait();
    if (r == root) {
      const std::vector<uint8_t> got = grecv.download();
      for (int p = 0; p < w; ++p) expect_block(got, b * p, b, seed, p, root, "gather");
    }
    // scatter
    ++seed;
    std::vector<uint8_t> blocks(b * W);
    for (int p = 0; p < w; ++p) fill_pattern(blocks.data() + b * p, b, seed, root, p);
    DeviceBuffer ssend(r == root ? blocks : std::vector<uint8_t>(b * W, 0));
    DeviceBuffer srecv(b);
    pg.scatter(ssend.get(), srecv.get(), n, t, root)->wait();
    expect_block(srecv.download(), 0, b, seed, root, r, "scatter");
  }
  for (bool in_place : {false, true}) {
    const std::string how = in_place ? "in place" : "out of place";
    // all_gather
    ++seed;
    DeviceBuffer agrecv(b * W);
    DeviceBuffer agsend(pattern(b, seed, r, 0));
    if (in_place) {
      cuda(cudaMemcpy(agrecv.get() + b * r, agsend.get(), b, cudaMemcpyDeviceToDevice), "copy");
    }
    pg.all_gather(in_place ? agrecv.get() + b * r : agsend.get(), agrecv.get(), n, t)->wait();
    std::vector<uint8_t> got = agrecv.download();
    for (int p = 0; p < w; ++p) expect_block(got, b * p, b, seed, p, 0, "all_gather " + how);
    // all_to_all
    ++seed;
    std::vector<uint8_t> mine(b * W);
    for (int p = 0; p < w; ++p) fill_pattern(mine.data() + b * p, b, seed, r, p);
    DeviceBuffer a2a(mine);
    DeviceBuffer a2arecv(b * W);
    uint8_t* out = in_place ? a2a.get() : a2arecv.get();
    pg.all_to_all(a2a.get(), out, n, t)->wait();
    got = in_place ? a2a.download() : a2arecv.download();
    for (int p = 0; p < w; ++p) expect_block(got, b * p, b, seed, p, r, "all_to_all " + how);
  }
  // all_gatherv: rank p gives n + p elements
  ++seed;
  std::vector<size_t> counts(W);
  for (int p = 0; p < w; ++p) counts[p] = n + static_cast<size_t>(p);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t es = dtype_size(t);
  DeviceBuffer vsend(pattern(counts[r] * es, seed, r, 0));
  DeviceBuffer vrecv(total * es);
  pg.all_gatherv(vsend.get(), counts[r], vrecv.get(), counts, t)->wait();
  std::vector<uint8_t> got = vrecv.download();
  size_t off = 0;
  for (int p = 0; p < w; ++p) {
    expect_block(got, off * es, counts[p] * es, seed, p, 0, "all_gatherv");
    off += counts[p];
  }
  // all_to_allv: rank r sends n + r + p elements to rank p
  ++seed;
  std::vector<size_t> sc(W), rc(W);
  for (int p = 0; p < w; ++p) {
    sc[p] = n + static_cast<size_t>(r + p);
    rc[p] = n + static_cast<size_t>(p + r);
  }
  const size_t stotal = std::accumulate(sc.begin(), sc.end(), size_t{0});
  std::vector<uint8_t> vs(stotal * es);
  off = 0;
  for (int p = 0; p < w; ++p) {
    fill_pattern(vs.data() + off * es, sc[p] * es, seed, r, p);
    off += sc[p];
  }
  DeviceBuffer a2avs(vs);
  DeviceBuffer a2avr(std::accumulate(rc.begin(), rc.end(), size_t{0}) * es);
  pg.all_to_allv(a2avs.get(), sc, a2avr.get(), rc, t)->wait();
  got = a2avr.download();
  off = 0;
  for (int p = 0; p < w; ++p) {
    expect_block(got, off * es, rc[p] * es, seed, p, r, "all_to_allv");
    off += rc[p];
  }
}

// Point-to-point around the ring and a batch both ways (two ranks or more).
inline void check_p2p(ProcessGroup& pg, uint64_t& seed, Report& rep) {
  const int r = pg.rank();
  const int w = pg.size();
  if (w < 2) return;
  const size_t bytes = 4096 * 4;
  ++seed;
  const int next = (r + 1) % w;
  const int prev = (r + w - 1) % w;
  DeviceBuffer out(pattern(bytes, seed, r, next));
  DeviceBuffer in(bytes);
  std::vector<P2POp> ops = {{P2POp::Kind::kSend, out.get(), bytes / 4, DType::kF32, next},
                            {P2POp::Kind::kRecv, in.get(), bytes / 4, DType::kF32, prev}};
  pg.batch_isend_irecv(ops)->wait();
  rep.expect(pattern_mismatch(in.download().data(), bytes, seed, prev, r) < 0,
             "batch_isend_irecv around the ring");
  ++seed;
  if (r == 0) {
    DeviceBuffer msg(pattern(bytes, seed, 0, 1));
    pg.isend(msg.get(), bytes, DType::kU8, 1)->wait();
  } else if (r == 1) {
    DeviceBuffer msg(bytes);
    pg.irecv(msg.get(), bytes, DType::kU8, 0)->wait();
    rep.expect(pattern_mismatch(msg.download().data(), bytes, seed, 0, 1) < 0, "isend/irecv");
  }
}

// Many operations queued before any wait, completed in order; barrier; is_completed.
inline void check_async(ProcessGroup& pg, uint64_t& seed, Report& rep) {
  const size_t n = 1 << 16;
  ++seed;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 16; ++i) {
    bufs.push_back(std::make_unique<DeviceBuffer>(
        inputs(DType::kF32, ReduceOpKind::kSum, pg.rank(), n, 0, seed + i)));
    works.push_back(pg.all_reduce(bufs.back()->get(), n, DType::kF32, ReduceOpKind::kSum));
  }
  works.push_back(pg.barrier());
  for (auto& work : works) work->wait();
  for (auto& work : works) rep.expect(work->is_completed() && work->is_success(), "async Work");
  for (int i = 0; i < 16; ++i) {
    const std::vector<uint8_t> got = bufs[i]->download();
    const std::string bad =
        check_reduction(DType::kF32, ReduceOpKind::kSum, pg.size(), got.data(), n, 0, seed + i);
    rep.expect(bad.empty(), "async all_reduce " + std::to_string(i) + ": " + bad);
  }
  seed += 16;
}

// A sub-group of the even ranks and a split by parity run an all_reduce each.
inline void check_subgroups(ProcessGroup& pg, uint64_t& seed, Report& rep) {
  std::vector<int> evens;
  for (int p = 0; p < pg.size(); p += 2) evens.push_back(p);
  std::shared_ptr<ProcessGroup> sub = pg.new_group(evens);
  std::shared_ptr<ProcessGroup> half = pg.split(pg.rank() % 2, pg.rank());
  rep.expect((sub != nullptr) == (pg.rank() % 2 == 0), "new_group membership");
  rep.expect(half != nullptr && half->backend_name() == pg.backend_name(),
             "split gives a group of the same backend");
  for (ProcessGroup* g : {sub.get(), half.get()}) {
    if (g == nullptr) continue;
    ++seed;
    const size_t n = 257;
    DeviceBuffer buf(inputs(DType::kI64, ReduceOpKind::kSum, g->rank(), n, 0, seed));
    g->all_reduce(buf.get(), n, DType::kI64, ReduceOpKind::kSum)->wait();
    const std::vector<uint8_t> got = buf.download();
    const std::string bad =
        check_reduction(DType::kI64, ReduceOpKind::kSum, g->size(), got.data(), n, 0, seed);
    rep.expect(bad.empty(), "sub-group all_reduce: " + bad);
  }
}

// Every check on `pg` (the same calls in the same order on every rank).
inline Report check_all(ProcessGroup& pg, bool bitwise_ops = false) {
  Report rep;
  uint64_t seed = 1000;
  for (DType t : kAllDTypes) {
    for (size_t n : kCounts) {
      check_reductions(pg, t, n, seed, rep, bitwise_ops);
      check_data_movement(pg, t, n, seed, rep);
    }
    // A count of 0 completes.
    DeviceBuffer none(0);
    pg.all_reduce(none.get(), 0, t, ReduceOpKind::kMax)->wait();
    pg.all_gather(none.get(), none.get(), 0, t)->wait();
  }
  check_p2p(pg, seed, rep);
  check_async(pg, seed, rep);
  check_subgroups(pg, seed, rep);
  pg.barrier()->wait();
  return rep;
}

}  // namespace tdist::nccl_gpu_test
