// Store-address agreement: how the processes of a job started by a launcher other than
// tdistrun (mpirun) agree on where the rendezvous store is when MASTER_ADDR and
// MASTER_PORT are unset. The rendezvous layer names no launcher: a module above it (the
// mpi backend) installs one agreement, and env:// uses it when it applies. Internal to
// tdist.
//
// Thread-safety: install and lookup may run on any thread at any time. Blocking: agree()
// is collective over every process of the job and blocks until all took part. Failures:
// agree() and host_store() throw tdist exceptions, which reach the rendezvous caller.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

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

// Installs `agreement`, replacing any earlier one.
void install_store_agreement(StoreAgreement agreement);

// The installed agreement when there is one and it applies to this process.
std::optional<StoreAgreement> applicable_store_agreement();

}  // namespace tdist::rendezvous_detail
