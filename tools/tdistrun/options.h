// tdistrun's command line: torchrun's flags (dash and underscore spellings, `--flag value`
// and `--flag=value`, PET_<FLAG> environment defaults) parsed into Options (CLI11 splits
// argv: tools/cli), the --help and --help-env texts, and the argv each worker execs.
//
// Everything is checked before anything starts: a bad command line, a missing program or
// interpreter throws UsageError, whose what() is one line naming the flag (or PET_ variable)
// and value and saying what is expected. Thread-safety: parse_args and worker_command read
// the environment (PET_*, TDIST_TERM_TIMEOUT, PYTHON, PATH) and the file system; they are
// safe to call concurrently only while nothing changes the environment.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tdist::launcher {

// torchrun's Std: which of a worker's streams go to files (redirects) or to console+file (tee).
enum class Streams : uint8_t { kNone = 0, kOut = 1, kErr = 2, kBoth = 3 };

// "3" = the same for all local ranks; "0:1,1:2" = per local rank, unnamed ranks get kNone.
struct StreamSpec {
  Streams all = Streams::kNone;
  std::map<int, Streams> per_rank;
  Streams for_rank(int local_rank) const;
};

struct Options {
  int nproc_per_node = 1;             // --nproc-per-node N | auto | cpu (= online cores)
  int min_nodes = 1, max_nodes = 1;   // --nnodes N or MIN:MAX
  int node_rank = -1;                 // --node-rank; -1 = assigned by the rendezvous
  std::string rdzv_backend = "c10d";  // c10d, static (given --node-rank) or etcd-v2
  std::string rdzv_host;              // --rdzv-endpoint HOST, else --master-addr (no brackets)
  int rdzv_port = -1;                 // 0 = a free port (one node, no port given)
  std::string rdzv_id = "none";       // --rdzv-id; random hex for a standalone job
  std::chrono::milliseconds join_timeout{900000};      // --rdzv-timeout, rdzv-conf join_timeout
  std::chrono::milliseconds last_call_timeout{30000};  // rdzv-conf last_call_timeout
  std::chrono::milliseconds close_timeout{60000};      // rdzv-conf close_timeout (accepted)
  std::optional<bool> is_host;                         // rdzv-conf is_host
  bool standalone = false;                             // --standalone
  int max_restarts = 0;                                // --max-restarts
  bool elastic = false;    // --elastic: replace a dead worker alone, or go on without it
  int elastic_spares = 0;  // --elastic-spares: waiting spare workers per node
  std::chrono::milliseconds monitor_interval{100};  // --monitor-interval SEC
  std::chrono::milliseconds term_timeout{30000};    // --term-timeout, TDIST_TERM_TIMEOUT
  StreamSpec redirects, tee;                        // -r/--redirects, -t/--tee
  std::string log_dir;                              // --log-dir
  std::vector<int> local_ranks_filter;              // sorted, unique; empty = all
  std::string role = "default";                     // --role
  bool module = false;                              // -m/--module
  bool no_python = false;                           // --no-python
  bool run_path = false;                            // --run-path
  std::string start_method = "spawn";               // accepted; workers are always fork+exec'd
  std::string local_addr;                           // --local-addr
  std::string program;                              // PROGRAM
  std::vector<std::string> program_args;
};

enum class Action { kRun, kHelp, kHelpEnv, kVersion };

struct ParseResult {
  Action action = Action::kRun;
  Options options;  // filled only for kRun
};

// A bad command line. what() is one line without a source location, ready to print, e.g.
// "tdistrun: --nnodes '3:2': MIN must be <= MAX".
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses argv (argv[0] is the program name and is skipped). --help/-h, --help-env and
// --version anywhere before PROGRAM win over everything else. Throws UsageError.
ParseResult parse_args(int argc, const char* const* argv);

// Usage line, every flag explained, and a summary of the environment workers get.
std::string help_text();

// Every TDIST_* setting (name, default, description) as an aligned table, plus the
// torchrun, OpenMPI and Slurm variables tdist honours.
std::string help_env_text();

// The argv to exec for a worker: [python, "-u", script, args...] for a ".py" PROGRAM or
// --run-path, [python, "-u", "-m", module, args...] for -m, else [program, args...] with a
// PROGRAM without '/' resolved on PATH to an absolute path. python is $PYTHON, else python3
// (resolved on PATH too). Throws UsageError for -m with --no-python, and for a program,
// script or interpreter that does not exist or cannot be executed.
std::vector<std::string> worker_command(const Options& options);

}  // namespace tdist::launcher
