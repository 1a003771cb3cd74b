// One rank of hang_test: joins the default group through env:// (the test hosts the store)
// with BACKEND, group timeout TIMEOUT_MS, and plays one scenario of a job that goes wrong.
// Its stderr (tdist's log) goes to DIR/log<r>; the error it sees, if any, to DIR/error<r>
// ("<type>: <text>"); DIR/at<r> says it reached the point the test waits for.
//
//   hang_worker skip DIR BACKEND TIMEOUT_MS    3 all_reduces of 4 f32; rank 2 skips the
//       second and then computes (sleeps) until DIR/release exists: ranks 0 and 1 wait in
//       all_reduce #2 until their timeout
//   hang_worker mismatch DIR ...               rank 1 calls broadcast (root 0) where the
//       others call all_reduce
//   hang_worker sleep DIR ...                  rank 1 computes until DIR/release exists
//       before its second all_reduce; then all finish
//   hang_worker kill DIR ...                   rank 1 SIGKILLs itself after the first
//       all_reduce; the others wait in the second, then stay until DIR/release exists
// Exit codes: 0 done, 2 an unexpected exception.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace {

using tdist::DType;

std::string dir;

void touch(const std::string& name, const std::string& text = "") {
  std::ofstream(dir + "/" + name + ".tmp") << text;
  std::filesystem::rename(dir + "/" + name + ".tmp", dir + "/" + name);
}

void wait_for_release() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(dir + "/release") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void record(int rank, const char* type, const std::exception& e) {
  touch("error" + std::to_string(rank), std::string(type) + ": " + e.what());
}

// Runs all_reduce #seq-th call; records the error (and returns false) when it fails.
bool all_reduce(int rank, bool announce = false) {
  std::vector<float> x(4, 1.0f);
  auto work = tdist::get_default_group()->all_reduce(x.data(), x.size(), DType::kF32);
  if (announce) touch("at" + std::to_string(rank));
  try {
    work->wait();
    return true;
  } catch (const tdist::TimeoutError& e) {
    record(rank, "TimeoutError", e);
  } catch (const tdist::DesyncError& e) {
    record(rank, "DesyncError", e);
  } catch (const tdist::PeerError& e) {
    record(rank, "PeerError", e);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: hang_worker skip|mismatch|sleep|kill DIR BACKEND TIMEOUT_MS\n";
    return 2;
  }
  const std::string mode = argv[1];
  dir = argv[2];
  const std::string rank_text = std::getenv("RANK") != nullptr ? std::getenv("RANK") : "x";
  if (std::freopen((dir + "/log" + rank_text).c_str(), "w", stderr) == nullptr) return 2;
  try {
    tdist::init_process_group(argv[3], "env://", -1, -1,
                              std::chrono::milliseconds(std::atoll(argv[4])));
    const int rank = tdist::get_rank();
    if (mode == "skip") {
      all_reduce(rank);
      if (rank != 2) all_reduce(rank);
      if (rank == 2) {
        all_reduce(rank);
        touch("at2");
        wait_for_release();
      } else {
        all_reduce(rank, /*announce=*/true);
      }
    } else if (mode == "mismatch") {
      std::vector<float> x(4, 1.0f);
      if (rank == 1) {
        try {
          tdist::get_default_group()->broadcast(x.data(), 4, DType::kF32, 0)->wait();
        } catch (const tdist::DesyncError& e) {
          record(rank, "DesyncError", e);
        } catch (const tdist::PeerError& e) {
          record(rank, "PeerError", e);
        }
      } else {
        all_reduce(rank);
      }
    } else if (mode == "sleep") {
      all_reduce(rank);
      if (rank == 1) {
        touch("at1");
        wait_for_release();
        all_reduce(rank);
      } else {
        all_reduce(rank, /*announce=*/true);
      }
    } else if (mode == "kill") {
      all_reduce(rank);
      if (rank == 1) ::raise(SIGKILL);
      all_reduce(rank, /*announce=*/false);
      touch("at" + std::to_string(rank));
      wait_for_release();
    } else {
      std::cerr << "hang_worker: unknown mode " << mode << "\n";
      return 2;
    }
    tdist::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "hang_worker: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
