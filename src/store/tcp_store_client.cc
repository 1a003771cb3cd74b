// TCPStore, the client: one connection, calls serialised by a mutex, replies matched to
// requests by id. A blocking call (get, wait, multi_get) that reaches its deadline sends
// CANCEL for its request and reads up to the CANCEL's reply, so no stale reply is left
// on the connection; any reply whose id is not the one awaited is discarded. With TLS, the
// handshake follows the TCP connect (within the connect deadline) and every byte then
// goes through the session; the receive loop reads the session before it polls the socket
// (decrypted bytes may wait inside it).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <optional>

#include "net/auth.h"
#include "net/socket.h"
#include "store/store_internal.h"
#include "store/tcp_store_protocol.h"
#include "store/tcp_store_tls.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"
#include "tdist/thread_annotations.h"

namespace tdist {

using store_wire::Command;
using store_wire::FrameWriter;
using store_wire::PayloadReader;
using store_wire::Status;

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// How long a timed-out call waits for the reply to its CANCEL before giving up on it.
constexpr auto kCancelGrace = std::chrono::seconds(10);
const char* const kWorkersKey = "/tdist/workers";
const char* const kWorkersDoneKey = "/tdist/workers/done";

struct Reply {
  Status status = Status::kOk;
  uint32_t request_id = 0;
  std::vector<uint8_t> payload;
};

}  // namespace

