// Logging to stderr with levels, each line prefixed with the time and the rank:
//   2026-11-30 01:02:03.456 [tdist rank 1 W] connection from 127.0.0.1:4711 closed: ...
//
// The level comes from TDIST_LOG_LEVEL (trace, debug, info, warn, error, off; default
// warn) and can be changed with set_log_level. The rank shown is the one given to
// set_log_rank, else $RANK, else "-". Lines are written whole with one write(2), so
// lines from threads and processes never interleave. Thread-safe.
#pragma once

#include <sstream>
#include <string_view>

namespace tdist {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel level);
void set_log_rank(int rank);  // -1 clears it
bool log_enabled(LogLevel level);

namespace detail {

// Collects one line and writes it on destruction.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine();

  template <typename T>
  LogLine& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

// Turns the streamed LogLine into void so both branches of TDIST_LOG's ?: agree.
struct LogVoidify {
  void operator&(const LogLine&) const {}
};

}  // namespace detail
}  // namespace tdist

// TDIST_LOG(kWarn) << "text " << value;   (the arguments are not evaluated when off)
// An expression, so it is safe inside an unbraced if/else.
#define TDIST_LOG(level)                          \
  !::tdist::log_enabled(::tdist::LogLevel::level) \
      ? (void)0                                   \
      : ::tdist::detail::LogVoidify() & ::tdist::detail::LogLine(::tdist::LogLevel::level)
