// StoreServer: the TCPStoreServer implementation (internal to src/store).
//
// One thread runs an EpollLoop; every connection, the key-value map and the parked
// waits are touched only on that thread, so none of them needs a lock. Split in three
// files by responsibility: tcp_store_server.cc accepts connections and buffers their
// bytes (per-connection read buffer and write queue, EPOLLOUT only while output is
// pending); tcp_store_commands.cc decodes requests, applies them to the map and answers or
// parks them; tcp_store_tls.cc moves a connection's bytes (in plain text, or through its
// TLS session after the handshake it runs) and refuses connections with a notice. A
// connection that breaks the protocol is closed with a warning naming the peer; the
// others and the keys are unaffected.
//
// TLS: a session may hold decrypted bytes that epoll never reports, so a read loop does
// not stop while it has some, and a connection whose reading resumes after a pause is
// read at once (flush). A write that returned kAgain is retried from the same out_start.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "net/auth.h"
#include "net/epoll_loop.h"
#include "net/fd.h"
#include "net/socket.h"
#include "net/tls.h"
#include "store/tcp_store_protocol.h"
#include "tdist/store.h"
#include "tdist/tcp_store.h"

namespace tdist::store_internal {

struct Waiter;
using WaiterList = std::list<std::shared_ptr<Waiter>>;

// A GET, WAIT or MULTI_GET waiting for keys. Parked under its first missing key, at `slot`
// of that key's list, so that it leaves the list in O(1) (a connection that closes with
// N parked waits costs O(N), not O(N^2)).
struct Waiter {
  uint64_t conn_id;
  uint32_t request_id;
  store_wire::Command command;
  std::vector<std::string> keys;
  size_t next = 0;  // keys[0..next) were seen present
  size_t cost = 0;  // its memory, counted in StoreServer::buffered_ while it waits
  bool parked = false;
  WaiterList::iterator slot;  // in parked_[keys[next]] while parked
};

struct Connection {
  uint64_t id = 0;
  net::Fd fd;
  std::string peer;          // "1.2.3.4:5678", for log lines
  std::vector<uint8_t> in;   // bytes received, not yet parsed
  std::vector<uint8_t> out;  // replies not yet written, from out_start on
  size_t out_start = 0;
  uint32_t events = 0;      // interest currently registered with epoll
  bool dirty = false;       // in StoreServer::dirty_
  bool parsing = false;     // inside parse_frames (flush then does not parse again)
  size_t accounted = 0;     // its share of StoreServer::buffered_ (account())
  size_t frame_target = 0;  // the whole size of the partial frame at the end of `in`, else 0
  // When the incomplete request frame in `in` began to arrive (none: no partial frame).
  std::optional<std::chrono::steady_clock::time_point> partial_since;
  std::unordered_map<uint32_t, std::shared_ptr<Waiter>> waits;  // parked, by request id
  // Authentication (a server with a token): nothing is served until the client proved it
  // knows the token; `responder` holds the challenge sent in answer to its AUTH_HELLO.
  enum class Auth : uint8_t { kDone, kAwaitHello, kAwaitProof } auth = Auth::kDone;
  std::optional<net::auth::Responder> responder;
  std::chrono::steady_clock::time_point accepted_at{};
  // It sent a whole request after any authentication: without a token, how a client of
  // the job proves itself (StoreServer::evict_unproven).
  bool served = false;
  // TLS (a server with TLS): kFirstBytes until the client's first bytes show whether it
  // speaks TLS, kHandshake until the handshake ended; nothing is parsed before kUp, and
  // from then on every byte goes through `tls` (declared after fd: destroyed before it).
  enum class Tls : uint8_t { kOff, kFirstBytes, kHandshake, kUp } tls_state = Tls::kOff;
  std::unique_ptr<net::tls::Session> tls;
  uint32_t handshake_events = 0;      // what the handshake waits for (EPOLLIN or EPOLLOUT)
  bool tls_read_wants_write = false;  // Session::read said kWantWrite: read on EPOLLOUT
  bool tls_write_wants_read = false;  // Session::write said kWantRead: flush on EPOLLIN
  bool tls_ended = false;             // the session failed or was closed: no close_notify
  bool first_bytes_checked = false;   // (a server without TLS) not a TLS client
};

// What one receive or send on a connection did (StoreServer::receive, send).
struct ConnectionIo {
  enum class Kind : uint8_t { kOk, kAgain, kClosed, kFailed } kind = Kind::kOk;
  size_t bytes = 0;    // kOk: how many moved (> 0)
  std::string error;   // kFailed: why
  bool quiet = false;  // kFailed by the peer's reset: not worth a warning
};

class StoreServer final : public TCPStoreServer {
 public:
  // `tls`: null = no TLS.
  StoreServer(const std::string& host, uint16_t port, net::auth::Key key,
              std::shared_ptr<const net::tls::Context> tls);
  ~StoreServer() override;
  uint16_t port() const override { return port_; }
  void stop() override;

