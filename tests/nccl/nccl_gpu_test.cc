// The nccl backend on a GPU (CTest label `gpu`, run by scripts/gpu_check.sh only): every
// collective x dtype (x reduce op, in place and not) on device buffers against a host
// reference (cudaMemcpy in and out), point-to-point, sub-groups, async Work, abort (on
// every rank, through the failure notice) and a timeout. A world of one runs in this process; when
// the machine has two GPUs or more, the same checks run on min(devices, 4) ranks as processes (this
// binary with --worker, one device each through LOCAL_RANK, meeting through a FileStore); with one
// GPU that case skips, since NCCL refuses two ranks on one device. `--count-devices` prints the
// number of devices the CUDA runtime sees (scripts/gpu_check.sh's probe).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pg/pg_reduce_ref.h"
#include "pg/pg_test_util.h"
#include "support/spawn.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"
#include "tdist/process_group.h"

namespace tdist::nccl_gpu_test {
namespace {

using namespace std::chrono_literals;
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

void cuda(cudaError_t rc, const char* what) {
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

std::vector<uint8_t> pattern(size_t bytes, uint64_t seed, int src, int dst) {
  std::vector<uint8_t> out(bytes);
  fill_pattern(out.data(), bytes, seed, src, dst);
  return out;
}

std::vector<uint8_t> inputs(DType t, ReduceOp op, int rank, size_t count, size_t first,
                            uint64_t seed) {
  std::vector<uint8_t> out(count * dtype_size(t));
  fill_inputs(t, op, rank, out.data(), count, first, seed);
  return out;
}

bool bitwise(ReduceOp op) {
  return op.kind == ReduceOpKind::kBand || op.kind == ReduceOpKind::kBor ||
         op.kind == ReduceOpKind::kBxor;
}

constexpr size_t kCounts[] = {1, 3, 1023, 4099};

void check_reductions(ProcessGroup& pg, DType t, size_t n, uint64_t& seed, Report& rep) {
  const int r = pg.rank();
  const int w = pg.size();
  const size_t es = dtype_size(t);
  for (ReduceOp op : ops_for(t)) {
    if (bitwise(op)) {
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

void check_data_movement(ProcessGroup& pg, DType t, size_t n, uint64_t& seed, Report& rep) {
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
void check_p2p(ProcessGroup& pg, uint64_t& seed, Report& rep) {
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
void check_async(ProcessGroup& pg, uint64_t& seed, Report& rep) {
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
void check_subgroups(ProcessGroup& pg, uint64_t& seed, Report& rep) {
  std::vector<int> evens;
  for (int p = 0; p < pg.size(); p += 2) evens.push_back(p);
  std::shared_ptr<ProcessGroup> sub = pg.new_group(evens);
  std::shared_ptr<ProcessGroup> half = pg.split(pg.rank() % 2, pg.rank());
  rep.expect((sub != nullptr) == (pg.rank() % 2 == 0), "new_group membership");
  rep.expect(half != nullptr && half->backend_name() == "nccl", "split gives an nccl group");
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
Report check_all(ProcessGroup& pg) {
  Report rep;
  uint64_t seed = 1000;
  for (DType t : kAllDTypes) {
    for (size_t n : kCounts) {
      check_reductions(pg, t, n, seed, rep);
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

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

void require_gpu() {
  ASSERT_GT(device_count(), 0) << "no CUDA device: scripts/gpu_check.sh runs this only on a GPU";
}

TEST(NcclGpuWorld1, EveryCollectiveAndDtypeAgainstAHostReference) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  ASSERT_EQ(pg->backend_name(), "nccl");
  const Report rep = check_all(*pg);
  for (const std::string& f : rep.failures) ADD_FAILURE() << f;
}

TEST(NcclGpuWorld1, AbortFailsLaterOperationsWithPeerError) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  DeviceBuffer buf(1024);
  pg->all_reduce(buf.get(), 256, DType::kF32, ReduceOpKind::kSum)->wait();
  pg->abort();
  WorkPtr work = pg->all_reduce(buf.get(), 256, DType::kF32, ReduceOpKind::kSum);
  try {
    work->wait();
    FAIL() << "an all_reduce after abort succeeded";
  } catch (const PeerError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("rank 0/1 (nccl) all_reduce #1"), std::string::npos) << text;
    EXPECT_NE(text.find("aborted by the user"), std::string::npos) << text;
  }
}

TEST(NcclGpuWorld1, BitwiseOpsAndHostMemoryAreRefusedBeforeAnythingRuns) {
  require_gpu();
  auto pg = backend_factory("nccl")(std::make_shared<HashStore>(), 0, 1, 60s);
  DeviceBuffer buf(64);
  EXPECT_THROW(pg->all_reduce(buf.get(), 16, DType::kI32, ReduceOpKind::kBxor), InvalidArgument);
  // Host memory is refused by name instead of reaching NCCL's kernels.
  std::vector<int32_t> host(16);
  try {
    pg->all_reduce(host.data(), 16, DType::kI32, ReduceOpKind::kSum);
    ADD_FAILURE() << "an all_reduce on host memory was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce: send is host memory"), std::string::npos)
        << e.what();
  }
  // The group goes on: the refused call took no sequence number.
  pg->all_reduce(buf.get(), 16, DType::kI32, ReduceOpKind::kMax)->wait();
  pg->barrier()->wait();
}

// ---- several ranks as processes ----

int worker(int rank, int world, const std::string& store_path) {
  try {
    auto store = std::make_shared<FileStore>(store_path, world);
    auto pg = backend_factory("nccl")(store, rank, world, 120s);
    Report rep = check_all(*pg);
    // A rank that skips a collective: its peers' Work ends with TimeoutError after the
    // group's timeout (3 s), through the watchdog.
    auto short_store = std::make_shared<PrefixStore>("short", store);
    auto quick = backend_factory("nccl")(short_store, rank, world, 3s);
    DeviceBuffer buf(4096);
    quick->barrier()->wait();
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      WorkPtr work = quick->all_reduce(buf.get(), 1024, DType::kF32, ReduceOpKind::kSum);
      bool timed_out = false;
      try {
        work->wait();
      } catch (const TimeoutError& e) {
        timed_out = std::string(e.what()).find("all_reduce #1") != std::string::npos;
      }
      rep.expect(timed_out, "the skipped all_reduce did not end with TimeoutError");
      rep.expect(std::chrono::steady_clock::now() - start < 15s, "the timeout took too long");
    } else {
      std::this_thread::sleep_for(6s);
    }
    quick.reset();
    // abort() on rank 0 reaches the others through the group's store: their pending
    // all_reduce ends with PeerError quoting it, within seconds (60 s timeout).
    auto abort_store = std::make_shared<PrefixStore>("abort", store);
    auto doomed = backend_factory("nccl")(abort_store, rank, world, 60s);
    doomed->barrier()->wait();
    if (rank == 0) doomed->abort();
    const auto start = std::chrono::steady_clock::now();
    std::string text;
    try {
      doomed->all_reduce(buf.get(), 1024, DType::kF32, ReduceOpKind::kSum)->wait();
    } catch (const PeerError& e) {
      text = e.what();
    }
    rep.expect(text.find("aborted by the user") != std::string::npos,
               "after rank 0's abort: '" + text + "'");
    rep.expect(rank == 0 || text.find("another rank of the group failed") != std::string::npos,
               "the abort did not come from rank 0's notice: '" + text + "'");
    rep.expect(std::chrono::steady_clock::now() - start < 10s, "the abort took too long");
    doomed.reset();
    pg.reset();
    for (const std::string& f : rep.failures) std::cerr << "rank " << rank << ": " << f << "\n";
    return rep.failures.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank << " threw: " << e.what() << "\n";
    return 2;
  }
}

TEST(NcclGpuMultiProcess, EveryCollectiveOnOneGpuPerRank) {
  const int devices = device_count();
  if (devices < 2) GTEST_SKIP() << devices << " CUDA device(s): several ranks need one GPU each";
  const int world = std::min(devices, 4);
  char dir_template[] = "/tmp/tdist_nccl_gpu_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string store_path = std::string(dir_template) + "/store";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = test_support::environment_without([](const std::string& name) {
      return name == "LOCAL_RANK" || name == "TDIST_NCCL_DEVICE";
    });
    env.push_back("LOCAL_RANK=" + std::to_string(r));
    pids.push_back(test_support::spawn_exec(
        {"/proc/self/exe", "--worker", std::to_string(r), std::to_string(world), store_path}, env));
    ASSERT_GT(pids.back(), 0);
  }
  const auto deadline = std::chrono::steady_clock::now() + 400s;
  for (int r = 0; r < world; ++r) {
    int status = 0;
    while (::waitpid(pids[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) ::kill(p, SIGKILL);
        ::waitpid(pids[r], &status, 0);
        ADD_FAILURE() << "rank " << r << " did not finish in time";
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " failed (status " << status << "); its stderr says why";
  }
  std::remove(store_path.c_str());
  ::rmdir(dir_template);
}

}  // namespace
}  // namespace tdist::nccl_gpu_test

int main(int argc, char** argv) {
  // scripts/gpu_check.sh's probe: the number of devices, or why there is none (exit 1).
  if (argc == 2 && std::string(argv[1]) == "--count-devices") {
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
      std::cout << cudaGetErrorName(rc) << ": " << cudaGetErrorString(rc) << "\n";
      return 1;
    }
    std::cout << n << "\n";
    return 0;
  }
  if (argc == 5 && std::string(argv[1]) == "--worker") {
    return tdist::nccl_gpu_test::worker(std::stoi(argv[2]), std::stoi(argv[3]), argv[4]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
