// The launcher's JSON, failure records, torch's error files (including ones written by
// torch's own @record and read back by torch) and the failure summary.
#include "tdistrun/failure.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/expect_invalid.h"
#include "support/temp_dir.h"
#include "tdist/error.h"
#include "tdist/error_file.h"

namespace tdist::launcher {
namespace {

using std::string_literals::operator""s;
using test_support::read_file;
using test_support::TempDir;

// Sets an environment variable for a scope and restores it afterwards.
class ScopedVar {
 public:
  ScopedVar(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedVar() {
    if (saved_) {
      ::setenv(name_, saved_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedVar(const ScopedVar&) = delete;
  ScopedVar& operator=(const ScopedVar&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// ---- error files -----------------------------------------------------------------------

TEST(LauncherErrorFile, ReadsTorchDictFormat) {
  TempDir dir;
  // As torch's ErrorHandler.record_exception writes it (json.dump: ASCII, \u escapes).
  const std::string path = dir.write(
      "error.json",
      R"({"message": {"message": "RuntimeError: caf\u00e9 \"broke\"", "extraInfo": )"
      R"({"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3, in )"
      R"(main\nRuntimeError: caf\u00e9 \"broke\"\n", "timestamp": "1700000000"}}})");
  auto [message, traceback] = read_error_file(path);
  EXPECT_EQ(message, "RuntimeError: caf\xc3\xa9 \"broke\"");
  EXPECT_EQ(traceback,
            "Traceback (most recent call last):\n  File \"t.py\", line 3, in main\n"
            "RuntimeError: caf\xc3\xa9 \"broke\"\n");
  // torch's parent agents add errorCode; extra fields are ignored.
  dir.write("error.json", R"({"message": {"message": "E: x", "errorCode": 1, "extraInfo": {}}})");
  EXPECT_EQ(read_error_file(path), std::make_pair(std::string("E: x"), std::string()));
}

TEST(LauncherErrorFile, TracebackWithoutMessageGivesItsLastLine) {
  TempDir dir;
  const std::string path = dir.write(
      "error.json",
      R"({"message": {"extraInfo": {"py_callstack": "Traceback:\n  x\nKeyError: 'k'\n\n"}}})");
  auto [message, traceback] = read_error_file(path);
  EXPECT_EQ(message, "KeyError: 'k'");
  EXPECT_EQ(traceback, "Traceback:\n  x\nKeyError: 'k'\n\n");
}

TEST(LauncherErrorFile, ReadsPlainStringFormat) {
  TempDir dir;
  const std::string path =
      dir.write("error.json", R"({"message": "Signal 9 (SIGKILL) received", "timestamp": 12})");
  EXPECT_EQ(read_error_file(path),
            std::make_pair(std::string("Signal 9 (SIGKILL) received"), std::string()));
}

TEST(LauncherErrorFile, MissingEmptyOrGarbageGivesNothing) {
  TempDir dir;
  const std::pair<std::string, std::string> nothing;
  EXPECT_EQ(read_error_file(dir.file("absent.json")), nothing);
  EXPECT_EQ(read_error_file(dir.write("empty.json", "")), nothing);
  EXPECT_EQ(read_error_file(dir.write("garbage.json", "Traceback: not json at all")), nothing);
  EXPECT_EQ(read_error_file(dir.write("half.json", R"({"message": {"message": "cut)")), nothing);
  EXPECT_EQ(read_error_file(dir.write("number.json", R"({"message": 5})")), nothing);
  EXPECT_EQ(read_error_file(dir.write("array.json", "[1, 2]")), nothing);
  EXPECT_EQ(read_error_file(dir.write("other.json", R"({"error": "x"})")), nothing);
  ASSERT_EQ(::mkdir(dir.file("a_directory").c_str(), 0755), 0);
  EXPECT_EQ(read_error_file(dir.file("a_directory")), nothing);
}

TEST(LauncherErrorFile, ReadsWhatTdistWrites) {
  TempDir dir;
  const std::string path = dir.file("error.json");
  ScopedVar var("TORCHELASTIC_ERROR_FILE", path);
  const std::string text = "tdist::PeerError: rank 3 \"gone\"\n\tat step 7 \xc3\xa9 \x02";
  write_error_file(text);
  auto [message, traceback] = read_error_file(path);
  EXPECT_EQ(message, text);
  EXPECT_EQ(traceback, text);  // C++ has no Python stack; torch shows py_callstack
}

// ---- torch itself ----------------------------------------------------------------------

constexpr const char* kPython = "/usr/bin/python3";

// Runs kPython -c `script` args... with TORCHELASTIC_ERROR_FILE=error_file and its output
// in `log`; returns the wait status, or nullopt when it did not finish within 100 s.
std::optional<int> run_python(const std::string& script, const std::vector<std::string>& args,
                              const std::string& error_file, const std::string& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    ::setenv("TORCHELASTIC_ERROR_FILE", error_file.c_str(), 1);
    std::vector<const char*> argv = {kPython, "-c", script.c_str()};
    for (const std::string& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    ::execv(kPython, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  if (pid < 0) return std::nullopt;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(100);
  int status = 0;
  while (true) {
    pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return std::nullopt;
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return std::nullopt;
    }
    ::usleep(20 * 1000);
  }
}

constexpr int kNoTorch = 77;

TEST(LauncherErrorFile, TorchReadsOursAndWeReadTorchRecord) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is not installed";
  TempDir dir;
  const std::string ours = dir.file("tdist_error.json");
  {
    ScopedVar var("TORCHELASTIC_ERROR_FILE", ours);
    write_error_file("tdist::PeerError: rank 1 \"lost\"\nline 2 \xc3\xa9\t\x01");
  }
  // One interpreter (importing torch takes seconds): torch's ProcessFailure parses what
  // tdist wrote, then torch's @record writes the error of a function that raises.
  const std::string torch_file = dir.file("torch_error.json");
  const std::string log = dir.file("log.txt");
  std::optional<int> status = run_python(
      "import sys, time\n"
      "try:\n"
      "    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure, record\n"
      "except ImportError:\n"
      "    sys.exit(77)\n"
      "f = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=sys.argv[1])\n"
      "want = 'tdist::PeerError: rank 1 \"lost\"\\nline 2 \\u00e9\\t\\x01'\n"
      "if (f.message['message'] != want or f.message['extraInfo']['py_callstack'] != want\n"
      "        or abs(f.timestamp - time.time()) > 600):\n"
      "    print('torch read', f.message, f.timestamp)\n"
      "    sys.exit(3)\n"
      "@record\n"
      "def main():\n"
      "    raise ValueError('bad \"value\"\\nline 2 \\u00e9')\n"
      "main()\n",
      {ours}, torch_file, log);
  ASSERT_TRUE(status) << "python did not finish within 100 s";
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == kNoTorch) {
    GTEST_SKIP() << kPython << " cannot import torch.distributed.elastic.multiprocessing.errors "
                 << "(install python3-torch to check against torch itself)";
  }
  // 1 = the ValueError; 3 = torch misread our file.
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1)
      << "status " << *status << ": " << read_file(log);
  auto [message, traceback] = read_error_file(torch_file);
  EXPECT_EQ(message, "ValueError: bad \"value\"\nline 2 \xc3\xa9") << read_file(torch_file);
  EXPECT_EQ(traceback.rfind("Traceback (most recent call last):\n", 0), 0u) << traceback;
  EXPECT_NE(traceback.find("File \"<string>\", line 14, in main"), std::string::npos) << traceback;
}

// ---- records and the summary -----------------------------------------------------------

FailureRecord sample(int global_rank, int64_t time_us) {
  FailureRecord r;
  r.global_rank = global_rank;
  r.local_rank = global_rank % 4;
  r.node_rank = global_rank / 4;
  r.round = 2;
  r.host = "node" + std::to_string(global_rank / 4);
  r.exit_code = 1;
  r.time_us = time_us;
  r.error_file = "/tmp/tdistrun/attempt_2/" + std::to_string(global_rank) + "/error.json";
  return r;
}

TEST(LauncherFailureRecord, SerializeRoundTrips) {
  FailureRecord r = sample(5, 1700000000123456);
  r.signal = 9;
  r.log_file = "/logs/5/stderr.log";
  r.error = "tdist::PeerError: \"x\" \xc3\xa9";
  r.traceback = "Traceback:\n\tline\n";
  r.stderr_tail = "a\nb\x01\n";
  const std::string text = serialize(r);
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(parse_failure(text), r);
  EXPECT_EQ(parse_failure(serialize(FailureRecord{})), FailureRecord{});
}

// A worker's stderr may hold any bytes: invalid UTF-8 becomes U+FFFD, and the line parses.
TEST(LauncherFailureRecord, InvalidUtf8IsRepairedSoTheRecordParses) {
  FailureRecord r;
  r.host = "h";
  r.stderr_tail = std::string("bad \xff byte\n\x01 ok \xc3\xa9");
  const std::string line = serialize(r);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  const FailureRecord back = parse_failure(line);
  EXPECT_EQ(back.stderr_tail, "bad \xef\xbf\xbd byte\n\x01 ok \xc3\xa9");
  EXPECT_EQ(back.host, "h");
}

TEST(LauncherFailureRecord, ParseRejectsGarbage) {
  EXPECT_INVALID(parse_failure("garbage"), "not a failure record", "parse error");
  EXPECT_INVALID(parse_failure("[]"), "not a failure record", "not a JSON object");
  std::string text = serialize(sample(1, 1));
  std::string no_host = text;
  no_host.replace(no_host.find("\"host\""), 6, "\"hots\"");
  EXPECT_INVALID(parse_failure(no_host), "not a failure record", "\"host\" is missing");
  std::string bad_rank = text;
  bad_rank.replace(bad_rank.find("\"global_rank\":1"), 15, "\"global_rank\":\"1\"");
  EXPECT_INVALID(parse_failure(bad_rank), "\"global_rank\" is missing or not an integer");
  std::string big = text;
  big.replace(big.find("\"global_rank\":1"), 15, "\"global_rank\":4294967296");
  EXPECT_INVALID(parse_failure(big), "\"global_rank\"", "out of range");
}

TEST(LauncherFailureRecord, SignalNames) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGABRT), "SIGABRT");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGBUS), "SIGBUS");
  EXPECT_EQ(signal_name(SIGRTMIN), "SIGRTMIN");
  EXPECT_EQ(signal_name(SIGRTMIN + 2), "SIGRTMIN+2");
  EXPECT_EQ(signal_name(999), "signal 999");
}

