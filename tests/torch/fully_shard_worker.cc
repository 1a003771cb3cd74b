// One rank of fully_shard bad-input scenarios (fully_shard_scenarios.h) under tdistrun:
//   torch_fully_shard_worker <scenario>[,<scenario>...] <backend>
// runs them one after the other on one group (each fails before anything that would leave
// the group unusable), printing one line each, "RESULT <scenario> rank <r> <ErrorType>:
// <message>" ("none" when it raised nothing), and exits 0; fully_shard_process_test.cc
// checks the lines. The group's timeout is short (10 s): a hang shows as a TimeoutError.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "tdist/distributed.h"
#include "tdist/error.h"
#include "torch/fully_shard_scenarios.h"

namespace {

void report(const std::string& scenario, int rank, const std::string& type,
            const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n') c = ' ';
  }
  std::printf("RESULT %s rank %d %s: %s\n", scenario.c_str(), rank, type.c_str(), line.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <scenario> <backend>\n", argv[0]);
    return 2;
  }
  ::torch::set_num_threads(1);
  tdist::init_process_group(argv[2], "env://", -1, -1, std::chrono::seconds(10));
  const auto group = tdist::get_default_group();
  const int rank = group->rank();
  std::string list = argv[1];
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, comma - at);
    at = comma + 1;
    try {
      tdist::torch::fully_shard_scenarios::run(name, group);
      report(name, rank, "none", "the scenario raised nothing");
    } catch (const tdist::DesyncError& e) {
      report(name, rank, "DesyncError", e.what());
    } catch (const tdist::InvalidArgument& e) {
      report(name, rank, "InvalidArgument", e.what());
    } catch (const tdist::TimeoutError& e) {
      report(name, rank, "TimeoutError", e.what());
    } catch (const tdist::Error& e) {
      report(name, rank, "Error", e.what());
    } catch (const std::exception& e) {
      report(name, rank, "std::exception", e.what());
    }
  }
  tdist::destroy_process_group();
  return 0;
}
