// launcher_env_worker: reports the environment a launcher gave it, for the env-contract
// tests of tdistrun (the same checks run against torchrun).
//
//   launcher_env_worker [--init]
//
// Writes one "NAME=value" line per variable of the contract ("<unset>" when unset) to
// $ENV_WORKER_OUT_DIR/rank_<RANK>.env when that is set (written to a temporary name and
// renamed, so a reader never sees half a file), else to stdout as "env <RANK>: NAME=value"
// lines in one write(2), so ranks sharing a terminal never interleave within a report.
// With --init it then joins the job: init_process_group over env:// with the backend
// $TDIST_TEST_BACKEND (default tcp), an all_reduce of its rank checked against
// world*(world-1)/2, one of 2^20+3 floats (rank+1 each) checked against world*(world+1)/2
// everywhere, a barrier and destroy_process_group.
// Exit status: 0 on success, 1 with a message on stderr on any failure, 2 on bad usage.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace {

constexpr const char* kVariables[] = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TDIST_AGENT_STORE",
    "TDIST_AGENT_STORE_PREFIX",
    "TDIST_USE_AGENT_STORE",
    "TDIST_LAZY_CONNECT",
};

std::string env_or_unset(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "<unset>" : value;
}

std::string report(const std::string& line_prefix) {
  std::string out;
  for (const char* name : kVariables) out += line_prefix + name + "=" + env_or_unset(name) + "\n";
  return out;
}

void write_report(const std::string& rank) {
  const char* dir = std::getenv("ENV_WORKER_OUT_DIR");
  if (dir == nullptr) {
    std::string text = report("env " + rank + ": ");
    TDIST_CHECK(
        ::write(STDOUT_FILENO, text.data(), text.size()) == static_cast<ssize_t>(text.size()),
        tdist::Error, "writing the report to stdout: ", std::strerror(errno));
    return;
  }
  std::string path = std::string(dir) + "/rank_" + rank + ".env";
  std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::trunc);
    file << report("");
    file.close();
    TDIST_CHECK(file, tdist::Error, "cannot write ", tmp);
  }
  TDIST_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, tdist::Error, "cannot rename ", tmp,
              " to ", path, ": ", std::strerror(errno));
}

void join_and_check() {
  const char* backend = std::getenv("TDIST_TEST_BACKEND");
  tdist::init_process_group(backend != nullptr && *backend != '\0' ? backend : "tcp");
  auto pg = tdist::get_default_group();
  int64_t value = pg->rank();
  pg->all_reduce(&value, 1, tdist::DType::kI64)->wait();
  int64_t world = pg->size();
  TDIST_CHECK(value == world * (world - 1) / 2, tdist::Error, "all_reduce of the ranks gave ",
              value, ", expected ", world * (world - 1) / 2, " for world size ", world);
  std::vector<float> big((size_t{1} << 20) + 3, static_cast<float>(pg->rank() + 1));
  pg->all_reduce(big.data(), big.size(), tdist::DType::kF32)->wait();
  const auto expected = static_cast<float>(world * (world + 1) / 2);
  for (size_t i = 0; i < big.size(); ++i) {
    TDIST_CHECK(big[i] == expected, tdist::Error, "all_reduce of 2^20+3 floats gave ", big[i],
                " at ", i, ", expected ", expected);
  }
  pg->barrier()->wait();
  tdist::destroy_process_group();
}

}  // namespace

int main(int argc, char** argv) {
  bool init = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--init") == 0) {
      init = true;
    } else {
      std::fprintf(stderr, "usage: %s [--init]\n", argv[0]);
      return 2;
    }
  }
  std::string rank = env_or_unset("RANK");
  try {
    write_report(rank);
    if (init) join_and_check();
  } catch (const tdist::Error& e) {
    std::fprintf(stderr, "env_worker rank %s: %s\n", rank.c_str(), e.what());
    return 1;
  }
  return 0;
}
