// tdist_cli (cli.h): CLI11 options with argv-order callbacks, and the parse that turns
// CLI11's outcomes into a program's help or one-line error.
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <string_view>
#include <utility>

#include "tdist/settings.h"

namespace tdist::cli {
namespace {

// CLI11 2.1 reads "--name=" as "--name" without a value, and would take the next argument
// as the value; parse() gives such an argument this marker, which typed() removes again.
constexpr std::string_view kEmpty = "\x1f";
// What CLI11 gives a flag that got no value (its default_str, or, for one that takes
// anything, the argument parse() adds after the last one); apply() sees nullopt.
const std::string kNoValue = "\x1e";

std::string typed(std::string arg) {
  if (arg.ends_with(kEmpty)) arg.resize(arg.size() - kEmpty.size());
  return arg;
}

Spellings add(CLI::App& app, const std::string& names, int min_values, int max_values,
              const Apply& apply) {
  Spellings out;
  for (const std::string& name : CLI::detail::split(names, ',')) {
    auto callback = [name, apply](const CLI::results_t& results) {
      const std::string& value = results.back();
      apply(name, value == kNoValue ? std::nullopt : std::optional(typed(value)));
      return true;
    };
    out.push_back(app.add_option(name, CLI::callback_t(callback))
                      ->expected(min_values, max_values)
                      ->default_str(kNoValue)
                      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
                      ->trigger_on_parse());
  }
  return out;
}

}  // namespace

Spellings add_value(CLI::App& app, const std::string& names, Apply apply, Next next) {
  return add(app, names, next == Next::kAnything ? 1 : 0, 1, apply);
}

Spellings add_switch(CLI::App& app, const std::string& names, Apply apply) {
  return add(app, names, 0, 0, apply);
}

void add_positionals(CLI::App& app, const std::string& name,
                     std::function<void(const std::string&)> apply, bool rest) {
  auto callback = [apply = std::move(apply)](const CLI::results_t& results) {
    for (const std::string& arg : results) {
      if (arg != kNoValue) apply(typed(arg));
    }
    return true;
  };
  CLI::Option* option = app.add_option(name, CLI::callback_t(callback));
  if (rest) {
    // As many as there are, each kept as typed (CLI11 would split "[a,b]" for a vector).
    option->expected(1 << 20)->allow_extra_args(false);
    option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.positionals_at_end();
  } else {  // "-" or "-1" is no positional but an unrecognized argument
    option->check([](const std::string& arg) { return arg.starts_with('-') ? "a flag" : ""; });
    app.validate_positionals();
  }
}

Parsed parse(CLI::App& app, int argc, const char* const* argv,
             const std::function<std::string(const std::string&)>& unrecognized) {
  // Last first, as CLI11 takes them, after kNoValue: the value of a flag that takes
  // anything and comes last (CLI11 would throw), else left over and dropped.
  std::vector<std::string> args = {kNoValue};
  for (int i = argc - 1; i > 0; --i) {
    std::string arg = argv[i];
    if (arg.starts_with("--") && arg.find('=') == arg.size() - 1) arg += kEmpty;
    args.push_back(std::move(arg));
  }
  Parsed out;
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    out.help = true;
  } catch (const CLI::ExtrasError&) {  // reported below
  } catch (const CLI::ParseError& e) {
    out.error = e.what();
  } catch (const UsageError& e) {
    out.error = e.what();
  }
  // CLI11 sets aside what it does not recognize (a "--" too) and goes on; these were met
  // before whatever ended the parse.
  for (const std::string& arg : app.remaining()) {
    if (arg != kNoValue) return {false, unrecognized(typed(arg))};
  }
  return out;
}

std::optional<std::string> env_fallback(const Spellings& spellings, const std::string& variable) {
  for (const CLI::Option* option : spellings) {
    if (option->count() > 0) return std::nullopt;
  }
  std::string value = env_string(variable.c_str());
  if (value.empty()) return std::nullopt;
  return value;
}

int print_help(std::FILE* stream, const std::string& text) {
  std::fputs(text.c_str(), stream);
  std::fflush(stream);
  return 0;
}

int usage_error(const std::string& program, const std::string& message, const std::string& usage) {
  std::fprintf(stderr, "%s: %s\n%s", program.c_str(), message.c_str(), usage.c_str());
  std::fflush(stderr);
  return 2;
}

}  // namespace tdist::cli
