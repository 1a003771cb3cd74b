// Starting test worker programs: fork + execve with argv and environment built before
// the fork, so the child only makes system calls between the two (safe even when the
// parent runs other threads, such as a store server).
#pragma once

#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

extern char** environ;

namespace tdist::test_support {

// This process's environment minus the variables for which `drop(name)` is true.
inline std::vector<std::string> environment_without(
    const std::function<bool(const std::string&)>& drop) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (!drop(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  return out;
}

// Runs args[0] with `args` and exactly the environment `env` ("NAME=value" entries).
// Returns the child's pid, or -1 when fork failed; a failed exec exits with 127.
inline pid_t spawn_exec(std::vector<std::string> args, std::vector<std::string> env) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace tdist::test_support
