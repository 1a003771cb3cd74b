// The node agent's loop (see agent.h).
#include "tdistrun/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "diag/job_record.h"
#include "tdist/elastic.h"
#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"
#include "tdistrun/failure.h"
#include "tdistrun/node_rdzv.h"
#include "tdistrun/signals.h"
#include "tdistrun/trace_merge.h"
#include "tdistrun/watchdog.h"
#include "tdistrun/worker_env.h"
#include "tdistrun/worker_group.h"

namespace tdist::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

void say(const std::string& line) {
  const std::string text = "tdistrun: " + line + "\n";
  if (::write(STDERR_FILENO, text.data(), text.size()) < 0) {
    // Nothing useful to do when stderr is gone.
  }
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Runs `fn` (a blocking rendezvous step) on a helper thread while the main thread keeps
// watching for terminating signals: the launcher must answer Ctrl-C even while it waits
// for other nodes. On such a signal no worker is running, so it exits at once.
template <typename Fn>
auto interruptible(Signals& signals, Fn fn) -> decltype(fn()) {
  using T = decltype(fn());
  const int done = ::eventfd(0, EFD_CLOEXEC);
  if (done < 0) return fn();
  std::promise<T> result;
  std::thread worker([&] {
    try {
      result.set_value(fn());
    } catch (...) {
      result.set_exception(std::current_exception());
    }
    const uint64_t one = 1;
    if (::write(done, &one, sizeof(one)) < 0) {
      // The eventfd cannot be full after one write; nothing to recover.
    }
  });
  for (;;) {
    pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {done, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) break;
    if (const int sig = signals.drain(); sig != 0) {
      say("received " + signal_name(sig) + " while waiting for the rendezvous; exiting");
      std::_Exit(128 + sig);
    }
  }
  worker.join();
  ::close(done);
  return result.get_future().get();
}

// Where this job keeps its per-worker files: --log-dir, else a private temporary
// directory that is removed when the job succeeds without redirected output.
class RunDirectory {
 public:
  RunDirectory(const Options& options) {
    if (!options.log_dir.empty()) {
      root_ = fs::path(options.log_dir) / options.rdzv_id;
      fs::create_directories(root_);
      return;
    }
    std::string pattern = (fs::temp_directory_path() / "tdistrun_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      TDIST_THROW(Error, "cannot create a temporary directory in ", fs::temp_directory_path());
    }
    root_ = pattern;
    temporary_ = true;
    watchdog::remove_on_death(root_.string());  // even a SIGKILLed launcher leaves none
  }
  ~RunDirectory() {
    if (temporary_ && remove_) {
      std::error_code ignored;
      fs::remove_all(root_, ignored);
    }
  }
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  // <root>/attempt_<round>/<local_rank>/, created.
  fs::path worker_dir(int round, int local_rank) const {
    fs::path dir = root_ / ("attempt_" + std::to_string(round)) / std::to_string(local_rank);
    fs::create_directories(dir);
    return dir;
  }
  void keep() {
    remove_ = false;
    if (temporary_) watchdog::remove_on_death("");
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
  bool temporary_ = false;
  bool remove_ = true;
};

// This tdistrun's job record (diag/job_record.h: how tdist-status finds the job and,
// when tdistrun made it, its token), removed when the agent ends.
class JobRecordFile {
 public:
  JobRecordFile() = default;
  ~JobRecordFile() { diag::remove_job_record(path_); }
  JobRecordFile(const JobRecordFile&) = delete;
  JobRecordFile& operator=(const JobRecordFile&) = delete;

  void write(const diag::JobRecord& record) {
    try {
      path_ = diag::write_job_record(record);
    } catch (const Error& e) {  // the job runs anyway; only tdist-status without arguments lacks it
      say(std::string("warning: ") + e.what());
    }
  }

 private:
  std::string path_;
};

class Agent {
 public:
  Agent(const Options& options, bool fresh_token)
      : options_(options),
        fresh_token_(fresh_token),
        host_(hostname()),
        dir_(options),
        signals_(Signals::install()) {}

  // The job, then its timeline when TDIST_TRACE asks for one (whatever the outcome).
  int run() {
    const int code = run_rounds();
    if (!trace_dir_.empty() && world_size_ > 0) {
      const std::string line = merge_traces(trace_dir_, world_size_);
      if (!line.empty()) say(line);
    }
    return code;
  }

 private:
  int run_rounds() {
    std::unique_ptr<NodeRendezvous> rdzv =
        interruptible(signals_, [&] { return std::make_unique<NodeRendezvous>(rdzv_config()); });
    rdzv_ = rdzv.get();
    diag::JobRecord record;
    record.endpoint = store_endpoint();
    record.run_id = options_.rdzv_id;
    if (fresh_token_) record.token = setting_string("TDIST_AUTH_TOKEN");
    job_record_.write(record);
    for (;;) {
      const Round round = interruptible(signals_, [&] { return rdzv_->join(); });
      const Outcome outcome = run_round(round);
      if (signalled_ != 0) return 128 + signalled_;
      switch (outcome) {
        case Outcome::kDone:
          return 0;
        case Outcome::kRestart:
          tell_other_failures(round);
          say("restarting the workers (restart " + std::to_string(round.restart_count + 1) +
              " of " + std::to_string(options_.max_restarts) + ")");
          continue;
        case Outcome::kMembershipChange:
          say("nodes are waiting to join; starting a new round with them");
          continue;
        case Outcome::kGiveUp:
          return give_up(round);
      }
    }
  }

  NodeRdzvConfig rdzv_config() const {
    NodeRdzvConfig c;
    c.host = options_.rdzv_host;
    c.port = static_cast<uint16_t>(options_.rdzv_port < 0 ? 0 : options_.rdzv_port);
    c.is_host = options_.is_host;
    if (!c.is_host && options_.rdzv_backend == "static" && options_.node_rank >= 0) {
      c.is_host = options_.node_rank == 0;
    }
    c.run_id = options_.rdzv_id;
    c.etcd = options_.rdzv_backend == "etcd-v2";
    c.min_nodes = options_.min_nodes;
    c.max_nodes = options_.max_nodes;
    c.node_rank = options_.node_rank;
    c.local_world_size = options_.nproc_per_node;
    c.node_addr = options_.local_addr;
    c.hostname = host_;
    // --elastic spends the restarts on replacements (replace_failed); the job as a whole
    // never restarts.
    c.max_restarts = options_.elastic ? 0 : options_.max_restarts;
    c.elastic = options_.elastic;
    c.join_timeout = options_.join_timeout;
    c.last_call_timeout = options_.last_call_timeout;
    return c;
  }

  // Worker `local` of this node (a spare: local >= nproc_per_node, the environment of local
  // rank 0 plus TDIST_ELASTIC_SPARE); its error file goes to error_files_[local].
  WorkerSpec worker_spec(const Round& round, int local, const std::string& spare = "") {
    const fs::path dir = dir_.worker_dir(round.round, local);
    WorkerEnvInput in;
    in.local_rank = spare.empty() ? local : 0;
    in.local_world_size = options_.nproc_per_node;
    in.rank_offset = round.rank_offset;
    in.world_size = round.world_size;
    in.node_rank = round.node_rank;
    in.num_nodes = round.num_nodes;
    in.role = options_.role;
    in.master_addr = round.master_addr;
    in.master_port = round.master_port;
    in.restart_count = round.restart_count;
    in.max_restarts = options_.max_restarts;
    in.run_id = options_.rdzv_id;
    in.error_file = (dir / "error.json").string();
    in.agent_store = store_endpoint();
    in.store_prefix = round.worker_prefix;
    in.elastic = options_.elastic;

    WorkerSpec spec;
    spec.local_rank = local;
    spec.global_rank = round.rank_offset + local;
    spec.argv = worker_command(options_);
    spec.env = worker_environment(current_environment(), in);
    if (!spare.empty()) spec.env.push_back("TDIST_ELASTIC_SPARE=" + spare);
    spec.spare = spare;
    spec.redirect_mask = static_cast<int>(options_.redirects.for_rank(local));
    spec.tee_mask = static_cast<int>(options_.tee.for_rank(local));
    spec.console = options_.local_ranks_filter.empty() ||
                   std::find(options_.local_ranks_filter.begin(), options_.local_ranks_filter.end(),
                             local) != options_.local_ranks_filter.end();
    const int files = spec.redirect_mask | spec.tee_mask;
    if (files & 1) spec.stdout_path = (dir / "stdout.log").string();
    if (files & 2) spec.stderr_path = (dir / "stderr.log").string();
    spec.prefix = spare.empty() ? rank_prefix(spec.global_rank) : "[" + host_ + ":spare]:";
    error_files_.resize(static_cast<size_t>(local) + 1);
    error_files_[static_cast<size_t>(local)] = in.error_file;
    return spec;
  }

  std::string rank_prefix(int global_rank) const {
    return "[" + host_ + ":rank " + std::to_string(global_rank) + "]:";
  }

  // --elastic-spares: the next spare of this node, "<node rank>.<number>".
  WorkerSpec spare_spec(const Round& round) {
    const int local = options_.nproc_per_node + spares_started_;
    return worker_spec(round, local,
                       std::to_string(round.node_rank) + "." + std::to_string(spares_started_++));
  }

  std::vector<WorkerSpec> worker_specs(const Round& round) {
    std::vector<WorkerSpec> specs;
    std::vector<int> ranks;
    for (int local = 0; local < options_.nproc_per_node; ++local) {
      specs.push_back(worker_spec(round, local));
      ranks.push_back(specs.back().global_rank);
    }
    spares_started_ = 0;
    for (int k = 0; k < options_.elastic_spares; ++k) specs.push_back(spare_spec(round));
    world_size_ = round.world_size;
    if (!trace_dir_.empty()) remove_rank_traces(trace_dir_, ranks);  // none from earlier rounds
    if (options_.redirects.all != Streams::kNone || !options_.redirects.per_rank.empty() ||
        options_.tee.all != Streams::kNone || !options_.tee.per_rank.empty()) {
      dir_.keep();
    }
    return specs;
  }

  std::string store_endpoint() const { return rdzv_->worker_store(); }

  // One round: start, watch, and end the workers; returns how the round ended.
  Outcome run_round(const Round& round) {
    error_files_.clear();
    std::unique_ptr<WorkerGroup> group = WorkerGroup::start(worker_specs(round));
    for (;;) {
      switch (group->wait(Clock::now() + options_.monitor_interval)) {
        case WorkerGroup::Event::kAllSucceeded:
          if (options_.elastic && !group->any_succeeded()) {  // every worker died
            group->stop(SIGTERM, options_.term_timeout);      // and the spares go
            return rdzv_->report_failure(failure_records(*group, round));
          }
          if (group->idle_spare()) group->stop(SIGTERM, options_.term_timeout);  // not needed
          return interruptible(signals_, [&] { return rdzv_->finish(); });
        case WorkerGroup::Event::kWorkerFailed: {
          if (options_.elastic) {
            replace_failed(*group, round);
            break;
          }
          group->stop(SIGTERM, options_.term_timeout);
          return rdzv_->report_failure(failure_records(*group, round));
        }
        case WorkerGroup::Event::kSignal: {
          signalled_ = signals_.terminating_signal();
          say("received " + signal_name(signalled_) + "; forwarding it to " +
              std::to_string(options_.nproc_per_node) + " workers");
          group->stop(signalled_, options_.term_timeout);
          rdzv_->leave();
          return Outcome::kGiveUp;
        }
        case WorkerGroup::Event::kTimeout:
          if (std::optional<Outcome> end = rdzv_->check()) {
            group->stop(SIGTERM, options_.term_timeout);
            if (signals_.terminating_signal() != 0) signalled_ = signals_.terminating_signal();
            return *end;
          }
          if (options_.elastic) leave_lost_nodes(round);
          break;
      }
    }
  }

  // --elastic: each newly failed worker is replaced (same rank and environment) while
  // restarts remain; otherwise its slot is marked gone in the workers' store, so that the
  // survivors' next generation does not wait for it (tdist/elastic.h).
  void replace_failed(WorkerGroup& group, const Round& round) {
    std::vector<std::pair<int, int>> failed;  // (local rank, global rank)
    for (const WorkerExit& e : group.exits()) {
      if (!e.failed() || e.stopped_by_us || e.accepted) continue;
      if (e.spare) {
        say("a spare worker (local " + std::to_string(e.local_rank) +
            ") failed; it is not replaced");
        continue;
      }
      failed.emplace_back(e.local_rank, e.global_rank);
      say("worker rank " + std::to_string(e.global_rank) + " failed with " +
          (e.signal != 0 ? signal_name(e.signal) : "exit code " + std::to_string(e.exit_code)));
    }
    group.accept_failures();
    for (const auto& [local, global] : failed) {
      if (elastic_restarts_ < options_.max_restarts) {
        ++elastic_restarts_;
        const std::string count = " (restart " + std::to_string(elastic_restarts_) + " of " +
                                  std::to_string(options_.max_restarts) + ")";
        const std::shared_ptr<Store> workers = rdzv_->workers_view(round);
        if (const auto spare = group.idle_spare()) {
          say("spare " + spare->second + " takes rank " + std::to_string(global) + count +
              "; the other workers go on");
          ElasticGroup::assign_spare(*workers, spare->second, global);
          group.promote(spare->first, global, rank_prefix(global));
          if (elastic_restarts_ < options_.max_restarts) group.add(spare_spec(round));
        } else {
          say("starting a replacement for rank " + std::to_string(global) + count +
              "; the other workers go on");
          group.restart(local);
        }
      } else {
        say("no restarts left: the job goes on without rank " + std::to_string(global));
        const std::shared_ptr<Store> workers = rdzv_->workers_view(round);
        ElasticGroup::mark_slot_gone(*workers, global);
      }
    }
  }

  // --elastic: the slots of nodes whose agents stopped responding are marked gone, so the
  // survivors' next generation goes on without them.
  void leave_lost_nodes(const Round& round) {
    for (int node : rdzv_->take_lost_nodes()) {
      int first = 0;
      for (int n = 0; n < node; ++n) first += round.nodes[static_cast<size_t>(n)].local_world_size;
      const int count = round.nodes[static_cast<size_t>(node)].local_world_size;
      say("node " + std::to_string(node) + " (" + round.nodes[static_cast<size_t>(node)].hostname +
          ") stopped responding; the job goes on without ranks " + std::to_string(first) + ".." +
          std::to_string(first + count - 1));
      const std::shared_ptr<Store> workers = rdzv_->workers_view(round);
      for (int slot = first; slot < first + count; ++slot) {
        ElasticGroup::mark_slot_gone(*workers, slot);
      }
    }
  }

  std::vector<std::string> failure_records(const WorkerGroup& group, const Round& round) {
    std::vector<std::string> out;
    for (const WorkerExit& e : group.exits()) {
      if (!e.failed() || e.stopped_by_us) continue;
      FailureRecord r;
      r.global_rank = e.global_rank;
      r.local_rank = e.local_rank;
      r.node_rank = round.node_rank;
      r.round = round.round;
      r.host = host_;
      r.exit_code = e.exit_code;
      r.signal = e.signal;
      r.time_us =
          std::chrono::duration_cast<std::chrono::microseconds>(e.when.time_since_epoch()).count();
      const int files = static_cast<int>(options_.redirects.for_rank(e.local_rank)) |
                        static_cast<int>(options_.tee.for_rank(e.local_rank));
      if (files & 2) {
        r.log_file = (dir_.worker_dir(round.round, e.local_rank) / "stderr.log").string();
      }
      r.error_file = error_files_[static_cast<size_t>(e.local_rank)];
      std::tie(r.error, r.traceback) = read_error_file(r.error_file);
      const int64_t written = error_file_time_us(r.error_file);
      if (written > 0 && written < r.time_us) r.time_us = written;  // it failed then
      r.stderr_tail = group.stderr_tail(e.local_rank, kTailLines);
      say("worker rank " + std::to_string(r.global_rank) + " (local rank " +
          std::to_string(r.local_rank) + ") failed with " +
          (r.signal != 0 ? signal_name(r.signal) : "exit code " + std::to_string(r.exit_code)));
      out.push_back(serialize(r));
    }
    return out;
  }

  // Before a restart, says what ended the round elsewhere: other nodes' failed workers,
  // and nodes that were lost or left (which the rendezvous records as plain sentences).
  void tell_other_failures(const Round& round) {
    const std::vector<std::string> all = rdzv_->failure_records();
    for (size_t i = records_seen_; i < all.size(); ++i) {
      try {
        const FailureRecord r = parse_failure(all[i]);
        if (r.node_rank == round.node_rank || r.round != round.round) continue;
        say("worker rank " + std::to_string(r.global_rank) + " on " + r.host + " (node rank " +
            std::to_string(r.node_rank) + ") failed with " +
            (r.signal != 0 ? signal_name(r.signal) : "exit code " + std::to_string(r.exit_code)));
      } catch (const Error&) {
        say(all[i]);
      }
    }
    records_seen_ = all.size();
  }

  // The summary is about the attempt that ended the job; earlier rounds' failures were
  // reported as they happened. The run directory goes unless it holds log files: the
  // error files' contents are in the summary.
  int give_up(const Round& round) {
    std::vector<FailureRecord> records;
    std::string node_events;
    const std::vector<std::string> all = rdzv_->failure_records();
    for (size_t i = 0; i < all.size(); ++i) {
      try {
        FailureRecord r = parse_failure(all[i]);
        if (r.round == round.round) records.push_back(std::move(r));
      } catch (const Error&) {
        if (i >= records_seen_) node_events += "  " + all[i] + "\n";
      }
    }
    std::string summary =
        format_summary(options_.rdzv_id, records, round.restart_count, options_.max_restarts);
    if (!node_events.empty()) summary += "Node events:\n" + node_events;
    if (::write(STDERR_FILENO, summary.data(), summary.size()) < 0) {
      // stderr is gone; the exit status still tells.
    }
    return records.empty() ? 1 : summary_exit_code(records);
  }

  static constexpr size_t kTailLines = 20;

  const Options& options_;
  const bool fresh_token_;
  const std::string host_;
  RunDirectory dir_;
  Signals& signals_;
  NodeRendezvous* rdzv_ = nullptr;
  std::vector<std::string> error_files_;
  size_t records_seen_ = 0;  // failure records already told (tell_other_failures)
  int signalled_ = 0;
  const std::string trace_dir_ = setting_string("TDIST_TRACE");  // the workers inherit it
  int world_size_ = 0;                                           // of the last round
  int elastic_restarts_ = 0;                                     // replacements started (--elastic)
  int spares_started_ = 0;  // this round's spares (--elastic-spares)
  JobRecordFile job_record_;
};

}  // namespace

int run_agent(const Options& options, bool fresh_token) {
  return Agent(options, fresh_token).run();
}

}  // namespace tdist::launcher
