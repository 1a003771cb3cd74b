#include "tdist/logging.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist {
namespace {

LogLevel parse_level(const std::string& text) {
  std::string s;
  for (char c : text) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "trace") return LogLevel::kTrace;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  if (s == "off" || s == "none") return LogLevel::kOff;
  return LogLevel::kWarn;
}

constexpr int kUnset = -2;
std::atomic<int> g_level{kUnset};
std::atomic<int> g_rank{-1};

char level_letter(LogLevel level) {
  static constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E', 'O'};
  return kLetters[static_cast<int>(level)];
}

}  // namespace

LogLevel log_level() {
  int level = g_level.load(std::memory_order_relaxed);
  if (level == kUnset) {
    // A log line must not throw: a bad value logs at the default level here, and is
    // refused by check_settings() (init_process_group, tdistrun) and setting_string().
    try {
      level = static_cast<int>(parse_level(setting_string("TDIST_LOG_LEVEL")));
    } catch (const Error&) {
      level = static_cast<int>(LogLevel::kWarn);
    }
    g_level.store(level, std::memory_order_relaxed);
  }
  return static_cast<LogLevel>(level);
}

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
void set_log_rank(int rank) { g_rank.store(rank); }
bool log_enabled(LogLevel level) { return level >= log_level() && level != LogLevel::kOff; }

namespace detail {

LogLine::~LogLine() {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);

  std::string rank = "-";
  if (int r = g_rank.load(); r >= 0) {
    rank = std::to_string(r);
  } else if (std::string env = env_string("RANK"); !env.empty()) {
    rank = env;
  }
  char head[96];
  std::snprintf(head, sizeof head, "%s.%03d [tdist rank %s %c] ", stamp, static_cast<int>(ms),
                rank.c_str(), level_letter(level_));
  std::string line = head + out_.str() + "\n";
  // One write(2) per line keeps lines whole across threads and processes.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace detail
}  // namespace tdist
