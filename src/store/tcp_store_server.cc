// StoreServer, part 1: the event loop thread, accepting, reading frames, writing replies.
#include "store/tcp_store_server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "store/tcp_store_tls.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/settings.h"

namespace tdist {

std::unique_ptr<TCPStoreServer> TCPStoreServer::start(const std::string& host, uint16_t port,
                                                      const std::optional<std::string>& auth_token,
                                                      const std::optional<TlsFiles>& tls) {
  net::auth::Key key = auth_token ? net::auth::Key(*auth_token) : net::auth::Key::from_settings();
  return std::make_unique<store_internal::StoreServer>(host, port, std::move(key),
                                                       store_internal::tls_context(tls));
}

namespace store_internal {
namespace {

using store_wire::kHeaderBytes;
using store_wire::kLengthBytes;

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxReadPerEvent = 4 * 1024 * 1024;     // then let other connections run
constexpr size_t kPauseReadingBytes = 64 * 1024 * 1024;  // unsent replies that pause input
// Requests and replies up to this size are never refused for the buffer budget: small
// traffic (rendezvous keys, counters) goes on while large transfers wait their turn.
constexpr size_t kAlwaysFits = 64 * 1024;
constexpr size_t kSpareDescriptors = 64;  // listener, epoll, eventfd, the process's own

// Empties `buffer`, and gives its memory back when it grew large: an idle connection that
// once carried a large frame keeps none of it (the budget counts bytes in use).
void release_if_large(std::vector<uint8_t>& buffer) {
  if (buffer.capacity() > kAlwaysFits) {
    std::vector<uint8_t>().swap(buffer);
  } else {
    buffer.clear();
  }
}

// Raises the soft RLIMIT_NOFILE towards the hard limit when `needed` exceeds it.
void raise_descriptor_limit(size_t needed) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= needed) return;
  rlim_t old = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(needed) : rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) {
    TDIST_LOG(kDebug) << "TCPStore server: raised the open-file limit from " << old << " to "
                      << rl.rlim_cur << " (" << needed << " wanted)";
  }
}

}  // namespace

StoreServer::StoreServer(const std::string& host, uint16_t port, net::auth::Key key,
                         std::shared_ptr<const net::tls::Context> tls)
    : limits_(store_wire::Limits::from_settings()),
      key_(std::move(key)),
      tls_(std::move(tls)),
      max_connections_(static_cast<size_t>(setting_int("TDIST_STORE_MAX_CONNECTIONS"))),
      max_waits_per_connection_(
          static_cast<size_t>(setting_int("TDIST_STORE_MAX_WAITS_PER_CONNECTION"))),
      buffer_budget_(static_cast<size_t>(setting_int("TDIST_STORE_MAX_BUFFER_BYTES"))),
      frame_timeout_(setting_seconds("TDIST_STORE_FRAME_TIMEOUT")),
      auth_grace_(setting_seconds("TDIST_STORE_AUTH_GRACE")) {
  raise_descriptor_limit(max_connections_ + kSpareDescriptors);
  listener_ = net::listen_tcp(host, port);
  port_ = listener_.port();
  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  loop_.add(listener_.fd.get(), EPOLLIN, [this](uint32_t) { on_accept(); });
  if (proof_timeout().count() > 0) start_frame_timer();  // the shorter of the two limits
  loop_.set_after_batch([this] { flush_dirty(); });
  thread_ = std::thread([this] {
    try {
      loop_.run();
    } catch (const std::exception& e) {
      TDIST_LOG(kError) << "TCPStore server on port " << port_ << " stopped: " << e.what();
    }
  });
  TDIST_LOG(kDebug) << "TCPStore server listening on " << listener_.address.to_string()
                    << (key_.enabled() ? " (clients authenticate)" : "") << (tls_ ? " (TLS)" : "");
  if (!key_.enabled() && !tls_ && !listener_.address.is_loopback()) {
    TDIST_LOG(kWarn) << "TCPStore server on " << listener_.address.to_string()
                     << " has no authentication token: whoever reaches it can read and change "
                        "the job's keys (set TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE)";
  }
}

StoreServer::~StoreServer() { stop(); }

