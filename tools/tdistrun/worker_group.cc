// WorkerGroup: fork+exec, watching with poll on the pipes and the signalfd, stopping with a
// grace period (see worker_group.h).
#include "tdistrun/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string_view>
#include <utility>

#include "net/fd.h"
#include "tdist/error.h"
#include "tdistrun/signals.h"
#include "tdistrun/watchdog.h"

namespace tdist::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using net::Fd;

// What the child needs, built before fork: between fork and exec it only makes system
// calls (the launcher may run other threads, such as the store server).
struct ExecPlan {
  std::string path;  // "" when argv[0] was not found on PATH
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::string error_prefix;    // "tdistrun: cannot execute 'x': "
  std::array<int, 3> stdio{};  // the descriptors that become 0, 1 and 2 (-1: inherited)
  pid_t parent = -1;
};

bool is_executable_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// execvp's search, but in the worker's PATH rather than the launcher's.
std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string_view path = "/bin:/usr/bin";  // execvp's default when PATH is unset
  for (const std::string& entry : env) {
    if (entry.rfind("PATH=", 0) == 0) path = std::string_view(entry).substr(5);
  }
  while (true) {
    size_t colon = path.find(':');
    std::string dir(path.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string_view::npos) return "";
    path.remove_prefix(colon + 1);
  }
}

[[noreturn]] void child_fail(const ExecPlan& plan, int error) {
  char message[1024];
  size_t used = std::min(plan.error_prefix.size(), sizeof(message) - 128);
  std::memcpy(message, plan.error_prefix.data(), used);
  const char* reason = ::strerrordesc_np(error);
  if (reason == nullptr) reason = "unknown error";
  size_t reason_size = std::min(std::strlen(reason), sizeof(message) - used - 1);
  std::memcpy(message + used, reason, reason_size);
  used += reason_size;
  message[used++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, message, used);
  (void)ignored;
  ::_exit(127);
}

// Runs in the child between fork and exec: system calls only, no allocation.
[[noreturn]] void exec_child(const ExecPlan& plan) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != plan.parent) ::_exit(1);  // the launcher died before PDEATHSIG was set
  for (int target = 0; target < 3; ++target) {
    int source = plan.stdio[static_cast<size_t>(target)];
    if (source < 0) continue;
    int result = source == target ? ::fcntl(target, F_SETFD, 0) : ::dup2(source, target);
    if (result < 0) child_fail(plan, errno);
  }
  // Descriptors the launcher inherited without close-on-exec stay out of the workers, as
  // with Python's Popen (close_fds) under torchrun.
  ::close_range(3, ~0U, 0);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &default_action, nullptr);
  sigset_t empty;
  ::sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  if (plan.path.empty()) child_fail(plan, ENOENT);
  ::execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  child_fail(plan, errno);
}

// A close-on-exec pipe: [0] read end, [1] write end.
std::array<Fd, 2> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) < 0) TDIST_THROW(Error, "pipe2 failed: ", std::strerror(errno));
  return {Fd(fds[0]), Fd(fds[1])};
}

int poll_timeout_ms(Clock::time_point until) {
  if (until == Clock::time_point::max()) return -1;
  auto left = until - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, INT_MAX));
}

}  // namespace

std::unique_ptr<WorkerGroup> WorkerGroup::start(std::vector<WorkerSpec> specs) {
  std::unique_ptr<WorkerGroup> group(new WorkerGroup(Signals::install().fd()));
  for (WorkerSpec& spec : specs) {
    group->workers_.push_back(Worker{std::move(spec)});
    group->spawn(group->workers_.back());  // on a throw, ~WorkerGroup stops the others
  }
  return group;
}

WorkerGroup::~WorkerGroup() {
  try {
    stop(SIGKILL, std::chrono::milliseconds(0));
  } catch (...) {  // nothing better to do in a destructor; the workers are SIGKILLed anyway
  }
}

