// Signals: the launcher's signal handling, one signalfd for the whole process.
//
// install() blocks SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 and SIGCHLD in the calling
// thread and routes them to a non-blocking, close-on-exec signalfd; SIGPIPE is ignored, so
// a closed console shows up as EPIPE from write(2) instead of killing the launcher. Call it
// first thing in main(), before any thread exists: threads inherit the blocked mask, so no
// thread can take one of these signals with its default action. Children must not inherit
// any of this; WorkerGroup restores an empty mask and default dispositions before exec.
//
// Thread-safety: install() is idempotent and safe to call from anywhere; drain() and
// terminating_signal() belong to the one thread that drives the launcher (main).
// Failures: install() throws tdist::Error when the signalfd cannot be made.
#pragma once

namespace tdist::launcher {

class Signals {
 public:
  // Sets things up on the first call; later calls return the same object.
  static Signals& install();

  Signals(const Signals&) = delete;
  Signals& operator=(const Signals&) = delete;

  // Readable (POLLIN) while a signal is pending.
  int fd() const { return fd_; }

  // Reads every pending signal without blocking. Returns the first terminating one read
  // (INT, TERM, HUP, USR1, USR2), or 0 when only SIGCHLD (or nothing) was pending. A
  // SIGCHLD is consumed here; whoever reaps children must check them after each drain.
  int drain();

  // The first terminating signal any drain() has seen; 0 if none arrived yet.
  int terminating_signal() const { return terminating_signal_; }

  // True for the signals drain() reports (the ones forwarded to workers).
  static bool is_terminating(int sig);

 private:
  Signals();
  ~Signals() = default;  // lives until exit; the descriptor closes with the process

  int fd_ = -1;
  int terminating_signal_ = 0;
};

}  // namespace tdist::launcher
