// CollectiveSettings (settings.h): TDIST_ALGO and TDIST_CHUNK_BYTES parsing.
#include "collectives/settings.h"

#include <string>

#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::coll {
namespace {

std::string collective_names() {
  std::string out;
  for (Collective c : kAllCollectives) {
    if (!out.empty()) out += ", ";
    out += collective_name(c);
  }
  return out;
}

Algorithm parse_for(Collective c, std::string_view name) {
  for (Algorithm a : algorithms_for(c)) {
    if (algorithm_name(a) == name) return a;
  }
  TDIST_THROW(InvalidArgument, "TDIST_ALGO: '", name, "' is not an algorithm for ",
              collective_name(c), "; valid: ", algorithm_names(c));
}

Collective parse_collective(std::string_view name) {
  for (Collective c : kAllCollectives) {
    if (collective_name(c) == name) return c;
  }
  TDIST_THROW(InvalidArgument, "TDIST_ALGO: '", name,
              "' is not a collective; valid: ", collective_names());
}

}  // namespace

CollectiveSettings CollectiveSettings::parse(std::string_view algo, int64_t chunk_bytes) {
  TDIST_CHECK(chunk_bytes > 0, InvalidArgument, "TDIST_CHUNK_BYTES must be positive, found ",
              chunk_bytes);
  CollectiveSettings s;
  s.chunk_bytes = static_cast<size_t>(chunk_bytes);
  s.chunk_given = true;
  std::string_view rest = algo;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty() || item == "auto") continue;
    const size_t eq = item.find('=');
    const Collective target = eq == std::string_view::npos ? Collective::kAllReduce
                                                           : parse_collective(item.substr(0, eq));
    const std::string_view name = eq == std::string_view::npos ? item : item.substr(eq + 1);
    if (name == "auto") continue;
    s.forced_algorithms[static_cast<size_t>(target)] = parse_for(target, name);
  }
  return s;
}

CollectiveSettings CollectiveSettings::from_environment() {
  CollectiveSettings s = parse(setting_string("TDIST_ALGO"), setting_int("TDIST_CHUNK_BYTES"));
  s.chunk_given = setting_is_set("TDIST_CHUNK_BYTES");
  return s;
}

}  // namespace tdist::coll
