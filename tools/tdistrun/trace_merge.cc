// Merging the workers' timelines (see trace_merge.h).
#include "tdistrun/trace_merge.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "diag/trace.h"

namespace tdist::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr std::string_view kPrefix = "tdist_trace_rank";
constexpr std::string_view kSuffix = ".json";

// The rank of "tdist_trace_rank<digits>.json", or -1.
int rank_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || name.rfind(kPrefix, 0) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  const std::string digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoi(digits);
}

}  // namespace

void remove_rank_traces(const std::string& dir, const std::vector<int>& ranks) {
  for (int rank : ranks) {
    std::error_code ignored;
    fs::remove(diag::trace_file(dir, rank), ignored);
  }
}

std::string merge_traces(const std::string& dir, int world_size) {
  std::map<int, fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int rank = rank_of(entry.path().filename().string());
    if (rank >= 0 && rank < world_size) files[rank] = entry.path();
  }
  if (files.empty()) return "";
  ordered_json events = ordered_json::array();
  ordered_json ranks = ordered_json::object();
  std::string skipped;
  size_t good = 0;
  for (const auto& [rank, path] : files) {
    std::ifstream in(path);
    ordered_json trace = ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (trace.is_discarded() || !trace.is_object() || !trace.contains("traceEvents") ||
        !trace["traceEvents"].is_array()) {
      skipped += (skipped.empty() ? "" : ", ") + std::to_string(rank);
      continue;
    }
    ++good;
    for (auto& e : trace["traceEvents"]) events.push_back(std::move(e));
    if (trace.contains("otherData")) ranks[std::to_string(rank)] = std::move(trace["otherData"]);
  }
  ordered_json out = ordered_json::object();
  out["displayTimeUnit"] = "ms";
  out["otherData"] = {{"tdist_trace", 1}, {"ts_base", "unix_epoch_us"}, {"ranks", ranks}};
  out["traceEvents"] = std::move(events);
  const fs::path target = fs::path(dir) / "tdist_trace.json";
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream file(tmp, std::ios::trunc);
    file << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
    if (!file.flush()) {
      fs::remove(tmp, ec);
      return "cannot write the timeline " + target.string();
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return "cannot write the timeline " + target.string();
  }
  std::string line = "timeline of " + std::to_string(good) + (good == 1 ? " rank" : " ranks") +
                     " written to " + target.string();
  if (!skipped.empty()) line += " (left out, not complete JSON: rank " + skipped + ")";
  return line;
}

}  // namespace tdist::launcher
