// The built-in backends (builtin.h).
#include "backends/builtin.h"

#include "backends/comm_group.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::backends {
namespace {

std::unique_ptr<transport::Comm> make_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  transport::TcpCommOptions options;
  options.timeout = timeout;
  return transport::connect_tcp_comm(std::move(store), rank, size, options);
}

}  // namespace

std::vector<std::pair<std::string, BackendFactory>> builtin_backends() {
  return {
      {"tcp",
       [](std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout) {
         return std::make_shared<CommProcessGroup>("tcp", make_tcp_comm, std::move(store), rank,
                                                   size, timeout);
       }},
  };
}

}  // namespace tdist::backends
