// tdistrun: the torchrun-compatible launcher (see README "Launching jobs" and
// `tdistrun --help`). main() only parses the command line and reports errors; the node
// agent (agent.h) runs the job.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cli/cli.h"
#include "tdist/error.h"
#include "tdist/settings.h"
#include "tdistrun/agent.h"
#include "tdistrun/job_token.h"
#include "tdistrun/options.h"
#include "tdistrun/signals.h"
#include "tdistrun/watchdog.h"

namespace {

void print(FILE* stream, const std::string& text) {
  std::fputs(text.c_str(), stream);
  std::fflush(stream);
}

// TDIST_THROW appends "(file:line)"; a launcher's user wants just the sentence.
std::string without_location(std::string message) {
  const size_t at = message.rfind(" (");
  if (at != std::string::npos && message.back() == ')' &&
      message.find(".cc:", at) != std::string::npos) {
    message.resize(at);
  }
  return message;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tdist::launcher;
  // Before any thread exists, so that every thread inherits the blocked signal mask.
  Signals::install();
  try {
    const ParseResult parsed = parse_args(argc, argv);
    switch (parsed.action) {
      case Action::kHelp:
        return tdist::cli::print_help(stdout, help_text());
      case Action::kHelpEnv:
        return tdist::cli::print_help(stdout, help_env_text());
      case Action::kVersion:
        return tdist::cli::print_help(stdout, "tdistrun (tdist) " TDIST_VERSION "\n");
      case Action::kRun:
        break;
    }
    // A bad TDIST_* value is refused before any worker starts (the workers would inherit it).
    tdist::check_settings();
    const bool fresh = ensure_job_token(parsed.options) == "fresh";  // before any thread: setenv
    watchdog::start();  // before any thread exists: it is forked
    const int code = run_agent(parsed.options, fresh);
    watchdog::finish();
    return code;
  } catch (const UsageError& e) {
    print(stderr, std::string(e.what()) + "\n");
    return 2;
  } catch (const tdist::Error& e) {
    print(stderr, "tdistrun: error: " + without_location(e.what()) + "\n");
    return 1;
  } catch (const std::exception& e) {
    print(stderr, std::string("tdistrun: error: ") + e.what() + "\n");
    return 1;
  }
}
