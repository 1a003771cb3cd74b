// Error files: how a tdist program tells its launcher why it died.
//
// torchrun and tdistrun give every worker TORCHELASTIC_ERROR_FILE, a path where the
// worker writes its fatal error as JSON in the format of torch's @record decorator (tdist
// writes it compact, on one line):
//   {"message": {"message": "<Type>: <msg>",
//                "extraInfo": {"py_callstack": "<traceback>", "timestamp": "<unix seconds>"}}}
// The launcher's failure summary then shows that message instead of only an exit code.
// A C++ program has no Python traceback, so py_callstack holds the message line too (torch
// shows py_callstack when it is present).
//
// init_process_group (distributed.h) calls record_errors(), so every tdist program that
// initialises a process group reports an uncaught exception without doing anything;
// other programs may call it themselves, as early in main as they like.
//
// Files are written to "<path>.tmp.<pid>" and renamed over <path>, so a reader sees the
// whole file or none. Writing is best effort: a failure to write is reported on stderr
// and otherwise ignored (the program is failing already). Invalid UTF-8 in a message is
// replaced by U+FFFD so the file is always valid JSON. Thread-safe.
#pragma once

#include <string>

namespace tdist {

// Installs, once per process however often it is called, a std::terminate handler. When
// an exception escapes main or a thread, the handler prints
// "tdist: uncaught <Type>: <what()>" to stderr, writes "<Type>: <what()>" to
// $TORCHELASTIC_ERROR_FILE when that is set (<Type> demangled, e.g. tdist::PeerError),
// then calls the handler that was installed before (the runtime's prints its own line
// and aborts, so the process still dies by SIGABRT). std::terminate without an active
// exception writes nothing. Should the handler itself fail or be re-entered (say, out
// of memory), it goes straight to the previous handler.
void record_errors();

// Writes `message` to $TORCHELASTIC_ERROR_FILE now, replacing what is there; does nothing
// when the variable is unset or empty. For programs that catch their fatal error in main
// and exit with a code of their own.
void write_error_file(const std::string& message);

}  // namespace tdist