std::chrono::milliseconds StoreServer::proof_timeout(const char** setting) const {
  const bool grace = must_prove() && auth_grace_.count() > 0 &&
                     (frame_timeout_.count() == 0 || auth_grace_ < frame_timeout_);
  if (setting != nullptr) {
    *setting = grace ? "TDIST_STORE_AUTH_GRACE" : "TDIST_STORE_FRAME_TIMEOUT";
  }
  return grace ? auth_grace_ : frame_timeout_;
}

void StoreServer::start_frame_timer() {
  // Ticks a quarter of the shorter timeout (proof_timeout(): the grace or the frame
  // timeout) apart, between 10 ms and 1 s: a half-sent frame or an unproven connection is
  // closed within 1.25 timeouts.
  using std::chrono::milliseconds;
  const milliseconds tick =
      std::clamp<milliseconds>(proof_timeout() / 4, milliseconds(10), std::chrono::seconds(1));
  timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_fd_) {
    TDIST_THROW(Error, "TCPStore server: timerfd_create failed: ", net::errno_text(errno));
  }
  itimerspec spec{};
  spec.it_interval.tv_sec = tick.count() / 1000;
  spec.it_interval.tv_nsec = (tick.count() % 1000) * 1'000'000;
  spec.it_value = spec.it_interval;
  ::timerfd_settime(timer_fd_.get(), 0, &spec, nullptr);
  loop_.add(timer_fd_.get(), EPOLLIN, [this](uint32_t) {
    uint64_t expirations = 0;
    (void)!::read(timer_fd_.get(), &expirations, sizeof(expirations));
    close_stalled_frames();
  });
}

void StoreServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  loop_.stop();
  if (thread_.joinable()) thread_.join();
  conns_.clear();  // closes every client socket; the loop no longer runs
  listener_.fd.reset();
  parked_.clear();
}

Connection* StoreServer::find(uint64_t conn_id) {
  auto it = conns_.find(conn_id);
  return it == conns_.end() ? nullptr : it->second.get();
}

void StoreServer::on_accept() {
  while (true) {
    int error = 0;
    net::Fd fd = net::accept_tcp(listener_.fd.get(), &error);
    if (error == EMFILE || error == ENFILE) {
      if (evict_unproven()) continue;      // a descriptor is free for the waiting client
      if (!drop_one_connection()) return;  // accepting paused until a connection closes
      continue;
    }
    if (error != 0) {
      TDIST_LOG(kWarn) << "TCPStore server: accept failed: " << net::errno_text(error);
      return;
    }
    if (!fd) return;  // EAGAIN: the queue is empty
    std::string peer = net::SocketAddress::peer_of(fd.get()).to_string();
    if (conns_.size() >= max_connections_) {
      const std::string why = detail::str_cat(conns_.size(),
                                              " clients are connected, the most "
                                              "TDIST_STORE_MAX_CONNECTIONS=",
                                              max_connections_, " allows");
      TDIST_LOG(kWarn) << "TCPStore server: refusing connection from " << peer << ": " << why;
      if (!tls_) tell_refused(fd.get(), why);  // a TLS client could not read it
      continue;                                // fd closes here
    }
    auto c = std::make_unique<Connection>();
    c->id = next_conn_id_++;
    c->fd = std::move(fd);
    c->peer = std::move(peer);
    c->events = EPOLLIN;
    if (key_.enabled()) c->auth = Connection::Auth::kAwaitHello;
    if (tls_) {
      c->tls_state = Connection::Tls::kFirstBytes;
      c->handshake_events = EPOLLIN;
    }
    c->accepted_at = std::chrono::steady_clock::now();
    uint64_t id = c->id;
    loop_.add(c->fd.get(), c->events, [this, id](uint32_t events) { on_events(id, events); });
    TDIST_LOG(kTrace) << "TCPStore server: connection from " << c->peer;
    conns_.emplace(id, std::move(c));
  }
}

