// Running a shell command from a test and capturing what it prints. Test-only.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <string>

namespace tdist::test_support {

// Runs `command` through the shell; returns its exit status (-1 when it did not exit) and
// puts its stdout and stderr in `out`.
inline int run_command(const std::string& command, std::string* out) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 4096> buffer{};
  out->clear();
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out->append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace tdist::test_support