struct TCPStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string peer;  // "host:port" for messages
  std::unique_ptr<TCPStoreServer> server;
  store_wire::Limits limits{};  // checked before sending
  store_wire::Limits reply_limits{UINT32_MAX, UINT32_MAX};

  Mutex mu;
  net::Fd fd TDIST_GUARDED_BY(mu);  // empty once the connection broke
  // With TLS: the session over fd (null with fd, and without TLS).
  std::unique_ptr<net::tls::Session> tls TDIST_GUARDED_BY(mu);
  std::string broken TDIST_GUARDED_BY(mu);       // why fd is empty
  std::vector<uint8_t> in TDIST_GUARDED_BY(mu);  // received bytes not yet consumed
  uint32_t next_id TDIST_GUARDED_BY(mu) = 1;

  // Gives up the connection for good: later calls raise PeerError with `why`; this one
  // raises E (AuthError when authentication failed).
  template <typename E = PeerError>
  [[noreturn]] void fail(const std::string& why) TDIST_REQUIRES(mu) {
    tls.reset();
    fd.reset();
    broken = why;
    TDIST_THROW(E, "TCPStore: ", why);
  }

  void check_key(const std::string& key) const {
    TDIST_CHECK(key.size() <= limits.max_key_bytes, InvalidArgument, "TCPStore: key of ",
                key.size(), " bytes exceeds TDIST_STORE_MAX_KEY_BYTES=", limits.max_key_bytes);
  }
  void check_value(const Bytes& value) const {
    TDIST_CHECK(value.size() <= limits.max_value_bytes, InvalidArgument, "TCPStore: value of ",
                value.size(),
                " bytes exceeds TDIST_STORE_MAX_VALUE_BYTES=", limits.max_value_bytes);
  }

  // Sends one finished frame.
  void send(const std::vector<uint8_t>& frame, Deadline deadline) TDIST_REQUIRES(mu) {
    if (!fd) TDIST_THROW(PeerError, "TCPStore: ", broken);
    TDIST_CHECK(frame.size() - store_wire::kLengthBytes <= limits.max_frame_bytes(),
                InvalidArgument, "TCPStore: request of ", frame.size(),
                " bytes exceeds the frame limit ", limits.max_frame_bytes());
    try {
      if (tls) {
        net::tls::write_full(*tls, frame.data(), frame.size(), deadline, peer);
      } else {
        net::write_full(fd.get(), frame.data(), frame.size(), deadline, peer);
      }
    } catch (const PeerError& e) {
      fail(std::string("connection to the store at ") + peer + " broke: " + e.what());
    }
  }

  // The next reply frame, or nullopt when the deadline passed first.
  std::optional<Reply> read_frame(Deadline deadline) TDIST_REQUIRES(mu) {
    while (true) {
      if (in.size() >= store_wire::kHeaderBytes) {
        store_wire::FrameHeader h = store_wire::decode_header(in.data());
        size_t total = store_wire::kLengthBytes + size_t{h.length};
        if (h.length < store_wire::kHeaderBytes - store_wire::kLengthBytes ||
            h.version != store_wire::kVersion) {
          fail("the store at " + peer + " sent a malformed reply");
        }
        if (h.length > limits.max_frame_bytes()) {  // announced: nothing reserved for it
          fail(detail::str_cat("the store at ", peer, " announced a reply of ", h.length,
                               " bytes, over this client's frame limit of ",
                               limits.max_frame_bytes(), " (TDIST_STORE_MAX_VALUE_BYTES + 1 MiB)"));
        }
        if (in.size() >= total) {
          Reply r{static_cast<Status>(h.code), h.request_id,
                  std::vector<uint8_t>(in.begin() + store_wire::kHeaderBytes,
                                       in.begin() + static_cast<std::ptrdiff_t>(total))};
          in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(total));
          return r;
        }
        in.reserve(total);
      }
      if (!fd) TDIST_THROW(PeerError, "TCPStore: ", broken);
      uint8_t chunk[kReadChunk];
      if (tls) {
        if (!receive_tls(chunk, sizeof(chunk), deadline)) return std::nullopt;
        continue;
      }
      ssize_t n = ::recv(fd.get(), chunk, sizeof(chunk), 0);
      if (n > 0) {
        in.insert(in.end(), chunk, chunk + n);
        continue;
      }
      if (n == 0) fail("connection to the store at " + peer + " was closed by the server");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        fail("connection to the store at " + peer + " broke: " + net::errno_text(errno));
      }
      if (!net::wait_fd(fd.get(), POLLIN, deadline)) return std::nullopt;
    }
  }

  // Appends what the session has to `in`, waiting for the socket when it has nothing; false
  // at the deadline. A refusal of this process's certificate (TLS 1.3 tells a client on its
  // first read) raises AuthError.
  bool receive_tls(uint8_t* chunk, size_t size, Deadline deadline) TDIST_REQUIRES(mu) {
    const net::tls::Session::Io io = tls->read(chunk, size);
    using TlsStatus = net::tls::Session::Status;
    switch (io.status) {
      case TlsStatus::kOk:
        in.insert(in.end(), chunk, chunk + io.bytes);
        return true;
      case TlsStatus::kWantRead:
      case TlsStatus::kWantWrite:
        return net::wait_fd(fd.get(), io.status == TlsStatus::kWantRead ? POLLIN : POLLOUT,
                            deadline);
      case TlsStatus::kClosed:
        fail("connection to the store at " + peer + " was closed by the server");
      case TlsStatus::kFailed:
        break;
    }
    if (tls->rejected()) {
      fail<AuthError>(detail::str_cat("the store at ", peer,
                                      " refused this process's TLS certificate: ", tls->error(),
                                      " (", net::tls::kTlsHint, ")"));
    }
    fail("connection to the store at " + peer + " broke: " + tls->error());
  }

  // Runs the TLS handshake on the new connection (the server's certificate is checked).
  void start_tls(std::shared_ptr<const net::tls::Context> context, Deadline deadline)
      TDIST_EXCLUDES(mu) {
    MutexLock lock(mu);
    tls =
        std::make_unique<net::tls::Session>(std::move(context), fd.get(), net::tls::Role::kClient);
    try {
      net::tls::handshake(*tls, deadline, "the store at " + peer);
    } catch (const AuthError& e) {
      fail<AuthError>(e.what());
    } catch (const PeerError& e) {
      // A server without TLS closes a connection whose first bytes are TLS.
      fail<AuthError>(detail::str_cat(e.what(), "; a store without TLS closes TLS clients (",
                                      net::tls::kTlsHint, ")"));
    } catch (const TimeoutError& e) {
      fail<TimeoutError>(e.what());
    }
  }

  // The reply to request `id`, discarding older replies; nullopt at the deadline.
  std::optional<Reply> await(uint32_t id, Deadline deadline) TDIST_REQUIRES(mu) {
    while (true) {
      std::optional<Reply> r = read_frame(deadline);
      if (r && r->request_id == store_wire::kNoticeRequestId && r->status == Status::kError) {
        PayloadReader reader(r->payload, store_wire::Limits{UINT32_MAX, UINT32_MAX});
        fail("the store at " + peer + " refused this connection: " + reader.message());
      }
      if (!r || r->request_id == id) return r;
      TDIST_LOG(kDebug) << "TCPStore: discarding a stale reply to request " << r->request_id;
    }
  }

  // The next request id; never kNoticeRequestId, even after wrapping.
  uint32_t take_id() TDIST_REQUIRES(mu) {
    if (next_id == store_wire::kNoticeRequestId) ++next_id;
    return next_id++;
  }

  static void check_status(const Reply& r, const char* op) {
    if (r.status == Status::kOk) return;
    PayloadReader reader(r.payload, store_wire::Limits{UINT32_MAX, UINT32_MAX});
    TDIST_THROW(InvalidArgument, "TCPStore::", op, ": the server refused: ", reader.message());
  }

  // One request/reply round trip for a call that never blocks on the server.
  Reply call(Command command, const std::function<void(FrameWriter&)>& body, const char* op,
             std::chrono::milliseconds timeout) TDIST_EXCLUDES(mu) {
    MutexLock lock(mu);
    uint32_t id = take_id();
    std::vector<uint8_t> frame;
    FrameWriter w(frame, static_cast<uint8_t>(command), id);
    body(w);
    w.finish();
    Deadline deadline = Deadline::after(timeout);
    send(frame, deadline);
    std::optional<Reply> r = await(id, deadline);
    if (!r) {
      // The reply, when it comes, carries an old id and is discarded by the next call.
      TDIST_THROW(TimeoutError, "TCPStore::", op, ": no reply from the store at ", peer, " within ",
                  timeout.count(), " ms");
    }
    check_status(*r, op);
    return std::move(*r);
  }

  // Proves this client knows the job's token and checks that the server does too.
  void authenticate(const net::auth::Key& key, Deadline deadline) TDIST_EXCLUDES(mu) {
    MutexLock lock(mu);
    net::auth::Initiator initiator(key, "tcp-store");
    auto exchange = [&](Command command, std::span<const uint8_t> field) TDIST_REQUIRES(mu) {
      uint32_t id = take_id();
      std::vector<uint8_t> frame;
      FrameWriter(frame, static_cast<uint8_t>(command), id).bytes(field).finish();
      send(frame, deadline);
      std::optional<Reply> r = await(id, deadline);
      if (!r) {
        fail(detail::str_cat("the store at ", peer, " did not answer the authentication"));
      }
      if (r->status != Status::kOk) {
        PayloadReader reader(r->payload, reply_limits);
        fail<AuthError>(detail::str_cat("the store at ", peer,
                                        " refused the authentication: ", reader.message()));
      }
      return std::move(r->payload);
    };
    const std::vector<uint8_t> reply = exchange(Command::kAuthHello, initiator.nonce());
    PayloadReader reader(reply, reply_limits);
    Bytes challenge = reader.value();
    reader.expect_end();
    std::optional<net::auth::Mac> proof;
    if (challenge.size() == net::auth::kChallengeBytes) proof = initiator.answer(challenge.data());
    if (!proof) {
      fail<AuthError>(detail::str_cat("the store at ", peer,
                                      " does not know this job's authentication token (",
                                      net::auth::kTokenHint, ")"));
    }
    if (!exchange(Command::kAuthProof, *proof).empty()) {
      fail(detail::str_cat("the store at ", peer, " sent a malformed AUTH_PROOF reply"));
    }
  }

  // A GET, WAIT or MULTI_GET: waits for the reply until `deadline`, then cancels it.
  Reply call_blocking(Command command, const std::vector<std::string>& keys, const char* op,
                      Deadline deadline) TDIST_EXCLUDES(mu) {
    const auto start = Clock::now();
    MutexLock lock(mu);
    uint32_t id = take_id();
    std::vector<uint8_t> frame;
    FrameWriter w(frame, static_cast<uint8_t>(command), id);
    if (command == Command::kGet) {
      w.bytes(keys.at(0));
    } else {
      w.keys(keys);
    }
    w.finish();
    // Sending is not waiting: give a slow write at least the grace period.
    send(frame, deadline.is_never() ? deadline
                                    : Deadline::after(std::max<Clock::duration>(
                                          deadline.remaining(), kCancelGrace)));
    if (std::optional<Reply> r = await(id, deadline)) {
      check_status(*r, op);
      return std::move(*r);
    }
    // Deadline passed: withdraw the request. Its reply may still come first; then use it.
    uint32_t cancel_id = take_id();
    frame.clear();
    FrameWriter(frame, static_cast<uint8_t>(Command::kCancel), cancel_id).u32(id).finish();
    Deadline grace = Deadline::after(kCancelGrace);
    send(frame, grace);
    std::vector<std::string> missing = keys;
    while (std::optional<Reply> r = read_frame(grace)) {
      if (r->request_id == id) {
        check_status(*r, op);
        Reply answer = std::move(*r);
        await(cancel_id, grace);  // consume the CANCEL's reply; if it is late, it is stale
        return answer;
      }
      if (r->request_id == cancel_id) {
        PayloadReader reader(r->payload, reply_limits);
        reader.u8();
        missing = reader.keys();
        break;
      }
    }
    store_internal::throw_wait_timeout("TCPStore", op, missing, start);
  }
};

