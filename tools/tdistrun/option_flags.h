// The table of tdistrun's flags, shared by the parser (options.cc) and --help
// (options_help.cc), and the splitting both do. Internal to the launcher; constant data,
// thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

namespace tdist::launcher::flags {

// `s` cut at every `sep`: n separators give n + 1 fields, empty ones included.
inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t start = 0;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

enum class Kind { kValue, kSwitch, kHelp, kHelpEnv, kVersion };

struct Flag {
  std::string_view name;  // canonical spelling without "--"; '_' may replace each '-'
  char short_name;        // 0 when none
  Kind kind;
  bool pet;                  // PET_<NAME> sets its default, as in torchrun
  std::string_view group;    // --help section
  std::string_view metavar;  // empty for switches
  std::string_view help;
};

inline constexpr std::string_view kWorkers = "Workers";
inline constexpr std::string_view kRdzv = "Rendezvous";
inline constexpr std::string_view kRun = "Running PROGRAM";
inline constexpr std::string_view kOutput = "Output";
inline constexpr std::string_view kInfo = "Information";

inline constexpr auto kFlags = std::to_array<Flag>({
    {"nproc-per-node", 0, Kind::kValue, true, kWorkers, "N",
     "workers on this node: a number, or auto or cpu (= online CPU cores); default 1"},
    {"nnodes", 0, Kind::kValue, true, kWorkers, "N|MIN:MAX",
     "number of nodes, or the range an elastic job accepts; default 1"},
    {"node-rank", 0, Kind::kValue, true, kWorkers, "N",
     "this node's rank (0..nnodes-1); selects the static rendezvous; default: the rendezvous "
     "assigns node ranks"},
    {"max-restarts", 0, Kind::kValue, true, kWorkers, "N",
     "restarts of the whole job (all nodes together, each a fresh rendezvous round) before it "
     "fails; default 0"},
    {"elastic", 0, Kind::kSwitch, true, kWorkers, "",
     "keep the other workers running when one dies: start a replacement with its rank while "
     "--max-restarts allows (each counts as one), else let the job go on without it; the "
     "workers survive through tdist::ElasticGroup, and connect lazily (TDIST_LAZY_CONNECT=1 "
     "unless set)"},
    {"elastic-spares", 0, Kind::kValue, true, kWorkers, "N",
     "with --elastic: N spare workers per node, started and waiting, so that a replacement "
     "takes a dead worker's rank at once instead of starting then; default 0"},
    {"monitor-interval", 0, Kind::kValue, true, kWorkers, "SEC",
     "how often the agent checks its workers; default 0.1"},
    {"term-timeout", 0, Kind::kValue, false, kWorkers, "SEC",
     "grace period between forwarding SIGINT/SIGTERM/SIGHUP to the workers and SIGKILL; "
     "default $TDIST_TERM_TIMEOUT (30)"},
    {"role", 0, Kind::kValue, true, kWorkers, "NAME", "ROLE_NAME of the workers; default default"},
    {"standalone", 0, Kind::kSwitch, true, kRdzv, "",
     "a one-node job with its own store on 127.0.0.1, a free port and a random --rdzv-id; "
     "--rdzv-backend, --rdzv-endpoint and --rdzv-id are then ignored"},
    {"rdzv-backend", 0, Kind::kValue, true, kRdzv, "NAME",
     "c10d (node agents meet at the store at --rdzv-endpoint, hosted by the agent whose "
     "address it is) or static (fixed --node-rank); default c10d, static with --node-rank; "
     "etcd-v2 (or etcd): they meet on the etcd at --rdzv-endpoint (default port 2379), which "
     "outlives any node"},
    {"rdzv-endpoint", 0, Kind::kValue, true, kRdzv, "HOST[:PORT]",
     "where the node agents meet; IPv6 in brackets ([::1]:29400); default port 29400"},
    {"rdzv-id", 0, Kind::kValue, true, kRdzv, "ID",
     "job id, the same on every node; default none (random for a one-node job)"},
    {"rdzv-conf", 0, Kind::kValue, true, kRdzv, "K=V,...",
     "join_timeout, last_call_timeout, close_timeout (seconds) and is_host (true/false)"},
    {"rdzv-timeout", 0, Kind::kValue, false, kRdzv, "SEC",
     "how long to wait for MIN nodes to join (rdzv-conf join_timeout); default 900"},
    {"master-addr", 0, Kind::kValue, true, kRdzv, "HOST",
     "where the agents meet without --rdzv-endpoint; default 127.0.0.1"},
    {"master-port", 0, Kind::kValue, true, kRdzv, "PORT",
     "port at --master-addr; default 29500, a free port for a one-node job"},
    {"local-addr", 0, Kind::kValue, true, kRdzv, "HOST",
     "this node's address as the other nodes should reach it; default: looked up"},
    {"module", 'm', Kind::kSwitch, true, kRun, "",
     "run PROGRAM as a Python module, as 'python -u -m PROGRAM ARGS'"},
    {"no-python", 0, Kind::kSwitch, true, kRun, "",
     "execute PROGRAM directly even when it ends in .py"},
    {"run-path", 0, Kind::kSwitch, true, kRun, "",
     "run PROGRAM with the Python interpreter whatever its name; wins over --no-python"},
    {"start-method", 0, Kind::kValue, true, kRun, "METHOD",
     "spawn, fork or forkserver: accepted for torchrun's sake; workers are always fork+exec'd"},
    {"log-dir", 0, Kind::kValue, true, kOutput, "DIR",
     "keep the per-worker files (logs, error files) under DIR/<rdzv-id>/; default: a temporary "
     "directory, removed when the job succeeds"},
    {"redirects", 'r', Kind::kValue, true, kOutput, "SPEC",
     "send worker streams to files only: 0 none, 1 stdout, 2 stderr, 3 both, for every local "
     "rank, or per local rank as 0:1,1:2 (others: none); default 0"},
    {"tee", 't', Kind::kValue, true, kOutput, "SPEC",
     "like --redirects, but the lines also reach the console, prefixed [host:rank N]:"},
    {"local-ranks-filter", 0, Kind::kValue, true, kOutput, "R,...",
     "show only these local ranks' output on the console (files still get everything)"},
    {"help", 'h', Kind::kHelp, false, kInfo, "", "this text"},
    {"help-env", 0, Kind::kHelpEnv, false, kInfo, "",
     "every TDIST_* setting with its default, and the other variables tdist reads"},
    {"version", 0, Kind::kVersion, false, kInfo, "", "tdistrun's version"},
});

inline constexpr size_t kWidth = 100;

}  // namespace tdist::launcher::flags
