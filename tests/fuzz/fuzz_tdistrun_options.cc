// fuzz_tdistrun_options: tdistrun's command line (tdistrun/options.h). The input is split
// into arguments at NUL and newline bytes (argv[0] is "tdistrun"); parse_args and, for a
// command line that parses, worker_command must either succeed or throw UsageError.
#include <cstdint>
#include <string>
#include <vector>

#include "tdistrun/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"tdistrun"};
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      args.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) args.push_back(std::move(current));
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);

  using namespace tdist::launcher;
  try {
    const ParseResult result = parse_args(static_cast<int>(args.size()), argv.data());
    if (result.action == Action::kRun) (void)worker_command(result.options);
  } catch (const UsageError&) {
    // A bad command line: expected.
  }
  return 0;
}