TCPStore::TCPStore(std::string host, TCPStoreOptions options)
    : Store(options.timeout), impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.host = std::move(host);
  s.port = options.port;
  s.limits = store_wire::Limits::from_settings();
  net::auth::Key key =
      options.auth_token ? net::auth::Key(*options.auth_token) : net::auth::Key::from_settings();
  std::shared_ptr<const net::tls::Context> tls = store_internal::tls_context(options.tls);
  if (options.is_server) {
    s.server = TCPStoreServer::start(s.host, options.port, key.secret(), options.tls);
    s.port = s.server->port();
  }
  // A wildcard address names "this machine" when connecting.
  std::string connect_host = s.host;
  if (connect_host.empty() || connect_host == "0.0.0.0") connect_host = "127.0.0.1";
  if (connect_host == "::") connect_host = "::1";
  s.peer = net::format_host_port(connect_host, s.port);
  auto connect_timeout =
      options.connect_timeout.value_or(setting_seconds("TDIST_STORE_CONNECT_TIMEOUT"));
  const Deadline connect_deadline = Deadline::after(connect_timeout);
  net::Fd fd = net::connect_tcp(connect_host, s.port, connect_deadline);
  {
    MutexLock lock(s.mu);  // not shared yet; taken for the analysis
    s.fd = std::move(fd);
  }
  if (tls) s.start_tls(std::move(tls), connect_deadline);
  if (key.enabled()) s.authenticate(key, connect_deadline);
  if (options.wait_for_workers && options.num_workers.has_value()) {
    int64_t joined = add(kWorkersKey, 1);
    if (joined >= *options.num_workers) set(kWorkersDoneKey, "1");
    wait({kWorkersDoneKey});
  }
}