// Sets the time zone (TZ) for a scope, so times print predictably.
class ScopedZone {
 public:
  explicit ScopedZone(const char* tz) {
    if (const char* v = std::getenv("TZ")) saved_ = v;
    ::setenv("TZ", tz, 1);
    ::tzset();
  }
  ~ScopedZone() {
    if (saved_) {
      ::setenv("TZ", saved_->c_str(), 1);
    } else {
      ::unsetenv("TZ");
    }
    ::tzset();
  }
  ScopedZone(const ScopedZone&) = delete;
  ScopedZone& operator=(const ScopedZone&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST(LauncherSummary, OneFailureInFull) {
  ScopedZone utc("UTC");
  FailureRecord r = sample(1, 1700000000123456);
  r.error = "tdist::PeerError: rank 0 closed the connection";
  r.traceback = r.error;  // as tdist's C++ programs write it: shown once
  r.stderr_tail = "warming up\nstep 3\n";
  EXPECT_EQ(format_summary("job42", {r}, 0, 0),
            "tdistrun: run job42 failed: 1 worker failed; restarts used: 0 of 0\n"
            "Root cause (first failure):\n"
            "  rank 1 (local rank 1) on node0 (node rank 0), round 2: exit code 1\n"
            "    time: 2023-11-14T22:13:20.123+00:00\n"
            "    log file: <console>\n"
            "    error: tdist::PeerError: rank 0 closed the connection\n"
            "    stderr tail:\n"
            "      warming up\n"
            "      step 3\n");
}

TEST(LauncherSummary, RootCauseFirstThenTimeOrderWithoutDuplicates) {
  ScopedZone utc("UTC");
  const int64_t t = 1700000000000000;
  FailureRecord killed = sample(6, t + 2000000);  // last, killed, wrote nothing
  killed.exit_code = 0;
  killed.signal = SIGKILL;
  FailureRecord root = sample(3, t);
  root.log_file = "/logs/3/stderr.log";
  root.error = "ValueError: bad\nsecond line";
  root.traceback = "Traceback (most recent call last):\n  File \"t.py\"\nValueError: bad\n";
  FailureRecord second = sample(0, t + 1000000);
  second.exit_code = 2;
  second.error = "tdist::PeerError: rank 3 died";
  second.stderr_tail = "boom\n";
  const std::string s = format_summary("run-7", {killed, second, root, second, killed}, 3, 3);

  EXPECT_EQ(s.rfind("tdistrun: run run-7 failed: 3 workers failed; restarts used: 3 of 3\n", 0), 0u)
      << s;
  const size_t at_root_header = s.find("Root cause (first failure):\n");
  const size_t at_root =
      s.find("  rank 3 (local rank 3) on node0 (node rank 0), round 2: exit code 1\n");
  const size_t at_others = s.find("Other failures (in time order):\n");
  const size_t at_second =
      s.find("  rank 0 (local rank 0) on node0 (node rank 0), round 2: exit code 2\n");
  const size_t at_killed =
      s.find("  rank 6 (local rank 2) on node1 (node rank 1), round 2: signal SIGKILL (9)\n");
  ASSERT_NE(at_killed, std::string::npos) << s;
  EXPECT_LT(at_root_header, at_root) << s;
  EXPECT_LT(at_root, at_others) << s;
  EXPECT_LT(at_others, at_second) << s;
  EXPECT_LT(at_second, at_killed) << s;
  // Duplicates are shown once.
  EXPECT_EQ(s.find("  rank 6 ", at_killed + 1), std::string::npos) << s;
  EXPECT_EQ(s.find("  rank 0 ", at_second + 1), std::string::npos) << s;

  EXPECT_NE(s.find("    time: 2023-11-14T22:13:20.000+00:00\n    log file: /logs/3/stderr.log\n"
                   "    error:\n      ValueError: bad\n      second line\n"
                   "    traceback:\n      Traceback (most recent call last):\n"
                   "        File \"t.py\"\n      ValueError: bad\n"
                   "    stderr tail: (nothing captured)\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("    time: 2023-11-14T22:13:21.000+00:00\n    log file: <console>\n"
                   "    error: tdist::PeerError: rank 3 died\n    stderr tail:\n      boom\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("    error: no error reported; see the stderr tail below\n", at_killed),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("<N/A>"), std::string::npos) << s;
  EXPECT_EQ(s.back(), '\n');
}

TEST(LauncherSummary, LocalTimeCarriesItsOffset) {
  ScopedZone zone("UTC-05:30");  // POSIX: 5 h 30 min east of UTC
  const std::string s = format_summary("r", {sample(0, 1700000000999000)}, 0, 1);
  EXPECT_NE(s.find("    time: 2023-11-15T03:43:20.999+05:30\n"), std::string::npos) << s;
}

TEST(LauncherSummary, ExitCode) {
  EXPECT_EQ(summary_exit_code({}), 1);
  FailureRecord first = sample(2, 100);
  first.exit_code = 3;
  FailureRecord later = sample(0, 200);
  later.exit_code = 0;
  later.signal = SIGSEGV;
  EXPECT_EQ(summary_exit_code({later, first}), 3);
  EXPECT_EQ(summary_exit_code({later}), 128 + SIGSEGV);
  later.time_us = 50;
  EXPECT_EQ(summary_exit_code({first, later}), 128 + SIGSEGV);
  // Same time: the lower global rank is the root cause.
  FailureRecord tie = sample(1, 100);
  tie.exit_code = 7;
  EXPECT_EQ(summary_exit_code({first, tie}), 7);
  // A root cause that exited 0 (stopped cleanly, say) still fails the launcher.
  FailureRecord clean = sample(0, 1);
  clean.exit_code = 0;
  EXPECT_EQ(summary_exit_code({clean, first}), 1);
}

}  // namespace
}  // namespace tdist::launcher