void WorkerGroup::spawn(Worker& worker) {
  const WorkerSpec& spec = worker.spec;
  TDIST_CHECK(!spec.argv.empty() && !spec.argv[0].empty(), InvalidArgument, "worker ",
              spec.local_rank, " has no program to run");
  const int to_file = spec.redirect_mask | spec.tee_mask;
  TDIST_CHECK(!(to_file & kStdoutBit) || !spec.stdout_path.empty(), InvalidArgument, "worker ",
              spec.local_rank, ": stdout is redirected but has no file");
  TDIST_CHECK(!(to_file & kStderrBit) || !spec.stderr_path.empty(), InvalidArgument, "worker ",
              spec.local_rank, ": stderr is redirected but has no file");

  Fd stdin_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!stdin_fd) TDIST_THROW(Error, "cannot open /dev/null: ", std::strerror(errno));

  // stdout: inherited, straight to its file when only redirected, else a pipe.
  Fd stdout_fd;
  const bool stdout_teed = spec.tee_mask & kStdoutBit;
  if ((spec.redirect_mask & kStdoutBit) && !stdout_teed) {
    stdout_fd = Fd(open_output_file(spec.stdout_path));
  } else if (stdout_teed || !spec.console) {
    auto pipe = make_pipe();
    RelayTargets targets;
    if (stdout_teed) {
      targets.file_fd = open_output_file(spec.stdout_path);
      if (spec.console) targets.console_fd = STDOUT_FILENO;
      targets.prefix = spec.prefix;
    }
    worker.out.emplace(pipe[0].release(), std::move(targets));
    stdout_fd = std::move(pipe[1]);
  }

  // stderr: always a pipe, for the tail.
  auto err_pipe = make_pipe();
  RelayTargets err_targets;
  err_targets.keep_tail = true;
  if (to_file & kStderrBit) err_targets.file_fd = open_output_file(spec.stderr_path);
  if (spec.tee_mask & kStderrBit) {
    if (spec.console) err_targets.console_fd = STDERR_FILENO;
    err_targets.prefix = spec.prefix;
  } else if (!(spec.redirect_mask & kStderrBit) && spec.console) {
    err_targets.console_fd = STDERR_FILENO;
  }
  worker.err.emplace(err_pipe[0].release(), std::move(err_targets));

  ExecPlan plan;
  plan.path = resolve_program(spec.argv[0], spec.env);
  std::vector<std::string> argv = spec.argv;  // execve wants char* const*: own copies
  std::vector<std::string> env = spec.env;
  for (std::string& arg : argv) plan.argv.push_back(arg.data());
  plan.argv.push_back(nullptr);
  for (std::string& entry : env) plan.envp.push_back(entry.data());
  plan.envp.push_back(nullptr);
  plan.error_prefix = "tdistrun: cannot execute '" + spec.argv[0] + "': ";
  plan.stdio = {stdin_fd.get(), stdout_fd.get(), err_pipe[1].get()};
  plan.parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0)
    TDIST_THROW(Error, "cannot start worker ", spec.local_rank,
                ": fork failed: ", std::strerror(errno));
  if (pid == 0) exec_child(plan);
  // Also from here, so a stop() right after start() already finds the group.
  ::setpgid(pid, pid);
  watchdog::watch(pid);  // its group dies with the launcher, even a SIGKILLed one
  worker.pid = pid;
  worker.running = true;
}

WorkerGroup::Event WorkerGroup::wait(Clock::time_point until) {
  reap(/*block=*/false);
  for (;;) {
    for (const WorkerExit& exit : exits_) {
      if (exit.failed() && !exit.stopped_by_us && !exit.accepted) return Event::kWorkerFailed;
    }
    if (!any_worker_running()) return Event::kAllSucceeded;  // spares are not waited for
    if (Clock::now() >= until) return Event::kTimeout;
    if (pump(until) != 0) return Event::kSignal;
  }
}

void WorkerGroup::stop(int sig, std::chrono::milliseconds grace) {
  if (stopped_) return;
  // Workers that already died on their own (say, several at the same moment) are
  // failures, not casualties of this stop.
  reap(/*block=*/false);
  stopping_ = true;
  signal_groups(sig);
  const Clock::time_point now = Clock::now();
  const Clock::time_point deadline =
      grace >= Clock::time_point::max() - now ? Clock::time_point::max() : now + grace;
  while (any_running() && Clock::now() < deadline) {
    if (pump(deadline) != 0) break;  // asked again: no more grace
  }
  signal_groups(SIGKILL);
  reap(/*block=*/true);
  for (Worker& worker : workers_) {
    if (worker.pid > 0) watchdog::forget(worker.pid);
    if (worker.out) worker.out->close();
    if (worker.err) worker.err->close();
  }
  stopped_ = true;
}

void WorkerGroup::accept_failures() {
  for (WorkerExit& exit : exits_) exit.accepted = true;
}

void WorkerGroup::restart(int local_rank) {
  auto it = std::find_if(workers_.begin(), workers_.end(),
                         [&](const Worker& w) { return w.spec.local_rank == local_rank; });
  TDIST_CHECK(it != workers_.end(), InvalidArgument, "no worker has local rank ", local_rank);
  TDIST_CHECK(!it->running, InvalidArgument, "worker ", local_rank, " is still running");
  TDIST_CHECK(!stopping_, InvalidArgument, "the workers are being stopped");
  watchdog::forget(it->pid);
  if (it->out) it->out->close();
  if (it->err) it->err->close();
  it->out.reset();
  it->err.reset();
  spawn(*it);
}

