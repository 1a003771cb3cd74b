// The worker environment (see worker_env.h).
#include "tdistrun/worker_env.h"

#include <algorithm>
#include <utility>

extern char** environ;

namespace tdist::launcher {
namespace {

std::string name_of(const std::string& entry) { return entry.substr(0, entry.find('=')); }

bool has_value(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(), [&](const std::string& e) {
    return e.size() > name.size() && e.compare(0, name.size() + 1, name + "=") == 0;
  });
}

}  // namespace

std::vector<std::string> worker_environment(const std::vector<std::string>& parent,
                                            const WorkerEnvInput& in) {
  const int rank = in.rank_offset + in.local_rank;
  std::vector<std::pair<std::string, std::string>> own = {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(in.local_rank)},
      {"WORLD_SIZE", std::to_string(in.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(in.local_world_size)},
      {"GROUP_RANK", std::to_string(in.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(in.num_nodes)},
      // One role per job, as torchrun runs it: the role's ranks are the global ones.
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(in.world_size)},
      {"ROLE_NAME", in.role},
      {"MASTER_ADDR", in.master_addr},
      {"MASTER_PORT", std::to_string(in.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(in.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(in.max_restarts)},
      {"TORCHELASTIC_RUN_ID", in.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", in.error_file},
      {"TDIST_AGENT_STORE", in.agent_store},
      {"TDIST_AGENT_STORE_PREFIX", in.store_prefix},
  };
  if (in.local_world_size > 1) {
    for (const char* name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"}) {
      if (!has_value(parent, name)) own.emplace_back(name, "1");
    }
  }
  // An elastic job's generations connect only the pairs that talk (transport/tcp/lazy_mesh.h).
  if (in.elastic && !has_value(parent, "TDIST_LAZY_CONNECT")) {
    own.emplace_back("TDIST_LAZY_CONNECT", "1");
  }
  std::vector<std::string> env;
  env.reserve(parent.size() + own.size());
  for (const std::string& e : parent) {
    const std::string name = name_of(e);
    const bool replaced =
        std::any_of(own.begin(), own.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.push_back(e);
  }
  for (auto& [name, value] : own) env.push_back(name + "=" + value);
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace tdist::launcher