void StoreServer::on_events(uint64_t conn_id, uint32_t events) {
  Connection* c = find(conn_id);
  if (c == nullptr) return;
  try {
    if (c->tls_state == Connection::Tls::kFirstBytes ||
        c->tls_state == Connection::Tls::kHandshake) {
      if (!advance_tls(*c) || c->tls_state != Connection::Tls::kUp) return;
      events |= EPOLLIN;  // requests may have come with the handshake's end
    }
    // A session may want the other direction than its call (TLS key updates).
    const bool readable = (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0 ||
                          (c->tls_read_wants_write && (events & EPOLLOUT) != 0);
    if (readable && !read_input(*c)) return;
    if ((events & EPOLLOUT) != 0 || (c->tls_write_wants_read && (events & EPOLLIN) != 0)) {
      flush(*c);
    }
  } catch (const std::exception& e) {
    close_connection(conn_id, std::string("internal error: ") + e.what(), /*warn=*/true);
  }
}

bool StoreServer::read_input(Connection& c) {
  uint8_t chunk[kReadChunk];
  size_t total = 0;
  // Bytes a TLS session decrypted already are read now: epoll would not report them.
  while (total < kMaxReadPerEvent || has_pending(c)) {
    const ConnectionIo io = receive(c, chunk, sizeof(chunk));
    if (io.kind == ConnectionIo::Kind::kOk) {
      total += io.bytes;
      c.in.insert(c.in.end(), chunk, chunk + io.bytes);
      account(c);
      if (!parse_frames(c)) return false;
      if (output_paused(c)) {  // the client is not reading its replies: stop reading it
        update_interest(c);    // (its flush reads it again once they drain)
        break;
      }
      continue;
    }
    if (io.kind == ConnectionIo::Kind::kClosed) {
      if (c.auth == Connection::Auth::kAwaitProof) {
        close_connection(c.id,
                         "closed by the client during authentication (it does not know the "
                         "token, or it is not a tdist client)",
                         /*warn=*/true);
      } else if (c.in.empty()) {
        close_connection(c.id, "closed by the client", /*warn=*/false);
      } else {
        close_connection(c.id,
                         "closed by the client in the middle of a frame (" +
                             std::to_string(c.in.size()) + " bytes of it arrived)",
                         /*warn=*/true);
      }
      return false;
    }
    if (io.kind == ConnectionIo::Kind::kAgain) {
      if (c.tls_read_wants_write) update_interest(c);
      break;
    }
    close_connection(c.id, "read failed: " + io.error, /*warn=*/!io.quiet);
    return false;
  }
  return true;
}

bool StoreServer::output_paused(const Connection& c) const {
  // Small replies always fit the budget (fits_budget), so many connections that never read
  // theirs would together exceed it: once it is exceeded, any connection with more than a
  // small reply's worth unsent is not read from either.
  const size_t pending = c.out.size() - c.out_start;
  return pending > kPauseReadingBytes || (pending > kAlwaysFits && buffered_ > buffer_budget_);
}

bool StoreServer::parse_frames(Connection& c) {
  if (!tls_ && !c.first_bytes_checked && closed_tls_client(c)) return false;
  c.parsing = true;  // reset on the way out; every `return false` closed (destroyed) c
  c.frame_target = 0;
  size_t pos = 0;
  // While its unsent replies exceed the pause threshold, a connection's further requests
  // wait in its input (and it is not read): pipelined requests cannot grow the replies
  // without bound. flush() resumes parsing once the client has read them.
  while (c.in.size() - pos >= kLengthBytes && !output_paused(c)) {
    uint32_t length = store_wire::peek_length(c.in.data() + pos);
    if (length < kHeaderBytes - kLengthBytes) {
      close_connection(
          c.id, "malformed frame: length " + std::to_string(length) + " is shorter than a header",
          /*warn=*/true);
      return false;
    }
    if (c.auth != Connection::Auth::kDone && length > store_wire::kAuthFrameBytes) {
      refuse(c, detail::str_cat("authentication required, and a frame of ", length,
                                " bytes is no authentication (", net::auth::kTokenHint, ")"));
      return false;
    }
    if (length > limits_.max_frame_bytes()) {
      close_connection(c.id,
                       "frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                           std::to_string(limits_.max_frame_bytes()) +
                           " (TDIST_STORE_MAX_VALUE_BYTES + 1 MiB)",
                       /*warn=*/true);
      return false;
    }
    // Incomplete: wait for more. (Its room is reserved, but pages are touched only as bytes
    // arrive: a client that announces 256 MiB and sends 10 bytes costs no 256 MiB.) The whole of it
    // counts against the buffer budget, though, so that many half-sent large frames cannot
    // together exceed it: a large one is taken only while the budget has room for the rest,
    // checked once, when it begins to arrive.
    if (c.in.size() - pos < kLengthBytes + length) {
      const size_t missing = kLengthBytes + length - (c.in.size() - pos);
      if ((pos > 0 || !c.partial_since) && !fits_budget(missing)) {
        close_connection(
            c.id,
            detail::str_cat("a request of ", length, " bytes does not fit the server's buffers (",
                            buffered_, " of ", buffer_budget_,
                            " bytes in use; TDIST_STORE_MAX_BUFFER_BYTES)"),
            /*warn=*/true);
        return false;
      }
      c.frame_target = kLengthBytes + length;  // its whole size is counted from now on
      // Room for exactly the rest, so that a large frame is not copied and held twice by
      // the buffer's doubling.
      if (c.frame_target > kAlwaysFits) c.in.reserve(pos + c.frame_target);
      break;
    }
    store_wire::FrameHeader h = store_wire::decode_header(c.in.data() + pos);
    if (h.version != store_wire::kVersion) {
      std::string why = "protocol version " + std::to_string(h.version) +
                        " is not supported (this server speaks version " +
                        std::to_string(store_wire::kVersion) + ")";
      reply(c, h.request_id, store_wire::Status::kError).bytes(why).finish();
      flush(c);
      close_connection(c.id, why, /*warn=*/true);
      return false;
    }
    std::span<const uint8_t> payload(c.in.data() + pos + kHeaderBytes, h.payload_size());
    if (c.auth != Connection::Auth::kDone) {
      if (!handle_auth(c, h, payload)) return false;
      pos += kLengthBytes + length;
      continue;
    }
    c.served = true;
    try {
      handle(c, h, payload);
    } catch (const PeerError& e) {
      close_connection(
          c.id,
          std::string("malformed ") + store_wire::command_name(h.code) + " request: " + e.what(),
          /*warn=*/true);
      return false;
    }
    pos += kLengthBytes + length;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(pos));
  if (c.in.empty()) release_if_large(c.in);
  account(c);
  if (c.in.empty()) {
    c.partial_since.reset();
  } else if (pos > 0 || !c.partial_since) {  // a new frame began to arrive
    c.partial_since = std::chrono::steady_clock::now();
  }
  c.parsing = false;
  return true;
}

void StoreServer::close_stalled_frames() {
  const auto now = std::chrono::steady_clock::now();
  const char* proof_setting = nullptr;
  const std::chrono::milliseconds proof = proof_timeout(&proof_setting);
  const std::string within = detail::str_cat(proof.count() / 1000.0, " s (", proof_setting);
  std::vector<uint64_t> stalled;
  for (const auto& [id, c] : conns_) {
    if (!ready(*c)) {
      // Authentication (and a TLS handshake) end within the proof timeout.
      if (proof.count() > 0 && now - c->accepted_at > proof) stalled.push_back(id);
      continue;
    }
    // A half-sent request (those held back by the read pause are whole frames: not the
    // client's delay).
    if (frame_timeout_.count() > 0 && c->partial_since && !output_paused(*c) &&
        now - *c->partial_since > frame_timeout_) {
      stalled.push_back(id);
    }
  }
  for (uint64_t id : stalled) {
    Connection* c = find(id);
    if (c == nullptr) continue;
    if (c->tls_state == Connection::Tls::kHandshake) {  // no notice: it cannot be read
      close_connection(id,
                       detail::str_cat("did not complete the TLS handshake within ", within, ")"),
                       /*warn=*/true);
      continue;
    }
    if (c->tls_state == Connection::Tls::kFirstBytes) {
      refuse(*c,
             detail::str_cat("did not begin TLS within ", within, "; this store requires TLS)"));
      continue;
    }
    if (c->auth != Connection::Auth::kDone) {
      refuse(*c, detail::str_cat("did not authenticate within ", within, ")"));
      continue;
    }
    close_connection(
        id,
        detail::str_cat("a request stayed half-sent for over ", frame_timeout_.count() / 1000.0,
                        " s (", c->in.size(), " bytes of it arrived; TDIST_STORE_FRAME_TIMEOUT)"),
        /*warn=*/true);
  }
}

void StoreServer::account(Connection& c) {
  const size_t now = std::max(c.in.size(), c.frame_target) + (c.out.size() - c.out_start);
  buffered_ = buffered_ - c.accounted + now;
  c.accounted = now;
}

bool StoreServer::fits_budget(size_t bytes) const {
  return bytes <= kAlwaysFits || buffered_ + bytes <= buffer_budget_;
}

void StoreServer::mark_dirty(Connection& c) {
  if (c.dirty) return;
  c.dirty = true;
  dirty_.push_back(c.id);
}

void StoreServer::flush_dirty() {
  std::vector<uint64_t> ids;
  ids.swap(dirty_);
  for (uint64_t id : ids) {
    Connection* c = find(id);
    if (c == nullptr) continue;
    c->dirty = false;
    flush(*c);
  }
}

void StoreServer::flush(Connection& c) {
  while (c.out_start < c.out.size()) {
    // After kAgain, the retry starts at the same out_start (TLS's rule for a write).
    const ConnectionIo io = send(c, c.out.data() + c.out_start, c.out.size() - c.out_start);
    if (io.kind == ConnectionIo::Kind::kOk) {
      c.out_start += io.bytes;
      continue;
    }
    if (io.kind == ConnectionIo::Kind::kAgain) break;
    close_connection(c.id, "write failed: " + io.error, /*warn=*/!io.quiet);
    return;
  }
  if (c.out_start == c.out.size()) {
    release_if_large(c.out);
    c.out_start = 0;
  } else if (c.out_start > c.out.size() / 2) {
    c.out.erase(c.out.begin(), c.out.begin() + static_cast<std::ptrdiff_t>(c.out_start));
    c.out_start = 0;
  }
  account(c);
  // Requests held back while the replies were over the threshold (parse_frames; not from
  // inside it, which flushes a last reply before closing).
  if (!c.parsing && !c.in.empty() && !output_paused(c) && !parse_frames(c)) return;  // closed
  update_interest(c);
  // Reading resumed: what its session decrypted before the pause is not reported by epoll.
  if (!c.parsing && (c.events & EPOLLIN) != 0 && has_pending(c)) read_input(c);
}

void StoreServer::update_interest(Connection& c) {
  size_t pending = c.out.size() - c.out_start;
  uint32_t want =
      (output_paused(c) ? 0u : uint32_t{EPOLLIN}) | (pending > 0 ? uint32_t{EPOLLOUT} : 0u);
  if (c.tls_read_wants_write) want |= EPOLLOUT;
  if (c.tls_write_wants_read) want |= EPOLLIN;
  if (c.tls_state == Connection::Tls::kFirstBytes || c.tls_state == Connection::Tls::kHandshake) {
    want = c.handshake_events;
  }
  if (want == c.events) return;
  loop_.modify(c.fd.get(), want);
  c.events = want;
}

void StoreServer::close_connection(uint64_t conn_id, const std::string& reason, bool warn) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end()) return;
  Connection& c = *it->second;
  if (warn) {
    TDIST_LOG(kWarn) << "TCPStore server: closing connection from " << c.peer << ": " << reason;
  } else {
    TDIST_LOG(kTrace) << "TCPStore server: connection from " << c.peer << " ended: " << reason;
  }
  if (c.tls_state == Connection::Tls::kUp && !c.tls_ended) c.tls->shutdown();  // close_notify
  drop_waits(c);
  loop_.remove(c.fd.get());
  buffered_ -= c.accounted;
  conns_.erase(it);
  if (accept_paused_) {  // a descriptor is free again
    if (!spare_fd_) spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    loop_.modify(listener_.fd.get(), EPOLLIN);
    accept_paused_ = false;
  }
}

}  // namespace store_internal
}  // namespace tdist
