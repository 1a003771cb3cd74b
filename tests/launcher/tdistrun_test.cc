// End-to-end tests of the tdistrun binary on one node, what a run looks like: the
// environment contract the workers get, console and log-file output, two jobs side by
// side, refused command lines, and help. Failing workers, restarts and signals are in
// tdistrun_lifecycle_test.cc; the fixture (tdistrun_test_util.h) says how the launcher is
// started and checked.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "launcher/tdistrun_test_util.h"
#include "tdist/settings.h"

namespace tdist::tdistrun_test {
namespace {

// --- The environment contract ------------------------------------------------------------

TEST_F(TdistrunTest, EveryWorkerGetsTheContractAndTheGroupForms) {
  const Result r = run({"--nproc-per-node", "3", "--max-restarts", "4", "--rdzv-id", "envjob",
                        "--role", "trainer", kEnvWorker, "--init"},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string()});
  ASSERT_EQ(r.code, 0) << r.err;  // --init: all_reduce and barrier through the launcher's store
  std::set<std::string> error_files, ports;
  for (int rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    const std::string r_text = std::to_string(rank);
    EXPECT_EQ(vars["RANK"], r_text);
    EXPECT_EQ(vars["LOCAL_RANK"], r_text);
    EXPECT_EQ(vars["WORLD_SIZE"], "3");
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(vars["GROUP_RANK"], "0");
    EXPECT_EQ(vars["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(vars["ROLE_RANK"], r_text);
    EXPECT_EQ(vars["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(vars["ROLE_NAME"], "trainer");
    EXPECT_EQ(vars["MASTER_ADDR"], "127.0.0.1");
    const int port = std::atoi(vars["MASTER_PORT"].c_str());
    EXPECT_TRUE(port > 0 && port < 65536) << vars["MASTER_PORT"];
    ports.insert(vars["MASTER_PORT"]);
    EXPECT_EQ(vars["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(vars["TORCHELASTIC_MAX_RESTARTS"], "4");
    EXPECT_EQ(vars["TORCHELASTIC_RUN_ID"], "envjob");
    EXPECT_NE(vars["TORCHELASTIC_ERROR_FILE"], "<unset>");
    error_files.insert(vars["TORCHELASTIC_ERROR_FILE"]);
    EXPECT_EQ(vars["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "1");
  }
  EXPECT_EQ(error_files.size(), 3u);
  EXPECT_EQ(ports.size(), 1u);
}

TEST_F(TdistrunTest, DefaultsAndTheUsersThreadCountsAreKept) {
  const Result r = run({"--nproc-per-node", "2", kEnvWorker},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string(), "OPENBLAS_NUM_THREADS=6"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::string> run_ids;
  for (int rank = 0; rank < 2; ++rank) {
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    EXPECT_EQ(vars["ROLE_NAME"], "default");
    EXPECT_EQ(vars["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(vars["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "6");
    run_ids.insert(vars["TORCHELASTIC_RUN_ID"]);
  }
  // A one-node job without --rdzv-id gets one random id, shared by its workers.
  ASSERT_EQ(run_ids.size(), 1u);
  EXPECT_NE(*run_ids.begin(), "none");
  EXPECT_NE(*run_ids.begin(), "<unset>");
}

TEST_F(TdistrunTest, OneWorkerGetsNoThreadLimits) {
  const Result r =
      run({"--nproc-per-node", "1", kEnvWorker}, {"ENV_WORKER_OUT_DIR=" + dir_.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  auto vars = read_env_report(dir_ / "rank_0.env");
  EXPECT_EQ(vars["WORLD_SIZE"], "1");
  EXPECT_EQ(vars["OMP_NUM_THREADS"], "<unset>");
  EXPECT_EQ(vars["OPENBLAS_NUM_THREADS"], "<unset>");
  EXPECT_EQ(vars["TDIST_LAZY_CONNECT"], "<unset>");
}

// --elastic: the workers connect lazily (an elastic reconfigure then costs no full mesh),
// unless the user's environment says otherwise.
TEST_F(TdistrunTest, ElasticWorkersConnectLazilyUnlessTheUserSaysOtherwise) {
  Result r = run({"--nproc-per-node", "1", "--elastic", kEnvWorker},
                 {"ENV_WORKER_OUT_DIR=" + dir_.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_env_report(dir_ / "rank_0.env")["TDIST_LAZY_CONNECT"], "1");
  r = run({"--nproc-per-node", "1", "--elastic", kEnvWorker},
          {"ENV_WORKER_OUT_DIR=" + dir_.string(), "TDIST_LAZY_CONNECT=0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_env_report(dir_ / "rank_0.env")["TDIST_LAZY_CONNECT"], "0");
}

TEST_F(TdistrunTest, PythonTorchProgramRunsUnmodified) {
  const std::string python = "/usr/bin/python3";
  Process probe(dir_, {python, "-c", "import torch, torch.distributed"}, env());
  if (probe.wait(30s) != 0) {
    GTEST_SKIP() << python << " cannot import torch and torch.distributed: " << probe.err();
  }
  const Result r = run({"--nproc-per-node", "2", (kPyDir / "env_printer.py").string(), "--init"},
                       {"ENV_WORKER_OUT_DIR=" + dir_.string(), "PYTHON=" + python}, 60s);
  ASSERT_EQ(r.code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    auto vars = read_env_report(dir_ / ("rank_" + std::to_string(rank) + ".env"));
    EXPECT_EQ(vars["RANK"], std::to_string(rank));
    EXPECT_EQ(vars["WORLD_SIZE"], "2");
    EXPECT_EQ(vars["LOCAL_WORLD_SIZE"], "2");
  }
}

// --- Output ------------------------------------------------------------------------------

// The lines `launcher_echo_worker lines N TAG` prints.
std::vector<std::string> echo_lines(int count, const std::string& tag) {
  std::vector<std::string> lines;
  for (int i = 0; i < count; ++i) {
    lines.push_back(tag + " line " + std::to_string(i) + " " + std::string(80, 'x'));
  }
  return lines;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// The console lines of each rank with their "[host:rank N]:" prefix removed; a line with
// another prefix lands under rank -1.
std::map<int, std::vector<std::string>> by_prefix(const std::string& console) {
  std::map<int, std::vector<std::string>> out;
  const std::string host = "[" + hostname() + ":rank ";
  for (const std::string& line : split_lines(console)) {
    const size_t close = line.find("]:");
    if (line.rfind(host, 0) != 0 || close == std::string::npos) {
      out[-1].push_back(line);
      continue;
    }
    out[std::stoi(line.substr(host.size(), close - host.size()))].push_back(line.substr(close + 2));
  }
  return out;
}

TEST_F(TdistrunTest, TeePrefixesWholeLinesAndKeepsRawFiles) {
  // 200 lines of ~100 bytes: several stdio buffers, so the pipe sees lines cut anywhere.
  const Result r = run({"--nproc-per-node", "2", "--tee", "3", "--log-dir", dir_.string(),
                        "--rdzv-id", "teejob", kEchoWorker, "lines", "200", "T"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto console = by_prefix(r.out);
  EXPECT_EQ(console.count(-1), 0u) << console[-1].front();
  const std::vector<std::string> expected = echo_lines(200, "T");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(console[rank], expected) << "rank " << rank;
    const fs::path file = dir_ / "teejob" / "attempt_0" / std::to_string(rank) / "stdout.log";
    EXPECT_EQ(read_file(file), joined(expected)) << file;
  }
}

TEST_F(TdistrunTest, RedirectsKeepTheConsoleQuiet) {
  const Result r = run({"--nproc-per-node", "2", "--redirects", "3", "--log-dir", dir_.string(),
                        "--rdzv-id", "redirjob", kEchoWorker, "lines", "20", "R"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path file = dir_ / "redirjob" / "attempt_0" / std::to_string(rank) / "stdout.log";
    EXPECT_EQ(read_file(file), joined(echo_lines(20, "R"))) << file;
  }
}

TEST_F(TdistrunTest, LocalRanksFilterShowsOnlyChosenRanks) {
  const Result r =
      run({"--nproc-per-node", "2", "--tee", "3", "--local-ranks-filter", "1", "--log-dir",
           dir_.string(), "--rdzv-id", "filterjob", kEchoWorker, "lines", "20", "F"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto console = by_prefix(r.out);
  EXPECT_EQ(console.size(), 1u);
  EXPECT_EQ(console[1], echo_lines(20, "F"));
  const fs::path hidden = dir_ / "filterjob" / "attempt_0" / "0" / "stdout.log";
  EXPECT_EQ(read_file(hidden), joined(echo_lines(20, "F"))) << "filtered, yet still in its file";
}

// --- Side by side ----------------------------------------------------------------------------

TEST_F(TdistrunTest, TwoStandaloneJobsRunSideBySide) {
  fs::create_directory(dir_ / "a");
  fs::create_directory(dir_ / "b");
  const std::vector<std::string> args = {"--standalone", "--nproc-per-node", "2", kEnvWorker,
                                         "--init"};
  Process a(dir_, tdistrun(args), env({"ENV_WORKER_OUT_DIR=" + (dir_ / "a").string()}));
  Process b(dir_, tdistrun(args), env({"ENV_WORKER_OUT_DIR=" + (dir_ / "b").string()}));
  EXPECT_EQ(a.wait(kJobLimit), 0) << a.err();
  EXPECT_EQ(b.wait(kJobLimit), 0) << b.err();
  auto va = read_env_report(dir_ / "a" / "rank_0.env");
  auto vb = read_env_report(dir_ / "b" / "rank_0.env");
  EXPECT_NE(va["TDIST_AGENT_STORE"], vb["TDIST_AGENT_STORE"]);
  EXPECT_NE(va["TORCHELASTIC_RUN_ID"], vb["TORCHELASTIC_RUN_ID"]);
}

// --- Bad input ---------------------------------------------------------------------------

TEST_F(TdistrunTest, UnknownFlagIsRefused) {
  expect_refused({"--no-such-flag", kEchoWorker, "env"}, {"--no-such-flag"});
}

TEST_F(TdistrunTest, BadNodeRangeIsRefused) {
  expect_refused({"--nnodes", "3:2", kEchoWorker, "env"}, {"--nnodes", "3:2"});
}

TEST_F(TdistrunTest, MissingProgramIsRefused) {
  const std::string missing = (dir_ / "no_such_program").string();
  expect_refused({"--nproc-per-node", "2", missing}, {missing});
}

// A bad TDIST_* value is refused before any worker starts, with the accepted range.
TEST_F(TdistrunTest, BadSettingIsRefused) {
  expect_refused({"--nproc-per-node", "2", kEchoWorker, "env"},
                 {"TDIST_SOCKET_NSOCKS_PERPEER", "'9'", "1..8"}, {"TDIST_SOCKET_NSOCKS_PERPEER=9"});
  expect_refused({"--nproc-per-node", "2", kEchoWorker, "env"},
                 {"TDIST_LOG_LEVEL", "'loud'", "trace, debug"}, {"TDIST_LOG_LEVEL=loud"});
}

TEST_F(TdistrunTest, PortInUseIsRefused) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  // --node-rank 0 of a static rendezvous must host the store. (Without it, a taken port is
  // taken to mean another local agent hosts, and tdistrun connects to our silent socket.)
  expect_refused({"--nnodes", "1", "--rdzv-backend", "static", "--node-rank", "0", "--master-addr",
                  "127.0.0.1", "--master-port", port, kEchoWorker, "env"},
                 {port, "in use"});
  ::close(fd);
}

// --- Help ----------------------------------------------------------------------------------

TEST_F(TdistrunTest, HelpExplainsEveryFlag) {
  const Result r = run({"--help"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string& flag :
       words("--nproc-per-node --nnodes --node-rank --master-addr --master-port --rdzv-endpoint "
             "--rdzv-id --rdzv-timeout --rdzv-backend --rdzv-conf --standalone --max-restarts "
             "--monitor-interval --term-timeout --redirects --tee --log-dir --local-ranks-filter "
             "--role --module --no-python --run-path --start-method --local-addr --help-env "
             "--version")) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  }
}

TEST_F(TdistrunTest, HelpEnvListsTimeoutWithItsDefault) {
  const Result r = run({"--help-env"});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string default_value(tdist::find_setting("TDIST_TIMEOUT").default_value);
  bool listed = false;
  for (const std::string& line : split_lines(r.out)) {
    const std::vector<std::string> columns = words(line);
    if (columns.size() >= 2 && columns[0] == "TDIST_TIMEOUT") listed = columns[1] == default_value;
  }
  EXPECT_TRUE(listed) << r.out;
}

}  // namespace
}  // namespace tdist::tdistrun_test
