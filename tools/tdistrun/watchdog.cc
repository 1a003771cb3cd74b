// The watchdog (watchdog.h).
#include "tdistrun/watchdog.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "tdist/error.h"

namespace tdist::launcher::watchdog {
namespace {

int g_socket = -1;  // the launcher's end; -1 without a watchdog
pid_t g_pid = -1;

bool receive(int socket, void* data, size_t size) {
  for (;;) {
    const ssize_t n = ::recv(socket, data, size, MSG_WAITALL);
    if (n == static_cast<ssize_t>(size)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;  // the launcher is gone
  }
}

// The watchdog's life, in the forked child (forked before any thread existed, so it may
// allocate). Messages: a positive int32 watches that group, a negative one forgets it, 0 is
// followed by a uint32 length and the directory to remove.
[[noreturn]] void run(int socket) {
  // The launcher handles the terminal's signals; a SIGKILLed launcher is what we wait for.
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) {
    ::signal(sig, SIG_IGN);
  }
  std::vector<pid_t> groups;
  std::string directory;
  int32_t message = 0;
  while (receive(socket, &message, sizeof(message))) {
    if (message > 0) {
      groups.push_back(message);
    } else if (message < 0) {
      std::erase(groups, -message);
    } else {
      uint32_t length = 0;
      if (!receive(socket, &length, sizeof(length))) break;
      directory.assign(length, '\0');
      if (length > 0 && !receive(socket, directory.data(), length)) break;
    }
  }
  for (pid_t group : groups) ::killpg(group, SIGKILL);
  if (!directory.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(directory, ignored);
  }
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

void remove_on_death(const std::string& directory) {
  if (g_socket < 0) return;
  const uint32_t length = static_cast<uint32_t>(directory.size());
  std::string message(sizeof(int32_t) + sizeof(length), '\0');
  std::memcpy(message.data() + sizeof(int32_t), &length, sizeof(length));
  message += directory;
  (void)!::send(g_socket, message.data(), message.size(), MSG_NOSIGNAL);
}

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