TCPStore::~TCPStore() {
  MutexLock lock(impl_->mu);
  if (impl_->tls) impl_->tls->shutdown();  // close_notify: the server sees a clean close
}

const std::string& TCPStore::host() const { return impl_->host; }
uint16_t TCPStore::port() const { return impl_->port; }

void TCPStore::do_set(const std::string& key, const Bytes& value) {
  impl_->check_key(key);
  impl_->check_value(value);
  impl_->call(
      Command::kSet, [&](FrameWriter& w) { w.bytes(key).bytes(value); }, "set", timeout());
}

Bytes TCPStore::do_get(const std::string& key, Deadline deadline) {
  impl_->check_key(key);
  Reply r = impl_->call_blocking(Command::kGet, {key}, "get", deadline);
  PayloadReader reader(r.payload, impl_->reply_limits);
  Bytes value = reader.value();
  reader.expect_end();
  return value;
}

int64_t TCPStore::do_add(const std::string& key, int64_t delta) {
  impl_->check_key(key);
  Reply r = impl_->call(
      Command::kAdd, [&](FrameWriter& w) { w.bytes(key).i64(delta); }, "add", timeout());
  PayloadReader reader(r.payload, impl_->reply_limits);
  return reader.i64();
}

Bytes TCPStore::do_compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  impl_->check_key(key);
  impl_->check_value(expected);
  impl_->check_value(desired);
  Reply r = impl_->call(
      Command::kCompareSet, [&](FrameWriter& w) { w.bytes(key).bytes(expected).bytes(desired); },
      "compare_set", timeout());
  PayloadReader reader(r.payload, impl_->reply_limits);
  return reader.value();
}

