// The backends built into tdist, registered by name on the registry's first use, and
// the rendezvous store agreement they bring (store_agreement.h), asked for explicitly by
// rendezvous(init_method) whether or not the registry was used. Thread-safe: both
// functions only build values.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/store_agreement.h"
#include "tdist/backend.h"

namespace tdist::backends {

// (name, factory) of every built-in backend of this build.
std::vector<std::pair<std::string, BackendFactory>> builtin_backends();

// The store agreement of this build's launchers: MPI's (the mpi backend's, used under
// mpirun for every backend) in a build with MPI, else none. Whether it applies to this
// process is its own applies().
std::optional<rendezvous_detail::StoreAgreement> builtin_store_agreement();

}  // namespace tdist::backends

namespace tdist {
using backends::builtin_backends;
}  // namespace tdist
