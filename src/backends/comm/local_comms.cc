// The tcp, shm and auto Comm factories (local_comms.h).
#include "backends/comm/local_comms.h"

#include <string>
#include <vector>

#include "transport/connect.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::backends {

std::unique_ptr<transport::Comm> make_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  transport::TcpCommOptions options = transport::TcpCommOptions::from_settings();
  options.timeout = timeout;
  return transport::connect_tcp_comm(std::move(store), rank, size, options);
}

std::unique_ptr<transport::Comm> make_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  transport::ShmCommOptions options = transport::ShmCommOptions::from_settings();
  options.timeout = timeout;
  return transport::connect_shm_comm(
      std::move(store), rank, size, options,
      "; backend 'shm' needs every rank on one host: use 'auto', which uses shared memory "
      "inside a host and TCP between hosts");
}

std::unique_ptr<transport::Comm> make_auto_comm(std::shared_ptr<Store> store, int rank, int size,
                                                std::chrono::milliseconds timeout) {
  transport::ConnectOptions options;
  options.timeout = timeout;
  return transport::connect_comm(std::move(store), rank, size, transport::default_channel_kinds(),
                                 options);
}

}  // namespace tdist::backends