std::optional<std::pair<int, std::string>> WorkerGroup::idle_spare() const {
  for (const Worker& w : workers_) {
    if (w.running && !w.spec.spare.empty()) return std::make_pair(w.spec.local_rank, w.spec.spare);
  }
  return std::nullopt;
}

void WorkerGroup::promote(int local_rank, int global_rank, std::string prefix) {
  for (Worker& w : workers_) {
    if (w.spec.local_rank != local_rank) continue;
    w.spec.spare.clear();
    w.spec.global_rank = global_rank;
    w.spec.prefix = std::move(prefix);
    return;
  }
  TDIST_THROW(InvalidArgument, "no worker has local rank ", local_rank);
}

void WorkerGroup::add(WorkerSpec spec) {
  TDIST_CHECK(!stopping_, InvalidArgument, "the workers are being stopped");
  workers_.push_back(Worker{std::move(spec)});
  spawn(workers_.back());
}

bool WorkerGroup::any_worker_running() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& worker) {
    return worker.running && worker.spec.spare.empty();
  });
}

bool WorkerGroup::any_succeeded() const {
  return std::any_of(exits_.begin(), exits_.end(),
                     [](const WorkerExit& exit) { return !exit.failed(); });
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> out;
  for (const Worker& worker : workers_) out.push_back(worker.pid);
  return out;
}

std::string WorkerGroup::stderr_tail(int local_rank, size_t max_lines) const {
  for (const Worker& worker : workers_) {
    if (worker.spec.local_rank == local_rank && worker.err) return worker.err->tail(max_lines);
  }
  return "";
}

int WorkerGroup::pump(Clock::time_point until) {
  std::vector<pollfd> fds;
  std::vector<StreamRelay*> relays;
  fds.push_back({signal_fd_, POLLIN, 0});
  for (Worker& worker : workers_) {
    for (std::optional<StreamRelay>* relay : {&worker.out, &worker.err}) {
      if (!*relay || (*relay)->fd() < 0) continue;
      fds.push_back({(*relay)->fd(), POLLIN, 0});
      relays.push_back(&**relay);
    }
  }
  int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms(until));
  if (ready < 0 && errno != EINTR) TDIST_THROW(Error, "poll failed: ", std::strerror(errno));
  int sig = 0;
  if (ready > 0) {
    if (fds[0].revents != 0) sig = Signals::install().drain();
    for (size_t i = 0; i < relays.size(); ++i) {
      if (fds[i + 1].revents != 0) relays[i]->read_once();
    }
  }
  reap(/*block=*/false);
  return sig;
}

void WorkerGroup::reap(bool block) {
  for (Worker& worker : workers_) {
    if (!worker.running) continue;
    int status = 0;
    pid_t result;
    do {
      result = ::waitpid(worker.pid, &status, block ? 0 : WNOHANG);
    } while (result < 0 && errno == EINTR);
    if (result == worker.pid) {
      record_exit(worker, status);
    } else if (result < 0) {  // ECHILD: someone else reaped it; its status is lost
      worker.running = false;
      exits_.push_back({worker.spec.local_rank, worker.spec.global_rank, worker.pid, -1, 0,
                        std::chrono::system_clock::now(), stopping_});
    }
  }
}

void WorkerGroup::record_exit(Worker& worker, int status) {
  worker.running = false;
  WorkerExit exit;
  exit.local_rank = worker.spec.local_rank;
  exit.global_rank = worker.spec.global_rank;
  exit.pid = worker.pid;
  exit.spare = !worker.spec.spare.empty();
  if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
    exit.exit_code = -exit.signal;
  } else {
    exit.exit_code = WEXITSTATUS(status);
  }
  exit.when = std::chrono::system_clock::now();
  exit.stopped_by_us = stopping_;
  exits_.push_back(exit);
  // Everything it wrote is in its pipes now: relay it before anyone hears of the exit.
  if (worker.out) worker.out->drain();
  if (worker.err) worker.err->drain();
}

void WorkerGroup::signal_groups(int sig) const {
  // Groups of exited workers too: a grandchild may still be in one. A group's id is not
  // reused while it has members; an empty one answers ESRCH (unless the pid space wrapped
  // around and the number leads a new group, which this accepts as negligible).
  for (const Worker& worker : workers_) {
    if (worker.pid > 0 && ::killpg(worker.pid, sig) < 0 && worker.running) {
      ::kill(worker.pid, sig);  // not yet in its own group (setpgid raced): the worker itself
    }
  }
}

bool WorkerGroup::any_running() const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [](const Worker& worker) { return worker.running; });
}

}  // namespace tdist::launcher
