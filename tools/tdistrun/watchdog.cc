// The watchdog (watchdog.h).
#include "tdistrun/watchdog.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>

#include "tdist/error.h"

namespace tdist::launcher::watchdog {
namespace {

int g_socket = -1;  // the launcher's end; -1 without a watchdog
pid_t g_pid = -1;

constexpr int kMaxGroups = 65536;  // more workers than this on one node are not watched

// The watchdog's life, in the forked child: system calls only, no allocation.
[[noreturn]] void run(int socket) {
  // The launcher handles the terminal's signals; a SIGKILLed launcher is what we wait for.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  static pid_t groups[kMaxGroups];
  int count = 0;
  for (;;) {
    int32_t message = 0;
    const ssize_t n = ::recv(socket, &message, sizeof(message), MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(message))) break;  // the launcher is gone
    if (message > 0 && count < kMaxGroups) {
      groups[count++] = message;
    } else if (message < 0) {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -message) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) ::killpg(groups[i], SIGKILL);
  ::_exit(0);
}

void tell(int32_t message) {
  if (g_socket < 0) return;
  // A watchdog that died cannot be told; the launcher goes on without it.
  (void)!::send(g_socket, &message, sizeof(message), MSG_NOSIGNAL);
}

}  // namespace

void start() {
  if (g_socket >= 0) return;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    TDIST_THROW(Error, "tdistrun: cannot make the watchdog's socket: ", std::strerror(errno));
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    TDIST_THROW(Error, "tdistrun: cannot start the watchdog: fork failed: ", std::strerror(errno));
  }
  if (pid == 0) {
    // Only its end of the socket: no listening socket or pipe of the launcher stays open.
    if (fds[1] != 3) ::dup2(fds[1], 3);
    ::close_range(4, ~0U, 0);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    run(3);
  }
  ::close(fds[1]);
  g_socket = fds[0];
  g_pid = pid;
}

void watch(pid_t group) { tell(static_cast<int32_t>(group)); }

void forget(pid_t group) { tell(-static_cast<int32_t>(group)); }

void finish() {
  if (g_socket < 0) return;
  ::close(g_socket);
  g_socket = -1;
  int status = 0;
  while (::waitpid(g_pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_pid = -1;
}

}  // namespace tdist::launcher::watchdog
