// Store-address agreement: how the processes of a job started by a launcher other than
// tdistrun (mpirun) agree on where the rendezvous store is when MASTER_ADDR and
// MASTER_PORT are unset. The rendezvous layer names no launcher and keeps no agreement:
// its caller passes one explicitly (rendezvous_with_agreement). The public rendezvous()
// and init_process_group pass the built-in backends' agreement (backends/builtin.h: the
// mpi backend's, in a build with MPI), so the result never depends on what ran first.
// Internal to tdist.
//
// Thread-safety: plain values; rendezvous_with_agreement is as thread-safe as
// rendezvous(). Blocking: agree() is collective over every process of the job and blocks
// until all took part. Failures: agree() and host_store() throw tdist exceptions, which
// reach the rendezvous caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "tdist/rendezvous.h"

namespace tdist::rendezvous_detail {

struct StoreAgreement {
  // The channel, in messages: "MPI".
  std::string name;
  // Whether this process was started by that launcher (reads the environment only).
  std::function<bool()> applies;
  // Collective over every process of the job: exactly one process calls host_store(),
  // which starts the store and returns its port; every process returns "host:port" of
  // that store ("[v6]:port" for an IPv6 host).
  std::function<std::string(const std::function<uint16_t()>& host_store)> agree;
};

// True when `agreement` is given and applies to this process.
inline bool applies(const StoreAgreement* agreement) {
  return agreement != nullptr && agreement->applies && agreement->applies();
}

// rendezvous(init_method, ...) of tdist/rendezvous.h with the launcher's agreement
// given: env:// with neither MASTER_ADDR nor MASTER_PORT set (and no TDIST_AGENT_STORE)
// agrees on the store through `agreement` when it applies. Null: no agreement.
RendezvousResult rendezvous_with_agreement(const std::string& init_method, int rank, int world_size,
                                           std::chrono::milliseconds timeout,
                                           const StoreAgreement* agreement);

// open_job_store (tdist/rendezvous.h) with the launcher's agreement given.
JobStore open_job_store_with_agreement(const std::string& init_method, int rank, int world_size,
                                       std::chrono::milliseconds timeout, const char* caller,
                                       bool must_survive_ranks, const StoreAgreement* agreement);

}  // namespace tdist::rendezvous_detail
