// The shm and auto Comm factories (local_comms.h).
#include "backends/local_comms.h"

#include <algorithm>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "transport/shm/shm_comm.h"
#include "transport/tcp/tcp_comm.h"

namespace tdist::backends {
namespace {

// Every rank's host key, by rank (the same vector on every rank).
std::vector<std::string> exchange_host_keys(Store& store, int rank, int size,
                                            std::chrono::milliseconds timeout) {
  store.set("host_key/" + std::to_string(rank), transport::shm_host_key());
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) keys.push_back("host_key/" + std::to_string(r));
  std::vector<Bytes> values = store.multi_get(keys, Deadline::after(timeout));
  std::vector<std::string> hosts;
  hosts.reserve(values.size());
  for (const Bytes& v : values) hosts.push_back(to_string(v));
  return hosts;
}

std::unique_ptr<transport::Comm> shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                          std::chrono::milliseconds timeout) {
  transport::ShmCommOptions options;
  options.timeout = timeout;
  return transport::connect_shm_comm(std::move(store), rank, size, options);
}

}  // namespace

std::unique_ptr<transport::Comm> make_tcp_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  transport::TcpCommOptions options;
  options.timeout = timeout;
  return transport::connect_tcp_comm(std::move(store), rank, size, options);
}

std::unique_ptr<transport::Comm> make_shm_comm(std::shared_ptr<Store> store, int rank, int size,
                                               std::chrono::milliseconds timeout) {
  const std::vector<std::string> hosts = exchange_host_keys(*store, rank, size, timeout);
  for (int r = 0; r < size; ++r) {
    TDIST_CHECK(hosts[r] == hosts[rank], InvalidArgument, "backend 'shm': rank ", r,
                " is on another host or network namespace (", hosts[r], ") than rank ", rank, " (",
                hosts[rank],
                "); the shm backend needs every rank on one host: use 'auto', which "
                "uses shared memory inside a host and TCP between hosts");
  }
  return shm_comm(std::make_shared<PrefixStore>("shm/", std::move(store)), rank, size, timeout);
}

std::unique_ptr<transport::Comm> make_auto_comm(std::shared_ptr<Store> store, int rank, int size,
                                                std::chrono::milliseconds timeout) {
  const std::vector<std::string> hosts = exchange_host_keys(*store, rank, size, timeout);
  const bool one_host = std::all_of(hosts.begin(), hosts.end(),
                                    [&](const std::string& h) { return h == hosts.front(); });
  std::unique_ptr<transport::Comm> comm;
  if (one_host) {
    comm = shm_comm(std::make_shared<PrefixStore>("shm/", std::move(store)), rank, size, timeout);
  } else {
    comm =
        make_tcp_comm(std::make_shared<PrefixStore>("tcp/", std::move(store)), rank, size, timeout);
  }
  comm->set_topology(transport::Topology::from_host_keys(hosts));
  return comm;
}

}  // namespace tdist::backends
