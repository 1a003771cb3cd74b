// Helpers of the TCPStore tests (tcp_store_test.cc, tcp_store_budget_test.cc): a client
// with short timeouts, reading a key as text, raw-socket checks, error_of. Test-only.
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/socket.h"
#include "store/tcp_store_protocol.h"
#include "support/error_of.h"
#include "tdist/tcp_store.h"

namespace tdist::store_test {

using namespace std::chrono_literals;
using test_support::error_of;

inline constexpr auto kShort = 10s;  // bound for things that should happen promptly

inline TCPStoreOptions client_options(uint16_t port) {
  TCPStoreOptions o;
  o.port = port;
  o.connect_timeout = 10s;
  o.timeout = 10s;
  return o;
}

inline std::unique_ptr<TCPStore> connect(uint16_t port) {
  return std::make_unique<TCPStore>("127.0.0.1", client_options(port));
}

inline std::string get_text(Store& s, const std::string& key) {
  return to_string(s.get(key, Deadline::after(kShort)));
}

// True when the peer closes `fd` (EOF or reset) before the deadline; skips any bytes.
inline bool closed_by_peer(int fd, Deadline deadline) {
  char buf[4096];
  while (net::wait_fd(fd, POLLIN, deadline)) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0 && errno != EAGAIN && errno != EINTR) return true;
  }
  return false;
}

inline uint16_t unused_port() {
  net::Listener l = net::listen_tcp("127.0.0.1", 0);
  return l.port();  // closed on return: nothing listens there now
}

// Reads one reply frame from `fd`: its header, then its payload into `payload`.
inline store_wire::FrameHeader read_reply(int fd, std::vector<uint8_t>* payload) {
  uint8_t header[store_wire::kHeaderBytes];
  net::read_full(fd, header, sizeof(header), Deadline::after(kShort), "server");
  const store_wire::FrameHeader h = store_wire::decode_header(header);
  payload->resize(h.payload_size());
  net::read_full(fd, payload->data(), payload->size(), Deadline::after(kShort), "server");
  return h;
}

}  // namespace tdist::store_test
