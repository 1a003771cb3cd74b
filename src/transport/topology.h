// Topology: which ranks of a Comm share a host, for algorithms that treat intra-host and
// inter-host traffic differently (hierarchical collectives).
//
// host_of[r] is the host index of rank r: ranks whose host keys are equal
// (transport::shm_host_key(): boot id, network namespace) get the same index, and hosts
// are numbered 0, 1, ... in order of their lowest rank. Every rank of a Comm holds the
// same Topology (built from the same store exchange). An empty Topology means "unknown":
// treat every rank as on one host.
//
// link is the class of the slowest link between two ranks of the group, the same on every
// rank (connect_comm computes it from every pair's kind of channel): kShm when every pair
// is joined by shared memory, kTcp when some pair is joined over TCP. Algorithm selection
// uses it (collectives/selection.h); kUnknown (a Comm not built by connect_comm) selects
// as kTcp. Plain value; thread-safe to read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tdist::transport {

enum class LinkClass : uint8_t { kUnknown, kShm, kTcp };

// "unknown", "shm", "tcp".
const char* link_class_name(LinkClass link);

struct Topology {
  std::vector<int> host_of;  // by rank; empty = unknown (one host)
  LinkClass link = LinkClass::kUnknown;
  // The machines the ranks run on: ranks whose host keys name one boot id (the key's text
  // before its first ':') share one kernel and its CPUs, even from different network
  // namespaces (hosts above). By rank, numbered like host_of; empty = unknown.
  std::vector<int> machine_of;
  // By machine: how many CPUs its ranks may run on together (the union of their affinity
  // masks; connect_comm fills it in); empty or 0 = unknown. Polling (polling.h) counts the
  // ranks and CPUs of a machine, not of a host.
  std::vector<int> machine_cpus;

  // From every rank's host key, by rank: host_of and machine_of.
  static Topology from_host_keys(const std::vector<std::string>& keys);
  // The topology of a group of some of these ranks (`ranks`: its rank i is ranks[i]): hosts
  // and machines renumbered in order of their lowest rank there; the same link class and
  // CPUs per machine. Unknown stays unknown.
  Topology of_ranks(const std::vector<int>& ranks) const;

  bool known() const { return !host_of.empty(); }
  int num_hosts() const;
  // True when every rank is on one host (or the topology is unknown).
  bool single_host() const { return num_hosts() <= 1; }
  // The ranks on `host`, ascending.
  std::vector<int> ranks_on(int host) const;
  // The lowest rank of each host, by host index (the hosts' "leaders").
  std::vector<int> leaders() const;
  // True when every host has the same number of ranks.
  bool uniform() const;
  int num_machines() const;
  // The ranks on `machine`, ascending.
  std::vector<int> ranks_on_machine(int machine) const;
};

}  // namespace tdist::transport
