// tdist_cli: what tdist's command-line programs (tdistrun, tdist-bench, tdist-status,
// store_scale_bench) share around CLI11. CLI11 splits and matches the arguments ("-b8",
// "--flag=value", "--flag value", "--" and the rest); each program keeps its own help text and
// error messages, which print_help() and usage_error() print the same way for all of them.
//
// Options are added through add_value() and add_switch(): one CLI11 option per spelling, so
// that a callback knows how the user typed it, and callbacks that run in argv order while
// parse() runs, so that a later flag can override an earlier one and the first bad one
// stops the parse. Not thread-safe: one thread parses one command line.
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tdist::cli {

// A bad command line. what() is one line without the program's name, ready for
// usage_error().
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The CLI11 options of one flag, one per spelling ("-b", "--minbytes").
using Spellings = std::vector<CLI::Option*>;

// Called with the spelling as typed ("-b") and the value: nullopt when the argument had
// none. May throw UsageError, or anything else the caller of parse() catches.
using Apply = std::function<void(const std::string& typed, const std::optional<std::string>&)>;

// Where a flag's value may come from when it is not joined to it ("--name=VALUE",
// "-bVALUE"): the next argument whatever it is (kAnything), or only one that does not look
// like a flag (kNotAFlag, argparse's rule, which torchrun follows: "-x", "--y" and "--" leave
// the flag without a value; a negative number does not).
enum class Next { kAnything, kNotAFlag };

// A flag taking one value (`names` as CLI11 spells them: "-b,--minbytes"). "--name=" gives
// the value "".
Spellings add_value(CLI::App& app, const std::string& names, Apply apply,
                    Next next = Next::kAnything);

// A flag without a value; apply() gets the value of a "--name=VALUE" form, else nullopt.
Spellings add_switch(CLI::App& app, const std::string& names, Apply apply);

// The positional arguments, each given to apply() as typed, in order, after every flag's
// callback. With `rest`, the first one ends the flags: it and everything after it are
// positional, whatever they look like (tdistrun's PROGRAM [ARGS...]). Else there is at
// most one; a second, one that looks like a flag ("-", "-1") and a "--" are unrecognized
// arguments. A caller whose "--" ends the flags passes parse() only what comes before it:
// CLI11 2.1 takes a "--" right after a kNotAFlag flag's value as the end of that value.
void add_positionals(CLI::App& app, const std::string& name,
                     std::function<void(const std::string&)> apply, bool rest);

// What came of a command line: run the program (neither set), show its help, or an error.
struct Parsed {
  bool help = false;  // CLI::CallForHelp was thrown (CLI11's -h/--help, or a callback)
  std::string error;  // one line without the program's name; empty when none
};

// Parses argv (argv[0] is the program's name) with `app`. A UsageError from a callback
// becomes the error; so does an argument that matches no flag (worded by `unrecognized`,
// given it as typed), which wins over help and over an error met after it, as if the
// arguments were checked one by one. Other exceptions from callbacks pass through.
Parsed parse(CLI::App& app, int argc, const char* const* argv,
             const std::function<std::string(const std::string&)>& unrecognized);

// The environment's default for a flag the command line did not give (CLI11's envname(),
// with the environment read through tdist's settings registry, its one reader): the value
// of `variable` when none of `spellings` was given and it is set and not empty.
std::optional<std::string> env_fallback(const Spellings& spellings, const std::string& variable);

// Prints a program's own help text to `stream`; returns 0, the exit status after help.
int print_help(std::FILE* stream, const std::string& text);

// Prints "PROGRAM: MESSAGE", a newline and then `usage` to stderr; returns 2, the exit
// status of a bad command line.
int usage_error(const std::string& program, const std::string& message,
                const std::string& usage = "");

}  // namespace tdist::cli
