// rendezvous(init_method, ...) (tdist/rendezvous.h): the rendezvous layer's, given the
// store agreement of the built-in backends (builtin.h) explicitly. Defined here, above
// both layers, so that the rendezvous layer names no launcher and env:// under mpirun
// behaves the same whether or not anything touched the backend registry first.
#include <optional>

#include "backends/builtin.h"
#include "rendezvous/store_agreement.h"
#include "tdist/rendezvous.h"

namespace tdist {

RendezvousResult rendezvous(const std::string& init_method, int rank, int world_size,
                            std::chrono::milliseconds timeout) {
  const std::optional<rendezvous_detail::StoreAgreement> agreement =
      backends::builtin_store_agreement();
  return rendezvous_detail::rendezvous_with_agreement(init_method, rank, world_size, timeout,
                                                      agreement ? &*agreement : nullptr);
}

JobStore open_job_store(const std::string& init_method, int rank, int world_size,
                        std::chrono::milliseconds timeout, const char* caller,
                        bool must_survive_ranks) {
  const std::optional<rendezvous_detail::StoreAgreement> agreement =
      backends::builtin_store_agreement();
  return rendezvous_detail::open_job_store_with_agreement(init_method, rank, world_size, timeout,
                                                          caller, must_survive_ranks,
                                                          agreement ? &*agreement : nullptr);
}

}  // namespace tdist
