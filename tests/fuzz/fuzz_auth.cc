// fuzz_auth: the authentication before a transport's hello (transport/auth_exchange.h over
// net/auth.h) from the responder's side: the input is what a connecting peer sends (its
// hello A, then a proof C), written to one end of a socketpair whose other end an
// AuthResponder with a token reads. Without the token nobody can make the proof, so the
// responder must refuse (or want more, until the input ends), never accept. The input's
// first 48 bytes also go to an initiator as a responder's challenge, which it must reject.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "net/auth.h"
#include "tdist/logging.h"
#include "transport/auth_exchange.h"

namespace {

using namespace tdist;

constexpr size_t kHelloBytes = 24;  // the TCP transport's, for the refusal of a bare hello

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_auth: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const net::auth::Key key("fuzz-token");
  if (size >= net::auth::kChallengeBytes) {
    net::auth::Initiator initiator(key, "fuzz");
    if (initiator.answer(data)) fail("an initiator accepted a forged challenge");
  }

  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    fail("socketpair failed");
  }
  if (size > 0 && ::send(fds[0], data, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) {
    fail("the input did not fit the socket");
  }
  ::shutdown(fds[0], SHUT_WR);
  transport::AuthResponder responder(key, "fuzz", kHelloBytes);
  const Deadline deadline = Deadline::after(std::chrono::seconds(5));
  transport::AuthResponder::State state;
  while ((state = responder.progress(fds[1], deadline)) == transport::AuthResponder::State::kMore) {
    if (deadline.expired()) fail("the responder wanted more after the input ended");
  }
  if (state == transport::AuthResponder::State::kAccepted) fail("a peer without the token got in");
  if (responder.why().empty()) fail("a refusal without a reason");
  ::close(fds[0]);
  ::close(fds[1]);
  return 0;
}
