// Signals: blocked signals routed to one signalfd (see signals.h).
#include "tdistrun/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "tdist/error.h"

namespace tdist::launcher {
namespace {

constexpr std::array<int, 5> kTerminating = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

}  // namespace

Signals& Signals::install() {
  static Signals* signals = new Signals();  // never destroyed: the fd is used until exit
  return *signals;
}

Signals::Signals() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int sig : kTerminating) ::sigaddset(&set, sig);
  ::sigaddset(&set, SIGCHLD);
  // pthread_sigmask returns the error instead of setting errno.
  if (int error = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); error != 0) {
    TDIST_THROW(Error, "cannot block the launcher's signals: ", std::strerror(error));
  }
  ::signal(SIGPIPE, SIG_IGN);
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) TDIST_THROW(Error, "signalfd failed: ", std::strerror(errno));
}

bool Signals::is_terminating(int sig) {
  for (int s : kTerminating) {
    if (s == sig) return true;
  }
  return false;
}

int Signals::drain() {
  int first = 0;
  std::array<signalfd_siginfo, 16> infos;
  for (;;) {
    ssize_t n = ::read(fd_, infos.data(), sizeof(infos));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EAGAIN: nothing more pending
    size_t count = static_cast<size_t>(n) / sizeof(signalfd_siginfo);
    for (size_t i = 0; i < count; ++i) {
      int sig = static_cast<int>(infos[i].ssi_signo);
      if (!is_terminating(sig)) continue;
      if (first == 0) first = sig;
      if (terminating_signal_ == 0) terminating_signal_ = sig;
    }
  }
  return first;
}

}  // namespace tdist::launcher
