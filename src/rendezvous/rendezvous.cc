// Rendezvous: connecting to (or hosting) the job's store and joining a round
// (rendezvous.h describes the init methods and the key layout).
#include "tdist/rendezvous.h"

#include <string>
#include <utility>
#include <vector>

#include "net/address.h"
#include "rendezvous/init_method.h"
#include "rendezvous/store_agreement.h"
#include "rendezvous/store_bind.h"
#include "tdist/error.h"
#include "tdist/etcd_store.h"
#include "tdist/file_store.h"
#include "tdist/logging.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using rendezvous_detail::InitScheme;
using rendezvous_detail::InitSpec;
using rendezvous_detail::StoreAgreement;
using std::chrono::milliseconds;

constexpr char kJoinPrefix[] = "tdist/rdzv";
constexpr char kGroupPrefix[] = "tdist/pg/";
constexpr char kOk[] = "ok";

// Rank 0's server, kept alive exactly as long as the client store handed out.
// Members are destroyed in reverse order: the client closes before the server stops.
struct HostedStore {
  std::unique_ptr<TCPStoreServer> server;
  std::shared_ptr<TCPStore> client;
};

std::string host_port(const std::string& host, uint16_t port) {
  if (rendezvous_detail::is_ipv6_literal(host)) return detail::str_cat("[", host, "]:", port);
  return detail::str_cat(host, ":", port);
}

// Connects a client to host:port; keeps `server` (this process's, or null) alive with it.
std::shared_ptr<Store> connect_client(const InitSpec& spec, const std::string& host, uint16_t port,
                                      std::unique_ptr<TCPStoreServer> server, milliseconds timeout,
                                      Deadline deadline) {
  TCPStoreOptions options;
  options.port = port;
  options.timeout = timeout;
  options.connect_timeout = deadline.remaining();
  std::shared_ptr<TCPStore> client;
  try {
    client = std::make_shared<TCPStore>(host, options);
  } catch (const TimeoutError& e) {
    const char* who = spec.agreed_store  ? "the store's host"
                      : spec.agent_store ? "the launcher"
                                         : "rank 0";
    const char* what = spec.agreed_store                 ? "the agreed address"
                       : spec.scheme == InitScheme::kEnv ? "MASTER_ADDR/MASTER_PORT"
                                                         : "the init_method";
    TDIST_THROW(TimeoutError, "rendezvous could not reach the store at ", host_port(host, port),
                " within ", timeout.count(), " ms: ", e.what(), "; check that ", who,
                " is running and that ", what, " point at it");
  }
  if (!server) return client;
  auto hosted = std::make_shared<HostedStore>(HostedStore{std::move(server), std::move(client)});
  return std::shared_ptr<Store>(hosted, hosted->client.get());
}

std::shared_ptr<Store> connect_tcp(const InitSpec& spec, milliseconds timeout, Deadline deadline) {
  std::unique_ptr<TCPStoreServer> server;
  if (spec.rank == 0 && !spec.agent_store) {
    const std::string bind = rendezvous_detail::store_listen_host(spec.host);
    try {
      server = TCPStoreServer::start(bind, spec.port);
    } catch (const Error& e) {
      TDIST_THROW(Error, "rank 0 could not host the store on port ", spec.port, ": ", e.what(),
                  "; choose a free MASTER_PORT, or set TDIST_USE_AGENT_STORE=1 when the launcher "
                  "hosts the store");
    }
  }
  return connect_client(spec, spec.host, spec.port, std::move(server), timeout, deadline);
}

// env:// under a launcher without MASTER_ADDR/MASTER_PORT: the process the agreement
// elects hosts the store on a free port, and the launcher's channel tells everyone where.
std::shared_ptr<Store> connect_agreed(InitSpec& spec, const StoreAgreement& agreement,
                                      milliseconds timeout, Deadline deadline) {
  std::unique_ptr<TCPStoreServer> server;
  const std::string address = agreement.agree([&] {
    server = TCPStoreServer::start("0.0.0.0", 0);
    return server->port();
  });
  const net::HostPort hp = net::parse_host_port(address);
  spec.host = hp.host;
  spec.port = hp.port;
  TDIST_LOG(kInfo) << "rendezvous: the store's address " << address << " was agreed through "
                   << agreement.name;
  return connect_client(spec, hp.host, hp.port, std::move(server), timeout, deadline);
}

// `agreement`: the one parse_init_method was given (non-null when spec.agreed_store).
std::shared_ptr<Store> open_store(InitSpec& spec, const StoreAgreement* agreement,
                                  milliseconds timeout, Deadline deadline) {
  if (spec.scheme == InitScheme::kFile) {
    return std::make_shared<FileStore>(spec.path, spec.world_size, timeout);
  }
  if (spec.etcd) {  // keys as a PrefixStore would lay them out, counted under the prefix only
    return std::make_shared<EtcdStore>(spec.host, spec.port, spec.key_prefix + "/", timeout);
  }
  std::shared_ptr<Store> store = spec.agreed_store
                                     ? connect_agreed(spec, *agreement, timeout, deadline)
                                     : connect_tcp(spec, timeout, deadline);
  if (spec.key_prefix.empty()) return store;
  return std::make_shared<PrefixStore>(spec.key_prefix, std::move(store));
}

std::string describe(const InitSpec& spec) {
  switch (spec.scheme) {
    case InitScheme::kFile:
      return "FileStore " + spec.path;
    case InitScheme::kEnv:
    case InitScheme::kTcp:
      break;
  }
  if (spec.etcd) {
    return detail::str_cat("EtcdStore ", host_port(spec.host, spec.port), " (keys under ",
                           spec.key_prefix, "/)");
  }
  return detail::str_cat("TCPStore ", host_port(spec.host, spec.port),
                         spec.agent_store    ? " (hosted by the launcher)"
                         : spec.agreed_store ? " (address agreed through the launcher)"
                                             : "");
}

