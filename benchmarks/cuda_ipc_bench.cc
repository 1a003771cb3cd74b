// cuda_ipc_bench: all_reduce (f32 sum) busbw of the cuda_ipc backend against the staging
// path (cudaMemcpy to pinned host memory, the shm backend's all_reduce, cudaMemcpy back),
// with N processes on one GPU; the issue-16 goal is >= 10x at 64 MiB with 4 processes.
// Usage: cuda_ipc_bench [--nproc N (4)] [--min-bytes B (1 MiB)] [--max-bytes B (64 MiB)]
//                       [--iters I (10)]
// It starts the N ranks itself (this binary with --rank, meeting through a FileStore in a
// temporary folder; LOCAL_RANK modulo the devices puts them on device 0 of a one-GPU
// machine). Rank 0 prints one line per size: bytes, busbw of each path (GB/s, as
// nccl-tests: 2(n-1)/n * bytes / time) and their ratio. run by scripts/bench_cuda_ipc.sh.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tdist/backend.h"
#include "tdist/file_store.h"
#include "tdist/prefix_store.h"
#include "tdist/process_group.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(rc));
}

struct Options {
  int nproc = 4;
  size_t min_bytes = size_t{1} << 20;
  size_t max_bytes = size_t{64} << 20;
  int iters = 10;
};

// Seconds per run() on `pg`, the slowest rank's (measured between barriers; gathered
// through `host`, since a cuda_ipc group takes device memory only).
template <typename Run>
double time_per_op(tdist::ProcessGroup& pg, tdist::ProcessGroup& host, int iters, Run run) {
  for (int i = 0; i < 3; ++i) run();  // warm-up: handles opened, buffers cached
  pg.barrier()->wait();
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) run();
  pg.barrier()->wait();
  double secs = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  std::vector<double> all(static_cast<size_t>(pg.size()));
  host.all_gather(&secs, all.data(), 1, tdist::DType::kF64)->wait();
  double worst = 0;
  for (double s : all) worst = std::max(worst, s);
  return worst;
}

int rank_main(int rank, const Options& o, const std::string& store_path) {
  auto store = std::make_shared<tdist::FileStore>(store_path, o.nproc);
  auto device_pg = tdist::backend_factory("cuda_ipc")(
      std::make_shared<tdist::PrefixStore>("ipc", store), rank, o.nproc, 300s);
  auto host_pg = tdist::backend_factory("shm")(std::make_shared<tdist::PrefixStore>("shm", store),
                                               rank, o.nproc, 300s);
  void* dev = nullptr;
  void* pinned = nullptr;
  cuda(cudaMalloc(&dev, o.max_bytes), "cudaMalloc");
  cuda(cudaMemset(dev, 0, o.max_bytes), "cudaMemset");
  cuda(cudaMallocHost(&pinned, o.max_bytes), "cudaMallocHost");
  cudaStream_t stream = nullptr;
  cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (rank == 0) {
    std::printf("# all_reduce f32 sum, %d processes on one GPU, %d iterations\n", o.nproc, o.iters);
    std::printf("%12s %16s %16s %8s\n", "bytes", "cuda_ipc GB/s", "staging GB/s", "ratio");
  }
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const size_t count = bytes / 4;
    const double ipc = time_per_op(*device_pg, *host_pg, o.iters, [&] {
      device_pg->all_reduce(dev, count, tdist::DType::kF32, tdist::ReduceOpKind::kSum)->wait();
    });
    const double staged = time_per_op(*host_pg, *host_pg, o.iters, [&] {
      cuda(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, stream), "D2H");
      cuda(cudaStreamSynchronize(stream), "sync");
      host_pg->all_reduce(pinned, count, tdist::DType::kF32, tdist::ReduceOpKind::kSum)->wait();
      cuda(cudaMemcpyAsync(dev, pinned, bytes, cudaMemcpyHostToDevice, stream), "H2D");
      cuda(cudaStreamSynchronize(stream), "sync");
    });
    const double factor = 2.0 * (o.nproc - 1) / o.nproc * static_cast<double>(bytes) / 1e9;
    if (rank == 0) {
      std::printf("%12zu %16.2f %16.2f %8.1f\n", bytes, factor / ipc, factor / staged,
                  staged / ipc);
      std::fflush(stdout);
    }
  }
  device_pg.reset();
  host_pg.reset();
  cudaStreamDestroy(stream);
  cudaFreeHost(pinned);
  cudaFree(dev);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  int rank = -1;
  std::string store_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--nproc") {
      o.nproc = std::stoi(value);
    } else if (flag == "--min-bytes") {
      o.min_bytes = std::stoull(value);
    } else if (flag == "--max-bytes") {
      o.max_bytes = std::stoull(value);
    } else if (flag == "--iters") {
      o.iters = std::stoi(value);
    } else if (flag == "--rank") {
      rank = std::stoi(value);
    } else if (flag == "--store") {
      store_path = value;
    } else {
      std::fprintf(stderr, "cuda_ipc_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    if (rank >= 0) return rank_main(rank, o, store_path);
    char dir[] = "/tmp/tdist_cuda_ipc_bench_XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    store_path = std::string(dir) + "/store";
    std::vector<pid_t> pids;
    for (int r = 0; r < o.nproc; ++r) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string local = std::to_string(r);
        ::setenv("LOCAL_RANK", local.c_str(), 1);
        const std::vector<std::string> args = {"/proc/self/exe",
                                               "--nproc",
                                               std::to_string(o.nproc),
                                               "--min-bytes",
                                               std::to_string(o.min_bytes),
                                               "--max-bytes",
                                               std::to_string(o.max_bytes),
                                               "--iters",
                                               std::to_string(o.iters),
                                               "--rank",
                                               local,
                                               "--store",
                                               store_path};
        std::vector<char*> cargs;
        for (const std::string& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
        cargs.push_back(nullptr);
        ::execv("/proc/self/exe", cargs.data());
        std::_Exit(127);
      }
      pids.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : pids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    std::remove(store_path.c_str());
    ::rmdir(dir);
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_ipc_bench: %s\n", e.what());
    return 1;
  }
}
