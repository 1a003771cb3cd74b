// The environment tdistrun gives each worker: torchrun's contract (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR/PORT,
// TORCHELASTIC_*), plus where tdist programs find the launcher's store
// (TDIST_AGENT_STORE, TDIST_AGENT_STORE_PREFIX). Python torch workers ignore the latter
// and, as under torchrun's c10d rendezvous, rank 0 hosts its own store at
// MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=False).
// Pure functions of their arguments and the parent's environment; thread-safe as getenv.
#pragma once

#include <string>
#include <vector>

namespace tdist::launcher {

struct WorkerEnvInput {
  int local_rank = 0;
  int local_world_size = 1;
  int rank_offset = 0;  // global rank of local rank 0
  int world_size = 1;
  int node_rank = 0;
  int num_nodes = 1;
  std::string role = "default";
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id;
  std::string error_file;    // TORCHELASTIC_ERROR_FILE
  std::string agent_store;   // "host:port" of the launcher's TCPStore
  std::string store_prefix;  // this round's key prefix for workers
  bool elastic = false;      // --elastic: TDIST_LAZY_CONNECT=1 unless the parent sets it
};

// `parent` ("NAME=value" entries) with the contract's variables set (replacing any
// inherited value), and OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1 added when more than
// one worker shares the node and the parent does not set them.
std::vector<std::string> worker_environment(const std::vector<std::string>& parent,
                                            const WorkerEnvInput& in);

// This process's environment as "NAME=value" entries.
std::vector<std::string> current_environment();

}  // namespace tdist::launcher
