// Topology (topology.h).
#include "transport/topology.h"

#include <algorithm>
#include <map>

namespace tdist::transport {

const char* link_class_name(LinkClass link) {
  switch (link) {
    case LinkClass::kShm:
      return "shm";
    case LinkClass::kTcp:
      return "tcp";
    case LinkClass::kUnknown:
      break;
  }
  return "unknown";
}

Topology Topology::from_host_keys(const std::vector<std::string>& keys) {
  Topology t;
  std::map<std::string, int> index;
  t.host_of.reserve(keys.size());
  for (const std::string& key : keys) {
    auto [it, inserted] = index.emplace(key, static_cast<int>(index.size()));
    t.host_of.push_back(it->second);
  }
  return t;
}

int Topology::num_hosts() const {
  if (host_of.empty()) return 1;
  return *std::max_element(host_of.begin(), host_of.end()) + 1;
}

std::vector<int> Topology::ranks_on(int host) const {
  std::vector<int> ranks;
  for (size_t r = 0; r < host_of.size(); ++r) {
    if (host_of[r] == host) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::vector<int> Topology::leaders() const {
  std::vector<int> out(static_cast<size_t>(num_hosts()), -1);
  for (size_t r = 0; r < host_of.size(); ++r) {
    if (out[host_of[r]] < 0) out[host_of[r]] = static_cast<int>(r);
  }
  return out;
}

bool Topology::uniform() const {
  std::vector<int> counts(static_cast<size_t>(num_hosts()), 0);
  for (int h : host_of) ++counts[h];
  return std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts.front(); });
}

}  // namespace tdist::transport