 private:
  // tcp_store_server.cc: connections and bytes (drop_one_connection, tell_refused and
  // refuse: tcp_store_tls.cc).
  void on_accept();
  // Out of descriptors: closes the oldest connection that has not proved itself (with a
  // token or TLS: not authenticated; without: never sent a request, and holds nothing
  // unsent or parked), so that a new client, perhaps one of the job's, can be accepted;
  // false when there is none.
  bool evict_unproven();
  // Out of descriptors: accepts one waiting client and closes it; false (and accepting
  // paused until a connection closes) when no descriptor could be freed for it.
  bool drop_one_connection();
  // Sends a connection that is about to be closed unserved the reason (a notice frame).
  static void tell_refused(int fd, const std::string& why);
  // Tells c why (a notice after its pending replies), logs it, and closes c.
  void refuse(Connection& c, const std::string& why);
  void on_events(uint64_t conn_id, uint32_t events);
  bool read_input(Connection& c);    // false when the connection was closed
  bool parse_frames(Connection& c);  // false when the connection was closed
  // Its unsent replies are over the pause threshold: neither read nor parse its requests.
  bool output_paused(const Connection& c) const;
  void flush(Connection& c);
  void flush_dirty();
  void update_interest(Connection& c);
  void close_connection(uint64_t conn_id, const std::string& reason, bool warn);
  // Whether c is through its TLS handshake and authentication (and may send requests).
  static bool ready(const Connection& c) {
    using Tls = Connection::Tls;
    return c.auth == Connection::Auth::kDone &&
           (c.tls_state == Tls::kOff || c.tls_state == Tls::kUp);
  }
  // Closes the connections whose partial frame is older than frame_timeout_, and those
  // that have not proved themselves within proof_timeout() (timer tick).
  void close_stalled_frames();
  // Whether a connection must authenticate (a token) or handshake (TLS) before it is served.
  bool must_prove() const { return key_.enabled() || tls_ != nullptr; }
  // How long a connection may take over its TLS handshake and authentication:
  // TDIST_STORE_AUTH_GRACE, or TDIST_STORE_FRAME_TIMEOUT where that is shorter (or the
  // grace 0); 0 = no limit. Never longer than the frame timeout, so also the shorter of
  // the two. `setting` names the one that applies.
  std::chrono::milliseconds proof_timeout(const char** setting = nullptr) const;
  void start_frame_timer();
  Connection* find(uint64_t conn_id);
  void mark_dirty(Connection& c);
  // Brings buffered_ up to date with c's input and unsent output.
  void account(Connection& c);
  // Whether `bytes` more may be buffered: always for small amounts, else within the budget.
  bool fits_budget(size_t bytes) const;

