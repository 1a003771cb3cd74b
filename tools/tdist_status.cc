// tdist-status: what every rank of a running (or hung) job is doing, asked through the job's
// store (diag/status.h). Usage: tdist-status [HOST:PORT | --job PID] [--wait SECONDS]
//   HOST:PORT   the job's store: MASTER_ADDR:MASTER_PORT, or tdistrun's --rdzv-endpoint
//   --job PID   the job of the tdistrun with that pid on this machine
//   (neither)   the job of the one tdistrun of this user running on this machine
//   --wait S    how long ranks have to answer (default 2)
// tdistrun's jobs are found through their job records (diag/job_record.h), which also
// hold the token tdistrun made for a job. Otherwise the job's token and TLS files come from
// the environment as for any tdist process (TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE;
// TDIST_TLS_*); a token set there wins over a record's. Prints one block per rank: host,
// pid, state (computing / in collective X #N for T s / no answer), the last collective it
// finished and, while it waits in a collective, the ranks that have not called it.
// Exit status: 0 when every rank answered, 1 when some did not, 2 on bad input or when no
// job is found at HOST:PORT.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "diag/job_record.h"
#include "diag/status.h"
#include "net/address.h"
#include "tdist/error.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"

namespace {

using tdist::diag::GroupStatus;
using tdist::diag::RankStatus;

const char* const kUsage = "usage: tdist-status [HOST:PORT | --job PID] [--wait SECONDS]\n";

int usage(const std::string& why) { return tdist::cli::usage_error("tdist-status", why, kUsage); }

// Which job to ask: HOST:PORT as given, else a tdistrun's record (by `pid`, or the only one
// running); takes the record's token when the environment gives none. Empty, with the
// reason on stderr, when there is no such job.
std::string choose_job(const std::string& endpoint, long pid) {
  std::vector<tdist::diag::JobRecord> records;
  try {
    records = tdist::diag::live_job_records();
  } catch (const tdist::Error&) {
    if (endpoint.empty()) throw;  // HOST:PORT given: the records only might add a token
  }
  const tdist::diag::JobRecord* chosen = nullptr;
  for (const auto& r : records) {
    if ((!endpoint.empty() && r.endpoint == endpoint) || (pid != 0 && r.pid == pid)) chosen = &r;
  }
  if (endpoint.empty() && pid == 0) {
    if (records.size() == 1) chosen = &records[0];
    if (records.empty()) {
      std::cerr << "tdist-status: no tdistrun of yours runs on this machine; give the job's "
                   "store as HOST:PORT\n";
      return "";
    }
    if (records.size() > 1) {
      std::cerr << "tdist-status: " << records.size() << " tdistruns of yours run here; "
                << "choose one with --job PID (or give HOST:PORT):\n";
      for (const auto& r : records) {
        std::cerr << "  --job " << r.pid << "   run id " << r.run_id << ", store " << r.endpoint
                  << "\n";
      }
      return "";
    }
  }
  if (pid != 0 && chosen == nullptr) {
    std::cerr << "tdist-status: no tdistrun of yours with pid " << pid << " runs here\n";
    return "";
  }
  const bool token_given = tdist::setting_is_present("TDIST_AUTH_TOKEN") ||
                           tdist::setting_is_present("TDIST_AUTH_TOKEN_FILE");
  if (chosen != nullptr && !chosen->token.empty() && !token_given) {
    ::setenv("TDIST_AUTH_TOKEN", chosen->token.c_str(), 1);
  }
  return endpoint.empty() ? chosen->endpoint : endpoint;
}

void print_rank(int rank, const RankStatus* status, const std::map<int, RankStatus>& answers) {
  if (status == nullptr) {
    std::cout << "rank " << rank << ": no answer (dead, or its process is stopped)\n";
    return;
  }
  std::cout << "rank " << rank << " (" << status->host << " pid " << status->pid << "): ";
  bool busy = false;
  for (const GroupStatus& g : status->groups) {
    if (g.current_state != "started" && g.current_state != "queued") continue;
    busy = true;
    std::cout << (g.current_state == "started" ? "in " : "about to run ") << g.current_op
              << " of group " << g.name << " (" << g.backend << ")";
    if (g.current_state == "started") std::cout << " for " << g.current_ms / 1000.0 << " s";
    std::cout << "\n";
    const auto missing = tdist::diag::missing_ranks(g, answers, g.current_seq);
    for (const std::string& m : missing) std::cout << "    waiting for " << m << "\n";
  }
  if (!busy) std::cout << "computing (in no collective)\n";
  for (const GroupStatus& g : status->groups) {
    std::cout << "    group " << g.name << ": last finished "
              << (g.last_op.empty() ? std::string("none") : g.last_op) << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = tdist::cli;
  std::string endpoint;
  double wait_s = 2.0;
  long pid = 0;
  CLI::App app;
  app.set_help_flag();  // as a switch that stops the parse: what follows it does not count
  cli::add_switch(app, "-h,--help", [](const auto&, const auto&) { throw CLI::CallForHelp(); });
  cli::add_value(app, "--wait", [&wait_s](const auto&, const auto& value) {
    if (!value) throw cli::UsageError("--wait needs a number of seconds");
    char* end = nullptr;
    wait_s = std::strtod(value->c_str(), &end);
    if (end == value->c_str() || *end != '\0' || !(wait_s > 0 && wait_s <= 3600)) {
      throw cli::UsageError("--wait must be seconds in (0, 3600], not '" + *value + "'");
    }
  });
  cli::add_value(app, "--job", [&pid](const auto&, const auto& value) {
    if (!value) throw cli::UsageError("--job needs tdistrun's pid");
    char* end = nullptr;
    pid = std::strtol(value->c_str(), &end, 10);
    if (end == value->c_str() || *end != '\0' || pid <= 0) {
      throw cli::UsageError("--job needs tdistrun's pid, not '" + *value + "'");
    }
  });
  cli::add_positionals(
      app, "endpoint", [&](const std::string& arg) { endpoint = arg; }, false);
  const cli::Parsed parsed = cli::parse(
      app, argc, argv, [](const std::string& arg) { return "unexpected argument '" + arg + "'"; });
  if (!parsed.error.empty()) return usage(parsed.error);
  if (parsed.help) return cli::print_help(stderr, kUsage);
  if (!endpoint.empty() && pid != 0) return usage("give HOST:PORT or --job, not both");
  try {
    endpoint = choose_job(endpoint, pid);
    if (endpoint.empty()) return 2;
    const tdist::net::HostPort hp = tdist::net::parse_host_port(endpoint);
    tdist::TCPStoreOptions options;
    options.port = hp.port;
    options.connect_timeout = std::chrono::seconds(5);
    tdist::TCPStore store(hp.host, options);
    const tdist::diag::StatusEndpoint job = tdist::diag::find_status_endpoint(store);
    if (job.ns.empty()) {
      std::cerr << "tdist-status: no tdist job has published its status at " << endpoint
                << " (it calls init_process_group there?)\n";
      return 2;
    }
    const auto answers = tdist::diag::ask_status(
        store, job, std::chrono::milliseconds(static_cast<long long>(wait_s * 1000)));
    std::cout << "job at " << endpoint << ": " << job.world_size << " ranks, " << answers.size()
              << " answered within " << wait_s << " s\n";
    for (int r = 0; r < job.world_size; ++r) {
      auto it = answers.find(r);
      print_rank(r, it == answers.end() ? nullptr : &it->second, answers);
    }
    return static_cast<int>(answers.size()) == job.world_size ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "tdist-status: " << e.what() << "\n";
    return 2;
  }
}
