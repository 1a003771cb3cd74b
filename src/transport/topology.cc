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
  std::map<std::string, int> hosts;
  std::map<std::string, int> machines;
  t.host_of.reserve(keys.size());
  t.machine_of.reserve(keys.size());
  for (const std::string& key : keys) {
    t.host_of.push_back(hosts.emplace(key, static_cast<int>(hosts.size())).first->second);
    const std::string boot_id = key.substr(0, key.find(':'));
    t.machine_of.push_back(
        machines.emplace(boot_id, static_cast<int>(machines.size())).first->second);
  }
  return t;
}

Topology Topology::of_ranks(const std::vector<int>& ranks) const {
  Topology t;
  t.link = link;
  // Renumbers `of` (by rank, here) for the group: numbers by first appearance.
  auto renumber = [&](const std::vector<int>& of, std::vector<int>* out, std::vector<int>* old) {
    if (of.empty()) return;
    std::map<int, int> number;
    for (int r : ranks) {
      const int before = of[static_cast<size_t>(r)];
      const auto [it, added] = number.emplace(before, static_cast<int>(number.size()));
      if (added && old != nullptr) old->push_back(before);
      out->push_back(it->second);
    }
  };
  renumber(host_of, &t.host_of, nullptr);
  std::vector<int> machines;  // the new machine i's old number
  renumber(machine_of, &t.machine_of, &machines);
  if (!machine_cpus.empty()) {
    for (int m : machines) {
      const auto i = static_cast<size_t>(m);
      t.machine_cpus.push_back(i < machine_cpus.size() ? machine_cpus[i] : 0);
    }
  }
  return t;
}

int Topology::num_machines() const {
  if (machine_of.empty()) return 1;
  return *std::max_element(machine_of.begin(), machine_of.end()) + 1;
}

std::vector<int> Topology::ranks_on_machine(int machine) const {
  std::vector<int> ranks;
  for (size_t r = 0; r < machine_of.size(); ++r) {
    if (machine_of[r] == machine) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
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