bool TCPStore::do_check(const std::vector<std::string>& keys) {
  for (const auto& k : keys) impl_->check_key(k);
  Reply r = impl_->call(
      Command::kCheck, [&](FrameWriter& w) { w.keys(keys); }, "check", timeout());
  PayloadReader reader(r.payload, impl_->reply_limits);
  return reader.u8() != 0;
}

void TCPStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& k : keys) impl_->check_key(k);
  impl_->call_blocking(Command::kWait, keys, "wait", deadline);
}

bool TCPStore::do_delete_key(const std::string& key) {
  impl_->check_key(key);
  Reply r = impl_->call(
      Command::kDelete, [&](FrameWriter& w) { w.bytes(key); }, "delete_key", timeout());
  PayloadReader reader(r.payload, impl_->reply_limits);
  return reader.u8() != 0;
}

int64_t TCPStore::do_num_keys() {
  Reply r = impl_->call(
      Command::kNumKeys, [](FrameWriter&) {}, "num_keys", timeout());
  PayloadReader reader(r.payload, impl_->reply_limits);
  return reader.i64();
}

void TCPStore::do_append(const std::string& key, const Bytes& value) {
  impl_->check_key(key);
  impl_->check_value(value);
  impl_->call(
      Command::kAppend, [&](FrameWriter& w) { w.bytes(key).bytes(value); }, "append", timeout());
}

std::vector<Bytes> TCPStore::do_multi_get(const std::vector<std::string>& keys, Deadline deadline) {
  for (const auto& k : keys) impl_->check_key(k);
  Reply r = impl_->call_blocking(Command::kMultiGet, keys, "multi_get", deadline);
  PayloadReader reader(r.payload, impl_->reply_limits);
  uint32_t n = reader.count(4);
  TDIST_CHECK(n == keys.size(), PeerError, "TCPStore::multi_get: the store at ", impl_->peer,
              " sent ", n, " values for ", keys.size(), " keys");
  std::vector<Bytes> values;
  values.reserve(n);
  for (uint32_t i = 0; i < n; ++i) values.push_back(reader.value());
  return values;
}

void TCPStore::do_multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) {
  TDIST_CHECK(keys.size() == values.size(), InvalidArgument, "TCPStore::multi_set: ", keys.size(),
              " keys but ", values.size(), " values");
  for (size_t i = 0; i < keys.size(); ++i) {
    impl_->check_key(keys[i]);
    impl_->check_value(values[i]);
  }
  impl_->call(
      Command::kMultiSet,
      [&](FrameWriter& w) {
        w.u32(static_cast<uint32_t>(keys.size()));
        for (size_t i = 0; i < keys.size(); ++i) w.bytes(keys[i]).bytes(values[i]);
      },
      "multi_set", timeout());
}

}  // namespace tdist