  // tcp_store_tls.cc: a connection's bytes, in plain text or through its TLS session.
  ConnectionIo receive(Connection& c, void* data, size_t size);
  // Retried after kAgain with the same bytes at its start (TLS's rule; flush does).
  ConnectionIo send(Connection& c, const void* data, size_t size);
  // Decrypted bytes wait in c's session: it must be read before waiting for EPOLLIN.
  static bool has_pending(const Connection& c) { return c.tls && c.tls->has_pending(); }
  // A TLS server: looks at c's first bytes, then runs its handshake. False when c was
  // closed (a client without TLS is refused with a notice; a failed handshake is logged).
  bool advance_tls(Connection& c);
  // A server without TLS: true (after closing c, with a log line) when c's first bytes
  // are a TLS handshake.
  bool closed_tls_client(Connection& c);
  // Sends what c has queued and the notice `why` through c's session, best effort (refuse()).
  void tell_refused_tls(Connection& c, const std::string& why);

  // tcp_store_commands.cc: requests against the map.
  // Whether a request listing keys fits the buffer budget once decoded (a std::string per
  // key of 4 bytes on the wire); else refuses it with an error reply, undecoded.
  bool decoding_fits(Connection& c, const store_wire::FrameHeader& h,
                     std::span<const uint8_t> payload);
  // A frame of a connection that has not authenticated yet; false when it was refused.
  bool handle_auth(Connection& c, const store_wire::FrameHeader& h,
                   std::span<const uint8_t> payload);
  // Handles one frame; throws PeerError for a malformed payload.
  void handle(Connection& c, const store_wire::FrameHeader& h, std::span<const uint8_t> payload);
  // Starts a reply frame in c's write queue; the caller adds the payload and finish()es.
  store_wire::FrameWriter reply(Connection& c, uint32_t request_id,
                                store_wire::Status status = store_wire::Status::kOk);
  void park_or_complete(Connection& c, uint32_t request_id, store_wire::Command command,
                        std::vector<std::string> keys);
  void key_created(const std::string& key);
  // Completes `w` if all its keys exist, else parks it under the first missing one.
  void advance(const std::shared_ptr<Waiter>& w);
  void complete(Connection& c, const Waiter& w);
  void unpark(Waiter& w);
  void drop_waits(Connection& c);
  // Forgets c's wait `it` (a request id of c.waits) and its share of the budget.
  void erase_wait(Connection& c,
                  std::unordered_map<uint32_t, std::shared_ptr<Waiter>>::iterator it);
  void put(const std::string& key, Bytes value);

  store_wire::Limits limits_;
  net::auth::Key key_;                            // enabled(): every connection authenticates first
  std::shared_ptr<const net::tls::Context> tls_;  // non-null: every connection is TLS
  size_t max_connections_;
  size_t max_waits_per_connection_;  // parked GET/WAIT/MULTI_GET requests per connection
  size_t buffer_budget_;             // TDIST_STORE_MAX_BUFFER_BYTES
  size_t buffered_ = 0;              // input and unsent replies of every connection
  net::Listener listener_;
  uint16_t port_;
  std::chrono::milliseconds frame_timeout_;  // TDIST_STORE_FRAME_TIMEOUT; 0 = none
  std::chrono::milliseconds auth_grace_;     // TDIST_STORE_AUTH_GRACE; 0 = none
  net::Fd timer_fd_;                         // ticks close_stalled_frames
  net::Fd spare_fd_;                         // closed to accept-and-drop when out of descriptors
  bool accept_paused_ = false;               // the listener is out of epoll
  size_t dropped_connections_ = 0;           // since the last log line
  size_t evicted_connections_ = 0;           // evict_unproven's, since the last log line
  std::chrono::steady_clock::time_point next_drop_log_{};  // rate limit of that line
  net::EpollLoop loop_;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns_;
  std::vector<uint64_t> dirty_;
  uint64_t next_conn_id_ = 1;
  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<std::string, WaiterList> parked_;
  std::thread thread_;
  bool stopped_ = false;  // owner thread only
};

}  // namespace tdist::store_internal
