// fuzz_store_frames: bytes as a client sends them to the TCPStore server (its frame
// parser, request decoding and commands: store/tcp_store_server.h), over a real loopback
// connection to an in-process server. The first input byte chooses the server: even, one
// without authentication; odd, one with a token (the input then meets the unauthenticated
// side of the handshake). The rest is written on a fresh connection, whose write side is
// then shut down; the server must close the connection within seconds, and answer a real
// client (TCPStore: set, add, get) every kCheckEvery inputs. Limits are small
// (TDIST_STORE_MAX_KEY_BYTES=64, TDIST_STORE_MAX_VALUE_BYTES=4096) so that inputs reach
// them, and the open server is replaced every kRestartEvery inputs, bounding the keys kept
// (nothing unauthenticated stores a key in the other; and a server thread that computed
// an HMAC may leave libcrypto's per-thread error state behind when it ends, which LSan
// reports).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "net/auth.h"
#include "tdist/logging.h"
#include "tdist/tcp_store.h"

namespace {

constexpr const char* kToken = "fuzz-token";
constexpr int kCheckEvery = 200;
constexpr int kRestartEvery = 5000;
constexpr int kCloseTimeoutMs = 5000;

struct Servers {
  std::unique_ptr<tdist::TCPStoreServer> open, authenticated;
  void restart_open() {
    open.reset();
    open = tdist::TCPStoreServer::start("127.0.0.1", 0, std::string());
  }
};

Servers& servers() {
  static Servers s;
  return s;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_store_frames: %s\n", what);
  std::abort();
}

[[noreturn]] void fail_errno(const char* what) {
  std::fprintf(stderr, "fuzz_store_frames: %s: %s\n", what, std::strerror(errno));
  std::abort();
}

// A real client's set, add and get go through.
void check_serving(uint16_t port, bool with_token) {
  tdist::TCPStoreOptions options;
  options.port = port;
  options.timeout = std::chrono::seconds(10);
  options.connect_timeout = std::chrono::seconds(10);
  options.auth_token = with_token ? kToken : "";
  tdist::TCPStore client("127.0.0.1", options);
  client.set("fuzz/check", tdist::to_bytes("ok"));
  if (client.add("fuzz/counter", 1) < 1) fail("ADD went backwards");
  if (client.get("fuzz/check") != tdist::to_bytes("ok")) fail("GET returned something else");
}

// Writes `data` on a fresh connection, shuts the write side and reads until the server
// closes the connection. The client shuts first, so each connection leaves a TIME_WAIT
// socket here for a minute: at thousands of inputs a second one source address would run
// out of ephemeral ports (28k), all the more beside other tests that connect. So the
// connections come from 127.0.0.2-251 in turn, the port chosen at connect() per address
// (IP_BIND_ADDRESS_NO_PORT).
void send_and_drain(uint16_t port, const uint8_t* data, size_t size) {
  static unsigned next_source = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket failed");
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)) != 0) {
    fail_errno("setsockopt(IP_BIND_ADDRESS_NO_PORT) failed");
  }
  sockaddr_in source{};
  source.sin_family = AF_INET;
  source.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (next_source++ % 250));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&source), sizeof(source)) != 0) {
    fail_errno("bind to a loopback source address failed");
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    // libFuzzer's timer (SIGALRM) interrupts a connect that waits, as one does when a busy
    // server's backlog is full; the connection goes on, so wait for its outcome.
    if (errno != EINTR) fail_errno("connect to the server failed");
    pollfd p{fd, POLLOUT, 0};
    int ready;
    do {
      ready = ::poll(&p, 1, kCloseTimeoutMs);
    } while (ready < 0 && errno == EINTR);
    int error = 0;
    socklen_t length = sizeof(error);
    if (ready <= 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      fail("connect to the server failed after an interruption");
    }
  }
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed early (it refused a frame): fine
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseTimeoutMs);
  char buf[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = left.count() <= 0 ? 0 : ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) fail("the server did not close a connection whose client had finished");
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // closed (or reset)
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::setenv("TDIST_STORE_MAX_KEY_BYTES", "64", 1);
  ::setenv("TDIST_STORE_MAX_VALUE_BYTES", "4096", 1);
  tdist::set_log_level(tdist::LogLevel::kOff);  // every bad frame would log a warning
  // libcrypto initialised by the server thread instead leaves its error state behind
  // when that thread ends at exit, which LSan reports.
  (void)tdist::net::auth::mac(tdist::net::auth::Key(kToken), "warm-up", "", {}, {});
  servers().restart_open();
  servers().authenticated = tdist::TCPStoreServer::start("127.0.0.1", 0, std::string(kToken));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int inputs = 0;
  if (size == 0) return 0;
  Servers& s = servers();
  const bool with_token = (data[0] & 1) != 0;
  tdist::TCPStoreServer& server = with_token ? *s.authenticated : *s.open;
  send_and_drain(server.port(), data + 1, size - 1);
  ++inputs;
  if (inputs % kCheckEvery == 0) check_serving(server.port(), with_token);
  if (inputs % kRestartEvery == 0) s.restart_open();
  return 0;
}
