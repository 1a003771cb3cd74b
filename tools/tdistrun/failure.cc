// Failure records, torch's error files and the final failure summary (failure.h).
#include "tdistrun/failure.h"

#include <sys/stat.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <tuple>

#include "tdist/error.h"

namespace tdist::launcher {
namespace {

// Error files hold one message and a traceback; anything bigger is not one.
constexpr size_t kMaxErrorFileBytes = 16 << 20;

// A total order: time, then global rank, then everything else, so equal records end up
// next to each other and the root cause is the same wherever it is computed.
bool earlier(const FailureRecord& a, const FailureRecord& b) {
  auto key = [](const FailureRecord& r) {
    return std::tie(r.time_us, r.global_rank, r.local_rank, r.node_rank, r.round, r.host,
                    r.exit_code, r.signal, r.log_file, r.error_file, r.error, r.traceback,
                    r.stderr_tail);
  };
  return key(a) < key(b);
}

// The integer member `key` of a failure record; InvalidArgument when missing, not an
// integer, or out of `T`'s range.
template <typename T>
T int_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  TDIST_CHECK(it != record.end() && it->is_number_integer(), InvalidArgument, "field \"", key,
              "\" is missing or not an integer");
  const int64_t v = it->get<int64_t>();
  TDIST_CHECK(v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max(),
              InvalidArgument, "field \"", key, "\" = ", v, " is out of range");
  return static_cast<T>(v);
}

std::string string_field(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  TDIST_CHECK(it != record.end() && it->is_string(), InvalidArgument, "field \"", key,
              "\" is missing or not a string");
  return it->get<std::string>();
}

// A string member, or "" when `j` is not an object or has no such string.
std::string string_member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string last_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  size_t nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
}

// "2024-05-01T12:00:00.123+02:00" in the local time zone.
std::string iso_time(int64_t time_us) {
  if (time_us <= 0) return "unknown";
  const std::time_t secs = static_cast<std::time_t>(time_us / 1000000);
  std::tm tm{};
  if (localtime_r(&secs, &tm) == nullptr) return "unknown";
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  const long offset_min = tm.tm_gmtoff / 60;
  const long abs_min = offset_min < 0 ? -offset_min : offset_min;
  char out[64];
  std::snprintf(out, sizeof(out), "%s.%03d%c%02ld:%02ld", date,
                static_cast<int>(time_us / 1000 % 1000), offset_min < 0 ? '-' : '+', abs_min / 60,
                abs_min % 60);
  return out;
}

void append_block(std::string& out, std::string_view text, const char* indent) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  while (!text.empty()) {
    size_t nl = text.find('\n');
    out += indent;
    out += text.substr(0, nl);
    out += '\n';
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
}

// "    label: text" when text is one line, else the label and the text indented below it.
void append_field(std::string& out, const char* label, std::string_view text) {
  out += "    ";
  out += label;
  out += ':';
  if (text.find('\n') == std::string_view::npos) {
    out += ' ';
    out += text;
    out += '\n';
    return;
  }
  out += '\n';
  append_block(out, text, "      ");
}

void append_record(std::string& out, const FailureRecord& r) {
  out += detail::str_cat("  rank ", r.global_rank, " (local rank ", r.local_rank, ") on ", r.host,
                         " (node rank ", r.node_rank, "), round ", r.round, ": ");
  if (r.signal != 0) {
    out += detail::str_cat("signal ", signal_name(r.signal), " (", r.signal, ")\n");
  } else {
    out += detail::str_cat("exit code ", r.exit_code, "\n");
  }
  append_field(out, "time", iso_time(r.time_us));
  append_field(out, "log file", r.log_file.empty() ? "<console>" : r.log_file);
  append_field(out, "error",
               r.error.empty() ? "no error reported; see the stderr tail below" : r.error);
  if (!r.traceback.empty() && r.traceback != r.error) {
    out += "    traceback:\n";
    append_block(out, r.traceback, "      ");
  }
  if (r.stderr_tail.find_first_not_of("\r\n") == std::string::npos) {
    out += "    stderr tail: (nothing captured)\n";
  } else {
    out += "    stderr tail:\n";
    append_block(out, r.stderr_tail, "      ");
  }
}

}  // namespace

