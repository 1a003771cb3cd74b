// SourceLocation: the caller's file and line, as C++20's std::source_location gives them
// (which clang 14 with libstdc++ 12, Debian 12's pair, does not provide): a parameter
// `SourceLocation where = SourceLocation::current()` is filled at each call with the line
// of the call. GCC and clang evaluate __builtin_FILE/__builtin_LINE in a default argument at
// the call site. file_name() is a string literal: it never changes or moves.
#pragma once

#include <cstdint>

namespace tdist {

class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          uint32_t line = __builtin_LINE()) {
    return SourceLocation(file, line);
  }
  constexpr const char* file_name() const { return file_; }
  constexpr uint32_t line() const { return line_; }

 private:
  constexpr SourceLocation(const char* file, uint32_t line) : file_(file), line_(line) {}
  const char* file_;
  uint32_t line_;
};

}  // namespace tdist
