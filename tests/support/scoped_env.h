// ScopedEnv: environment variables changed for one scope and restored when it ends, as they
// were (set to the old value, or unset). setenv is not thread-safe: change them before a
// test starts its rank threads. Test-only.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace tdist::test_support {

class ScopedEnv {
 public:
  ScopedEnv() = default;
  // One variable set to `value`, or unset where it is nullptr / nullopt.
  ScopedEnv(const std::string& name, const char* value) {
    if (value != nullptr) {
      set(name, value);
    } else {
      unset(name);
    }
  }
  ScopedEnv(const std::string& name, const std::optional<std::string>& value)
      : ScopedEnv(name, value ? value->c_str() : nullptr) {}
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) {
      if (old) {
        ::setenv(name.c_str(), old->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const std::string& name, const std::string& value) {
    save(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) {
    save(name);
    ::unsetenv(name.c_str());
  }

 private:
  // The value before this scope's first change of `name`.
  void save(const std::string& name) {
    if (saved_.count(name) != 0) return;
    const char* old = std::getenv(name.c_str());
    saved_[name] = old == nullptr ? std::nullopt : std::optional<std::string>(old);
  }

  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace tdist::test_support