std::string signal_name(int signal) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"},
      {SIGILL, "SIGILL"},       {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"},
      {SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},       {SIGKILL, "SIGKILL"},
      {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"},     {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"},
      {SIGCHLD, "SIGCHLD"},     {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"},
      {SIGTSTP, "SIGTSTP"},     {SIGTTIN, "SIGTTIN"},     {SIGTTOU, "SIGTTOU"},
      {SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"},     {SIGXFSZ, "SIGXFSZ"},
      {SIGPROF, "SIGPROF"},     {SIGVTALRM, "SIGVTALRM"}, {SIGWINCH, "SIGWINCH"},
      {SIGIO, "SIGIO"},         {SIGSYS, "SIGSYS"},
#ifdef SIGSTKFLT
      {SIGSTKFLT, "SIGSTKFLT"},
#endif
#ifdef SIGPWR
      {SIGPWR, "SIGPWR"},
#endif
  };
  for (const auto& [number, name] : kNames) {
    if (number == signal) return name;
  }
#ifdef SIGRTMIN
  if (signal == SIGRTMIN) return "SIGRTMIN";
  if (signal > SIGRTMIN && signal <= SIGRTMAX)
    return detail::str_cat("SIGRTMIN+", signal - SIGRTMIN);
#endif
  return detail::str_cat("signal ", signal);
}

std::string serialize(const FailureRecord& r) {
  const nlohmann::ordered_json o = {{"global_rank", r.global_rank},
                                    {"local_rank", r.local_rank},
                                    {"node_rank", r.node_rank},
                                    {"round", r.round},
                                    {"host", r.host},
                                    {"exit_code", r.exit_code},
                                    {"signal", r.signal},
                                    {"time_us", r.time_us},
                                    {"log_file", r.log_file},
                                    {"error_file", r.error_file},
                                    {"error", r.error},
                                    {"traceback", r.traceback},
                                    {"stderr_tail", r.stderr_tail}};
  // Invalid UTF-8 (a worker's stderr may hold any bytes) becomes U+FFFD: the line parses.
  return o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

FailureRecord parse_failure(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    TDIST_CHECK(j.is_object(), InvalidArgument, "not a JSON object");
    FailureRecord r;
    r.global_rank = int_field<int>(j, "global_rank");
    r.local_rank = int_field<int>(j, "local_rank");
    r.node_rank = int_field<int>(j, "node_rank");
    r.round = int_field<int>(j, "round");
    r.host = string_field(j, "host");
    r.exit_code = int_field<int>(j, "exit_code");
    r.signal = int_field<int>(j, "signal");
    r.time_us = int_field<int64_t>(j, "time_us");
    r.log_file = string_field(j, "log_file");
    r.error_file = string_field(j, "error_file");
    r.error = string_field(j, "error");
    r.traceback = string_field(j, "traceback");
    r.stderr_tail = string_field(j, "stderr_tail");
    return r;
  } catch (const nlohmann::json::exception& e) {
    TDIST_THROW(InvalidArgument, "not a failure record: ", e.what());
  } catch (const InvalidArgument& e) {
    TDIST_THROW(InvalidArgument, "not a failure record: ", e.what());
  }
}

int64_t error_file_time_us(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || st.st_size == 0) return 0;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000 + st.st_mtim.tv_nsec / 1000;
}

std::pair<std::string, std::string> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxErrorFileBytes) return {};
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};  // also what a malformed file parses to (discarded)
  const auto message = j.find("message");
  if (message == j.end()) return {};
  if (message->is_string()) return {message->get<std::string>(), ""};
  std::string error = string_member(*message, "message");
  std::string traceback;
  if (message->is_object()) {
    const auto extra = message->find("extraInfo");
    if (extra != message->end()) traceback = string_member(*extra, "py_callstack");
  }
  if (error.empty()) error = last_line(traceback);
  return {error, traceback};
}

std::string format_summary(const std::string& run_id, std::vector<FailureRecord> records,
                           int restarts_used, int max_restarts) {
  std::sort(records.begin(), records.end(), earlier);
  records.erase(std::unique(records.begin(), records.end()), records.end());
  const size_t n = records.size();
  std::string out =
      detail::str_cat("tdistrun: run ", run_id, " failed: ", n, n == 1 ? " worker" : " workers",
                      " failed; restarts used: ", restarts_used, " of ", max_restarts, "\n");
  for (size_t i = 0; i < n; ++i) {
    if (i == 0) out += "Root cause (first failure):\n";
    if (i == 1) out += "Other failures (in time order):\n";
    append_record(out, records[i]);
  }
  return out;
}

int summary_exit_code(const std::vector<FailureRecord>& records) {
  if (records.empty()) return 1;
  const FailureRecord& root = *std::min_element(records.begin(), records.end(), earlier);
  // A record from another node may hold any int: only a real signal number is added.
  if (root.signal > 0 && root.signal < 128) return 128 + root.signal;
  return root.exit_code != 0 ? root.exit_code : 1;
}

}  // namespace tdist::launcher
