// launcher_flaky_worker: a worker that fails on purpose, for tdistrun's restart, failure
// summary, signal and orphan tests.
//
//   launcher_flaky_worker [--fail-attempts K] [--fail-rank R] [--sleep-ms M]
//                         [--exit-code C | --signal S | --throw MSG] [--hang] [--ignore-term]
//
// It fails while TORCHELASTIC_RESTART_COUNT < K, on every rank or only on RANK == R: after
// sleeping M ms it exits with C (default 3), or raises signal S (a number or a name such
// as SEGV), or, with --throw, installs tdist::record_errors() and lets a tdist::Error(MSG)
// escape main, so the error reaches TORCHELASTIC_ERROR_FILE. When it does not fail it
// joins the job (init_process_group("tcp") over env://, a barrier, destroy) and exits 0,
// or with --hang sleeps until a signal ends it. --ignore-term ignores SIGTERM, so only
// the launcher's SIGKILL after its grace period ends the process.
// Before anything else it writes its pid to $FLAKY_PID_DIR/<RANK>.pid when that is set
// (a temporary name renamed into place), so orphan tests know whom to look for.
// Core dumps are disabled, so the intentional crashes leave no core files behind.
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/error_file.h"

namespace {

struct Options {
  int fail_attempts = 0;
  int fail_rank = -1;  // -1: every rank fails
  int exit_code = 3;
  int signal = 0;  // 0: exit with exit_code instead
  bool throws = false;
  std::string message;
  int sleep_ms = 0;
  bool hang = false;
  bool ignore_term = false;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--fail-attempts K] [--fail-rank R] [--sleep-ms M] "
               "[--exit-code C | --signal S | --throw MSG] [--hang] [--ignore-term]\n",
               argv0);
  std::exit(2);
}

int parse_int(const char* text, const char* argv0) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < -1 || value > 1'000'000'000) {
    usage(argv0);
  }
  return static_cast<int>(value);
}

// A signal number, or a name with or without "SIG" ("SEGV", "SIGKILL").
int parse_signal(const char* text, const char* argv0) {
  if (std::strncmp(text, "SIG", 3) == 0) text += 3;
  for (int s = 1; s < NSIG; ++s) {
    const char* name = sigabbrev_np(s);
    if (name != nullptr && std::strcmp(name, text) == 0) return s;
  }
  int s = parse_int(text, argv0);
  if (s <= 0 || s >= NSIG) usage(argv0);
  return s;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--hang") {
      o.hang = true;
    } else if (arg == "--ignore-term") {
      o.ignore_term = true;
    } else if (!has_value) {
      usage(argv[0]);
    } else if (arg == "--fail-attempts") {
      o.fail_attempts = parse_int(argv[++i], argv[0]);
    } else if (arg == "--fail-rank") {
      o.fail_rank = parse_int(argv[++i], argv[0]);
    } else if (arg == "--exit-code") {
      o.exit_code = parse_int(argv[++i], argv[0]);
    } else if (arg == "--signal") {
      o.signal = parse_signal(argv[++i], argv[0]);
    } else if (arg == "--sleep-ms") {
      o.sleep_ms = parse_int(argv[++i], argv[0]);
    } else if (arg == "--throw") {
      o.throws = true;
      o.message = argv[++i];
    } else {
      usage(argv[0]);
    }
  }
  return o;
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value == nullptr || *value == '\0' ? fallback : std::atoi(value);
}

// Exits 1 when the file cannot be written: a test waiting for it would only time out.
void write_pid_file(const std::string& rank) {
  const char* dir = std::getenv("FLAKY_PID_DIR");
  if (dir == nullptr) return;
  std::string path = std::string(dir) + "/" + rank + ".pid";
  std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << ::getpid() << "\n";
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "flaky_worker: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    std::exit(1);
  }
}

int join_job(const std::string& rank) {
  try {
    tdist::init_process_group("tcp");
    tdist::get_default_group()->barrier()->wait();
    tdist::destroy_process_group();
  } catch (const tdist::Error& e) {
    std::fprintf(stderr, "flaky_worker rank %s: %s\n", rank.c_str(), e.what());
    return 1;
  }
  return 0;
}

[[noreturn]] void fail(const Options& o) {
  if (o.throws) {
    tdist::record_errors();
    throw tdist::Error(o.message);
  }
  if (o.signal != 0) {
    std::signal(o.signal, SIG_DFL);
    std::raise(o.signal);
  }
  // Reached also when the signal's default action is to continue (SIGCHLD, SIGCONT...).
  std::exit(o.exit_code);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (o.ignore_term) std::signal(SIGTERM, SIG_IGN);

  std::string rank_text = std::getenv("RANK") == nullptr ? "unset" : std::getenv("RANK");
  write_pid_file(rank_text);
  bool my_turn = o.fail_rank < 0 || env_int("RANK", -1) == o.fail_rank;
  if (my_turn && env_int("TORCHELASTIC_RESTART_COUNT", 0) < o.fail_attempts) {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.sleep_ms));
    fail(o);
  }
  if (o.hang) {
    for (;;) ::pause();
  }
  return join_job(rank_text);
}
