// Parsing of init methods (env://, tcp://, file://) and the launcher environment into a
// plain InitSpec, without contacting anything. Internal to the rendezvous layer; unit
// tests call it directly. Reads the environment on every call; thread-safe as getenv is.
// Failures: InvalidArgument naming the variable, URL part or argument and the value.
#pragma once

#include <cstdint>
#include <string>

namespace tdist::rendezvous_detail {

enum class InitScheme { kEnv, kTcp, kFile };

struct InitSpec {
  InitScheme scheme = InitScheme::kEnv;
  std::string host;  // env:// and tcp://: the store's host (brackets of IPv6 removed)
  uint16_t port = 0;
  std::string path;  // file://: the store's file
  int rank = -1;
  int world_size = -1;
  bool agent_store = false;  // the launcher hosts the TCPStore; rank 0 is only a client
  // TDIST_AGENT_STORE=etcd://host:port: the store is etcd at host:port (EtcdStore), under
  // key_prefix; nobody hosts anything.
  bool etcd = false;
  // env:// without MASTER_ADDR/MASTER_PORT under a launcher whose agreement was given
  // (store_agreement.h): host and port are agreed at connection time, not parsed.
  bool agreed_store = false;
  // Prefix of every key when the launcher hosts the store: TDIST_AGENT_STORE_PREFIX, else
  // "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"; empty otherwise.
  std::string key_prefix;
};

struct StoreAgreement;

// Resolves `init_method` plus explicit rank / world_size (-1 = unspecified). For env://
// a set TDIST_AGENT_STORE (tdistrun's store) replaces MASTER_ADDR/MASTER_PORT; with
// neither set, `agreement` (store_agreement.h; may be null) sets agreed_store when it
// applies to this process.
InitSpec parse_init_method(const std::string& init_method, int rank, int world_size,
                           const StoreAgreement* agreement = nullptr);

// True when host is an IPv6 literal (contains ':').
bool is_ipv6_literal(const std::string& host);

// True when TDIST_USE_AGENT_STORE (or, when that is unset, TORCHELASTIC_USE_AGENT_STORE)
// says the launcher hosts the store.
bool use_agent_store();

}  // namespace tdist::rendezvous_detail
