// checkpoint_bench: write and read throughput of tdist::checkpoint (scripts/bench_checkpoint.sh
// runs it beside dd on the same disk).
//
//   checkpoint_bench DIR MIB [ROUNDS]                (one process)
//   tdistrun --standalone --nproc-per-node 2 checkpoint_bench DIR MIB [ROUNDS]
//
// The state is MIB MiB of float tensors (random bits) in all, sharded over the ranks (each rank's
// rows of tensors of 256 MiB). Each round saves it (collective, fsync'd, committed), evicts the
// files from the page cache (posix_fadvise DONTNEED), and loads it back into the same
// tensors; rank 0 prints per round "save_s=.. write_mib_s=.. load_s=.. read_mib_s=..", the
// time from a barrier before to a barrier after, over the whole state's bytes.
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/hash_store.h"
#include "tdist/torch/checkpoint.h"

namespace {

// Drops the folder's files from the page cache (written and fsync'd, so clean).
void evict(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

int run(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: checkpoint_bench DIR MIB [ROUNDS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t mib = std::atoll(argv[2]);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 3;
  if (std::getenv("WORLD_SIZE") != nullptr) {
    tdist::init_process_group("auto");
  } else {
    tdist::init_process_group("auto", "env://", 1, 0, tdist::default_pg_timeout(),
                              std::make_shared<tdist::HashStore>());
  }
  auto group = tdist::get_default_group();
  const int rank = group->rank();
  const int world = group->size();
  constexpr int64_t kCols = 4096;
  const int64_t tensor_rows = 256 * 1024 * 1024 / (kCols * 4);  // 256 MiB each
  const int64_t tensors = std::max<int64_t>(1, mib / 256);
  const int64_t mine = tensor_rows / world;
  tdist::checkpoint::State state;
  std::vector<torch::Tensor> shards;
  for (int64_t i = 0; i < tensors; ++i) {
    const int64_t first = rank * mine;
    const int64_t rows = rank == world - 1 ? tensor_rows - first : mine;
    // Random bits (incompressible, like dd's /dev/urandom source: a disk that compresses
    // would favour floats in [0, 1)), viewed as floats.
    shards.push_back(torch::randint(std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max(), {rows, kCols}, torch::kInt)
                         .view(torch::kFloat));
    state.shard("w" + std::to_string(i), shards.back(), {tensor_rows, kCols}, first);
  }
  const double total_mib = static_cast<double>(tensors * tensor_rows * kCols * 4) / (1 << 20);
  auto seconds_of = [&](auto&& fn) {
    group->barrier()->wait();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    group->barrier()->wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  tdist::checkpoint::Checkpointer ckpt(dir, {.keep_last = 1});
  for (int r = 0; r < rounds; ++r) {
    const double save_s = seconds_of([&] { ckpt.save(r, state); });
    const std::string path = *tdist::checkpoint::latest(dir);
    if (rank == 0) evict(path);
    const double load_s = seconds_of([&] { tdist::checkpoint::load(path, state); });
    if (rank == 0) {
      std::printf(
          "checkpoint world=%d mib=%.0f save_s=%.3f write_mib_s=%.0f load_s=%.3f "
          "read_mib_s=%.0f\n",
          world, total_mib, save_s, total_mib / save_s, load_s, total_mib / load_s);
      std::fflush(stdout);
    }
  }
  tdist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
}