// Joins round (n-1)/world_size of the store's arrival counter; see rendezvous.h.
RendezvousResult join(std::shared_ptr<Store> base, int rank, int world_size, milliseconds timeout,
                      Deadline deadline, const std::string& where) {
  PrefixStore join_store(kJoinPrefix, base);
  const int64_t arrival = join_store.add("joining", 1);
  const int64_t round = (arrival - 1) / world_size;
  const std::string r = detail::str_cat(round, "/");
  const std::string ws_text = std::to_string(world_size);

  // An error found here ends the round for every rank: they all read it from "done".
  auto fail = [&](const std::string& why) {
    join_store.set(r + "done", why);
    TDIST_THROW(InvalidArgument, "rendezvous at ", where, " failed: ", why);
  };
  Bytes registered = join_store.compare_set(r + "world_size", Bytes(), to_bytes(ws_text));
  if (to_string(registered) != ws_text) {
    fail(detail::str_cat("rank ", rank, " has world_size ", world_size,
                         " but another rank registered world_size ", to_string(registered),
                         "; every rank must use the same world size"));
  }
  if (join_store.add(detail::str_cat(r, "rank/", rank), 1) > 1) {
    fail(detail::str_cat("rank ", rank,
                         " was claimed by two processes; every process needs a distinct rank in "
                         "0..",
                         world_size - 1));
  }
  if (join_store.add(r + "joined", 1) == world_size) {
    // Every rank claimed one rank key before joining: all keys exist iff no duplicates.
    std::vector<std::string> keys;
    for (int i = 0; i < world_size; ++i) keys.push_back(detail::str_cat(r, "rank/", i));
    if (join_store.check(keys)) {
      join_store.set(r + "done", kOk);
    } else {
      fail("some ranks were claimed twice and others not at all");
    }
  }

  Bytes done;
  try {
    done = join_store.get(r + "done", deadline);
  } catch (const TimeoutError&) {
    const int64_t joined = join_store.add(r + "joined", 0);
    TDIST_THROW(TimeoutError, "rendezvous at ", where, " timed out after ", timeout.count(),
                " ms: ", joined, " of ", world_size, " ranks joined (round ", round,
                "); check that every rank was started, with the same world size and store");
  }
  if (to_string(done) != kOk) {
    TDIST_THROW(InvalidArgument, "rendezvous at ", where, " failed: ", to_string(done));
  }

  auto store = std::make_shared<PrefixStore>(detail::str_cat(kGroupPrefix, round), std::move(base));
  store->set_timeout(timeout);
  TDIST_LOG(kInfo) << "rendezvous at " << where << ": rank " << rank << " of " << world_size
                   << " joined round " << round;
  return RendezvousResult{std::move(store), rank, world_size};
}

}  // namespace

milliseconds default_pg_timeout() { return setting_seconds("TDIST_TIMEOUT"); }

// rendezvous(init_method, ...) itself is defined above this layer
// (pg/launcher_rendezvous.cc), which passes the built-in store agreement.
RendezvousResult rendezvous_detail::rendezvous_with_agreement(const std::string& init_method,
                                                              int rank, int world_size,
                                                              milliseconds timeout,
                                                              const StoreAgreement* agreement) {
  const Deadline deadline = Deadline::after(timeout);
  InitSpec spec = rendezvous_detail::parse_init_method(init_method, rank, world_size, agreement);
  std::shared_ptr<Store> store = open_store(spec, agreement, timeout, deadline);
  return join(std::move(store), spec.rank, spec.world_size, timeout, deadline, describe(spec));
}

JobStore rendezvous_detail::open_job_store_with_agreement(const std::string& init_method, int rank,
                                                          int world_size, milliseconds timeout,
                                                          const char* caller,
                                                          bool must_survive_ranks,
                                                          const StoreAgreement* agreement) {
  const Deadline deadline = Deadline::after(timeout);
  InitSpec spec = rendezvous_detail::parse_init_method(init_method, rank, world_size, agreement);
  const bool survives = spec.scheme == InitScheme::kFile || spec.agent_store;
  if (must_survive_ranks && !survives) {
    TDIST_THROW(InvalidArgument, caller != nullptr ? caller : "open_job_store",
                ": the job's store would be the ", describe(spec),
                ", which one of the job's processes hosts, so its death would end the job; run "
                "under tdistrun (its agent hosts the store), with --rdzv-backend etcd-v2, or pass "
                "a store that outlives every rank");
  }
  JobStore out;
  out.store = open_store(spec, agreement, timeout, deadline);
  out.rank = spec.rank;
  out.world_size = spec.world_size;
  out.survives_ranks = survives;
  out.where = describe(spec);
  return out;
}

RendezvousResult rendezvous(std::shared_ptr<Store> store, int rank, int world_size,
                            milliseconds timeout) {
  TDIST_CHECK(store != nullptr, InvalidArgument, "rendezvous: the store is null");
  TDIST_CHECK(world_size >= 1, InvalidArgument,
              "rendezvous on a given store: world_size=", world_size,
              " is invalid; pass the number of ranks (>= 1)");
  TDIST_CHECK(rank >= 0 && rank < world_size, InvalidArgument,
              "rendezvous on a given store: rank=", rank, " is invalid; pass a rank in 0..",
              world_size - 1);
  const Deadline deadline = Deadline::after(timeout);
  return join(std::move(store), rank, world_size, timeout, deadline, "the given store");
}

}  // namespace tdist
