// connect_comm: the host-key exchange, the choice of a kind per pair, and the Engine.
#include "transport/connect.h"

#include <cstring>
#include <random>
#include <sstream>
#include <string_view>

#include "core/polling.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/prefix_store.h"
#include "transport/core/engine.h"
#include "transport/shm/shm_comm.h"

namespace tdist::transport {
namespace {

// "1,2,5-7".
std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out << (i == 0 ? "" : ",") << ranks[i];
    if (j > i) out << "-" << ranks[j];
    i = j + 1;
  }
  return out.str();
}

}  // namespace

uint64_t group_nonce(Store& store, const std::string& key, bool publish, Deadline deadline) {
  uint64_t nonce = 0;
  if (publish) {
    std::random_device device;
    nonce = (uint64_t{device()} << 32) ^ device() ^
            static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    Bytes value(sizeof(nonce));
    std::memcpy(value.data(), &nonce, sizeof(nonce));
    store.set(key, value);
    return nonce;
  }
  Bytes value = store.get(key, deadline);
  TDIST_CHECK(value.size() == sizeof(nonce), PeerError, "store key ", key, " has ", value.size(),
              " bytes, expected 8 (is another program using this store prefix?)");
  std::memcpy(&nonce, value.data(), sizeof(nonce));
  return nonce;
}

void throw_setup_timeout(int rank, int size, const std::string& what,
                         const std::map<int, std::string>& failures, Clock::time_point start,
                         const std::string& hint) {
  std::ostringstream list;
  for (const auto& [peer, why] : failures) {
    list << (peer == failures.begin()->first ? "" : "; ") << "rank " << peer << ": " << why;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  TDIST_THROW(TimeoutError, "rank ", rank, ": ", what, " (world size ", size,
              ") did not finish within ", static_cast<int64_t>(secs * 10 + 0.5) / 10.0,
              "s; ranks never connected: ", list.str(), hint);
}

std::vector<std::string> exchange_host_keys(Store& store, int rank, int size,
                                            const std::string& key, Deadline deadline) {
  const auto start = Clock::now();
  store.set("host_key/" + std::to_string(rank), key);
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) keys.push_back("host_key/" + std::to_string(r));
  std::vector<Bytes> values;
  try {
    values = store.multi_get(keys, deadline);
  } catch (const TimeoutError&) {
    std::map<int, std::string> missing;
    for (int r = 0; r < size; ++r) {
      if (!store.check({keys[r]})) missing[r] = "it never connected (no host key in the store)";
    }
    throw_setup_timeout(rank, size, "transport setup", missing, start);
  }
  std::vector<std::string> hosts;
  hosts.reserve(values.size());
  for (const Bytes& v : values) hosts.push_back(to_string(v));
  return hosts;
}

std::unique_ptr<Comm> connect_comm(std::shared_ptr<Store> store, int rank, int size,
                                   ChannelKinds kinds, const ConnectOptions& options) {
  TDIST_CHECK(size >= 1, InvalidArgument, "transport: world size ", size, " is not positive");
  TDIST_CHECK(rank >= 0 && rank < size, InvalidArgument, "transport: rank ", rank,
              " is not in [0, ", size, ")");
  TDIST_CHECK(store != nullptr, InvalidArgument, "transport: no store given");
  TDIST_CHECK(!kinds.empty(), InvalidArgument, "transport: no kind of channel given");
  const Deadline deadline = Deadline::after(options.timeout);
  for (auto& kind : kinds) kind->prepare(*store);
  // Each rank's host key, then the CPUs it may run on (for the polling rule, polling.h).
  const std::string key = options.host_key.empty() ? shm_host_key() : options.host_key;
  std::vector<std::string> hosts =
      exchange_host_keys(*store, rank, size, key + '\n' + tdist::core::affinity_list(), deadline);
  std::vector<std::string> cpus(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    const size_t newline = hosts[r].find('\n');
    if (newline == std::string::npos) continue;
    cpus[r] = hosts[r].substr(newline + 1);
    hosts[r].resize(newline);
  }
  // kind_of[a * size + b]: the index of the kind joining a and b (symmetric).
  std::vector<int> kind_of(static_cast<size_t>(size) * size, -1);
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      int chosen = -1;
      for (size_t k = 0; k < kinds.size() && chosen < 0; ++k) {
        if (kinds[k]->can_connect(hosts[a], hosts[b])) chosen = static_cast<int>(k);
      }
      if (chosen < 0 && (a == rank || b == rank)) {
        std::string names;
        for (const auto& k : kinds) names += std::string(names.empty() ? "" : ", ") + k->name();
        TDIST_THROW(InvalidArgument, "rank ", rank, ": no allowed kind of channel (", names,
                    ") can reach rank ", a == rank ? b : a, " (host ", hosts[a == rank ? b : a],
                    ") from this rank (host ", hosts[rank], ")", options.unreachable_hint);
      }
      kind_of[a * size + b] = kind_of[b * size + a] = chosen;
    }
  }
  ChannelTable channels(static_cast<size_t>(size));
  std::ostringstream choice;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const int kind = static_cast<int>(k);
    int first = -1;
    for (int a = 0; a < size && first < 0; ++a) {
      for (int b = 0; b < size; ++b) {
        if (a != b && kind_of[a * size + b] == kind) first = a;
      }
    }
    std::vector<bool> peers(static_cast<size_t>(size), false);
    std::vector<int> peer_list;
    for (int r = 0; r < size; ++r) {
      if (r != rank && kind_of[rank * size + r] == kind) {
        peers[r] = true;
        peer_list.push_back(r);
      }
    }
    if (peer_list.empty()) continue;
    choice << (choice.tellp() > 0 ? "; " : "") << kinds[k]->name() << " to ranks "
           << rank_list(peer_list);
    PrefixStore kind_store(kinds[k]->name(), store);
    ChannelTable table = kinds[k]->connect(kind_store, rank, size, peers, first, deadline);
    for (int r : peer_list) channels[r] = std::move(table[r]);
  }
  Topology topology = Topology::from_host_keys(hosts);
  topology.machine_cpus.resize(static_cast<size_t>(topology.num_machines()));
  for (int m = 0; m < topology.num_machines(); ++m) {
    std::vector<std::string> lists;
    for (int r : topology.ranks_on_machine(m)) lists.push_back(cpus[static_cast<size_t>(r)]);
    topology.machine_cpus[static_cast<size_t>(m)] = tdist::core::union_cpu_count(lists);
  }
  // The group's link class, from every pair (so every rank computes the same): shm when
  // shared memory joins every pair, tcp (the slower class) when any other kind joins one.
  topology.link = LinkClass::kShm;
  for (int a = 0; a < size; ++a) {
    for (int b = a + 1; b < size; ++b) {
      if (std::string_view(kinds[kind_of[a * size + b]]->name()) != "shm") {
        topology.link = LinkClass::kTcp;
      }
    }
  }
  TDIST_LOG(kDebug) << "rank " << rank << " of " << size << ": channels: "
                    << (size > 1 ? choice.str() : std::string("none (world size 1)"))
                    << "; link class " << link_class_name(topology.link);
  auto engine = std::make_unique<core::Engine>(rank, size, std::move(channels));
  engine->set_topology(std::move(topology));
  return engine;
}

}  // namespace tdist::transport
