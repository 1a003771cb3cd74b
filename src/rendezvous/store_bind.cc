// store_listen_host (store_bind.h).
#include "rendezvous/store_bind.h"

#include <sys/socket.h>

#include <vector>

#include "net/address.h"
#include "tdist/logging.h"
#include "tdist/settings.h"

namespace tdist::rendezvous_detail {

std::string store_listen_host(const std::string& host) {
  if (setting_is_set("TDIST_STORE_BIND")) return setting_string("TDIST_STORE_BIND");
  const std::vector<net::SocketAddress> resolved = net::resolve(host, 0, /*passive=*/false);
  for (const net::SocketAddress& address : resolved) {
    if (address.is_local()) return address.ip();
  }
  const std::string any = resolved.front().family() == AF_INET6 ? "::" : "0.0.0.0";
  TDIST_LOG(kWarn) << "rendezvous: the store's host " << host << " (" << resolved.front().ip()
                   << ") is not an address of this machine; its store listens on every interface ("
                   << any << "); set TDIST_STORE_BIND to choose one";
  return any;
}

}  // namespace tdist::rendezvous_detail
