// The TCP transport's accepting side: connections from higher ranks, each through its
// (TLS handshake,) token authentication and hello, on a thread of its own.
//
// Every pending connection advances in one poll loop: (with TLS) a look at its first bytes
// and the handshake, (with a token) the authentication, then the hello (hello_codec.h).
// A connection whose hello is wrong, or that its sink refuses, is closed with a log line;
// one that is not through within `handshake_timeout` of its accept (0: by `deadline`) is
// dropped. A good one
// is answered with this rank's hello and handed to the sink.
// The loop runs until the sink is done (a full mesh: every peer arrived), `deadline`
// passes, or the Acceptor is destroyed (which joins the thread).
// Thread-safety: the sink is called on the Acceptor's thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>

#include "net/auth.h"
#include "net/fd.h"
#include "net/socket.h"
#include "net/tls.h"
#include "tdist/deadline.h"

namespace tdist::transport::tcp {

// Where accepted connections go.
class AcceptSink {
 public:
  // What refuse() returns for a lazy dial that crossed this rank's own (lazy_mesh.h): the
  // dialler gets a hello reply on kCrossedLane instead of a closed connection.
  static constexpr const char* kCrossed = "crossed";
  // ... for a lazy dial that came as this rank destroys its Comm: the reply is on kLeftLane.
  static constexpr const char* kLeft = "left";

  virtual ~AcceptSink() = default;
  // "" to take a connection from `peer` on `lane`, else why not (or kCrossed, kLeft).
  virtual std::string refuse(int peer, size_t lane) = 0;
  // A connection through its hello. `session` is null without TLS.
  virtual void take(int peer, size_t lane, net::Fd fd, std::unique_ptr<net::tls::Session> session,
                    const std::string& address) = 0;
  // No more connections are wanted: the loop ends.
  virtual bool done() = 0;
};

class Acceptor {
 public:
  // Senders from `lowest_sender` up to size - 1 (not this rank) are heard: a full mesh
  // takes the ranks above this one, lazy connections any other.
  Acceptor(net::Listener listener, int rank, int size, int lowest_sender, uint64_t group_id,
           size_t nsocks, const net::auth::Key& key, std::shared_ptr<const net::tls::Context> tls,
           Deadline deadline, std::chrono::milliseconds handshake_timeout, AcceptSink* sink);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // Waits until the loop ended (the sink is done or the deadline passed).
  void finish();
  // Ends the loop within a poll slice and closes the listener (later connections are
  // refused by the kernel); returns once the thread is gone.
  void stop();

 private:
  struct Pending;
  void run();
  void accept_all(std::vector<Pending>* pending);
  void reject(const Pending& p, const std::string& why) const;
  bool progress(Pending* p);

  net::Listener listener_;
  const net::auth::Key key_;
  const std::shared_ptr<const net::tls::Context> tls_;
  const int rank_;
  const int size_;
  const int lowest_sender_;
  const uint64_t group_id_;
  const size_t nsocks_;
  const Deadline deadline_;
  const std::chrono::milliseconds handshake_timeout_;
  AcceptSink* const sink_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tdist::transport::tcp
