// The watchdog: a small process that outlives a SIGKILLed tdistrun just long enough to kill
// what PR_SET_PDEATHSIG cannot reach, the workers' own children. PDEATHSIG ends each worker
// when the launcher dies; the watchdog then SIGKILLs every worker's process group, so
// whatever a worker started (a shell's children, data-loader processes) goes too.
//
// The launcher tells it each worker group it starts (watch) and each it has stopped and
// reaped (forget) over a socket; when the socket ends (the launcher exited or died), the
// watchdog kills the groups it still watches and exits. It ignores the signals a terminal
// sends to the launcher's process group (the launcher handles those) and holds no other
// descriptor. Without start() (tests driving WorkerGroup directly) the calls do nothing.
// Thread-safety: start() and finish() on the main thread, before any other thread exists
// (the watchdog is forked then, so it may allocate) and at exit; the others from the thread
// that drives the workers.
#pragma once

#include <sys/types.h>

#include <string>

namespace tdist::launcher::watchdog {

// Forks the watchdog. Throws tdist::Error when the socket or the process cannot be made.
void start();
void watch(pid_t group);
void forget(pid_t group);
// The directory the watchdog removes (recursively) after killing the groups, when the
// launcher dies without removing it itself; "" = none. The launcher's temporary run
// directory, so that not even a SIGKILLed launcher leaves one behind.
void remove_on_death(const std::string& directory);
// Ends the watchdog (it kills any group still watched) and reaps it.
void finish();

}  // namespace tdist::launcher::watchdog
