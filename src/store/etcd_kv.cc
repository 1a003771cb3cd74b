// EtcdKv: JSON requests to etcd's gRPC gateway, base64 keys and values, the connection pool,
// and reading the gateway's replies (int64 fields come as strings; fields at their default
// value are left out: no "kvs" when nothing matched, no "value" when it is empty).
#include "store/etcd_kv.h"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>
#include <utility>

#include "net/address.h"
#include "tdist/error.h"

namespace tdist::etcd {
namespace {

using nlohmann::json;

// gRPC's status codes that mean "your request is wrong" (INVALID_ARGUMENT, OUT_OF_RANGE,
// FAILED_PRECONDITION) and "etcd cannot serve now" (UNAVAILABLE).
constexpr int kGrpcInvalidArgument = 3;
constexpr int kGrpcResourceExhausted = 8;
constexpr int kGrpcFailedPrecondition = 9;
constexpr int kGrpcOutOfRange = 11;
constexpr int kGrpcUnavailable = 14;

std::string b64(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()),
                                static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string b64(const Bytes& data) {
  return b64(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

Bytes unb64(const std::string& text, const std::string& peer) {
  Bytes out(3 * (text.size() / 4) + 3);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  TDIST_CHECK(n >= 0 && text.size() % 4 == 0, PeerError, "EtcdStore: etcd at ", peer,
              " sent a value that is not base64");
  size_t size = static_cast<size_t>(n);
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --size;  // padding
  out.resize(size);
  return out;
}

int64_t int_field(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number()) return it->get<int64_t>();
  return std::stoll(it->get<std::string>());
}

// The first key-value of a RangeResponse, if any.
std::optional<KeyValue> first_kv(const json& range, const std::string& peer) {
  auto kvs = range.find("kvs");
  if (kvs == range.end() || kvs->empty()) return std::nullopt;
  const json& kv = kvs->front();
  KeyValue out;
  out.mod_revision = int_field(kv, "mod_revision");
  if (auto v = kv.find("value"); v != kv.end()) out.value = unb64(v->get<std::string>(), peer);
  return out;
}

json key_only(const std::string& key) { return json{{"key", b64(key)}}; }

json put_request(const std::string& key, const Bytes& value) {
  return json{{"key", b64(key)}, {"value", b64(value)}};
}

// Throws the exception for an error reply of etcd ({"error", "message", "code"}).
[[noreturn]] void throw_refusal(const std::string& peer, int status, const std::string& body) {
  std::string message = body.substr(0, 300);
  int code = 0;
  try {
    const json j = json::parse(body);
    message = j.value("message", j.value("error", message));
    code = j.value("code", 0);
  } catch (const json::exception&) {
  }
  const bool too_large =
      code == kGrpcResourceExhausted && (message.find("larger than max") != std::string::npos ||
                                         message.find("too large") != std::string::npos);
  if (code == kGrpcInvalidArgument || code == kGrpcOutOfRange || code == kGrpcFailedPrecondition ||
      too_large) {
    TDIST_THROW(InvalidArgument, "EtcdStore: etcd at ", peer, " refused the request: ", message);
  }
  if (code == kGrpcUnavailable) {
    TDIST_THROW(PeerError, "EtcdStore: etcd at ", peer, " is unavailable: ", message);
  }
  TDIST_THROW(Error, "EtcdStore: etcd at ", peer, " refused the request (HTTP ", status,
              "): ", message);
}

}  // namespace

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

// One request on a pooled connection; a pooled connection that the server closed while idle
// is replaced once (nothing of the request was answered, so it was not executed).
struct EtcdKv::Call {
  static json run(EtcdKv& kv, const char* path, const json& request, Deadline deadline) {
    const std::string body = request.dump();
    for (int attempt = 0;; ++attempt) {
      net::HttpConnection connection = kv.take(deadline);
      net::HttpReply reply;
      try {
        reply = connection.post(path, body, deadline);
      } catch (const PeerError& e) {
        if (attempt == 0 && connection.fresh()) continue;
        TDIST_THROW(PeerError, "EtcdStore: connection to etcd at ", kv.peer_, " broke: ", e.what());
      }
      if (connection.reusable()) kv.give_back(std::move(connection));
      if (reply.status != 200) throw_refusal(kv.peer_, reply.status, reply.body);
      try {
        return json::parse(reply.body);
      } catch (const json::exception& e) {
        TDIST_THROW(PeerError, "EtcdStore: etcd at ", kv.peer_, " sent a reply that is not JSON (",
                    e.what(), ")");
      }
    }
  }
};

EtcdKv::EtcdKv(std::string host, uint16_t port, std::chrono::milliseconds connect_timeout)
    : host_(std::move(host)),
      port_(port),
      peer_(net::format_host_port(host_, port_)),
      connect_timeout_(connect_timeout) {}

EtcdKv::~EtcdKv() = default;

net::HttpConnection EtcdKv::take(Deadline deadline) {
  {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      net::HttpConnection connection = std::move(idle_.back());
      idle_.pop_back();
      return connection;
    }
  }
  try {
    return net::HttpConnection::open(
        host_, port_, Deadline::earliest(deadline, Deadline::after(connect_timeout_)));
  } catch (const TimeoutError& e) {
    TDIST_THROW(PeerError, "EtcdStore: cannot reach etcd at ", peer_, ": ", e.what());
  }
}

void EtcdKv::give_back(net::HttpConnection connection) {
  MutexLock lock(mu_);
  idle_.push_back(std::move(connection));
}

Observed EtcdKv::get(const std::string& key, Deadline deadline) {
  const json reply = Call::run(*this, "/v3/kv/range", key_only(key), deadline);
  return {first_kv(reply, peer_), int_field(reply.value("header", json::object()), "revision")};
}

void EtcdKv::put(const std::string& key, const Bytes& value, Deadline deadline) {
  Call::run(*this, "/v3/kv/put", put_request(key, value), deadline);
}

int64_t EtcdKv::remove(const std::string& key, Deadline deadline) {
  return int_field(Call::run(*this, "/v3/kv/deleterange", key_only(key), deadline), "deleted");
}

int64_t EtcdKv::count(const std::string& begin, const std::string& end, Deadline deadline) {
  const json request{{"key", b64(begin)}, {"range_end", b64(end)}, {"count_only", true}};
  return int_field(Call::run(*this, "/v3/kv/range", request, deadline), "count");
}

PutIfResult EtcdKv::put_if(const std::string& key, const Bytes& value, int64_t revision,
                           Deadline deadline) {
  const json request{{"compare", json::array({{{"target", "MOD"},
                                               {"result", "EQUAL"},
                                               {"key", b64(key)},
                                               {"mod_revision", std::to_string(revision)}}})},
                     {"success", json::array({{{"request_put", put_request(key, value)}}})},
                     {"failure", json::array({{{"request_range", key_only(key)}}})}};
  const json reply = Call::run(*this, "/v3/kv/txn", request, deadline);
  PutIfResult result;
  result.succeeded = reply.value("succeeded", false);
  if (!result.succeeded) {
    const json& responses = reply.at("responses");
    result.current = first_kv(responses.at(0).value("response_range", json::object()), peer_);
  }
  return result;
}

Many EtcdKv::get_many(const std::vector<std::string>& keys, bool keys_only, Deadline deadline) {
  json ops = json::array();
  for (const std::string& key : keys) {
    json range = key_only(key);
    if (keys_only) range["keys_only"] = true;
    ops.push_back({{"request_range", std::move(range)}});
  }
  const json reply = Call::run(*this, "/v3/kv/txn", json{{"success", std::move(ops)}}, deadline);
  Many out;
  out.revision = int_field(reply.value("header", json::object()), "revision");
  const json responses = reply.value("responses", json::array());
  for (size_t i = 0; i < keys.size(); ++i) {
    out.kvs.push_back(i < responses.size()
                          ? first_kv(responses[i].value("response_range", json::object()), peer_)
                          : std::nullopt);
  }
  return out;
}

void EtcdKv::put_many(const std::vector<std::string>& keys, const std::vector<Bytes>& values,
                      Deadline deadline) {
  json ops = json::array();
  for (size_t i = 0; i < keys.size(); ++i) {
    ops.push_back({{"request_put", put_request(keys[i], values[i])}});
  }
  Call::run(*this, "/v3/kv/txn", json{{"success", std::move(ops)}}, deadline);
}

bool EtcdKv::watch_put(const std::string& key, int64_t revision, Deadline deadline) {
  // A connection of its own: the stream ends only when the connection closes.
  net::HttpConnection connection = [&] {
    try {
      return net::HttpConnection::open(
          host_, port_, Deadline::earliest(deadline, Deadline::after(connect_timeout_)));
    } catch (const TimeoutError& e) {
      TDIST_THROW(PeerError, "EtcdStore: cannot reach etcd at ", peer_, ": ", e.what());
    }
  }();
  const json request{
      {"create_request", {{"key", b64(key)}, {"start_revision", std::to_string(revision + 1)}}}};
  try {
    const int status = connection.post_streaming("/v3/watch", request.dump(), deadline);
    if (status != 200) {
      std::string body;
      while (auto line = connection.read_line(deadline)) body += *line;
      throw_refusal(peer_, status, body);
    }
    while (std::optional<std::string> line = connection.read_line(deadline)) {
      if (line->empty()) continue;
      const json message = json::parse(*line);
      if (message.contains("error")) {
        const json& error = message["error"];
        throw_refusal(peer_, 500, error.is_object() ? error.dump() : message.dump());
      }
      const json result = message.value("result", json::object());
      // A cancelled or compacted watch: the caller looks again.
      if (result.value("canceled", false)) return true;
      for (const json& event : result.value("events", json::array())) {
        if (event.value("type", "PUT") == "PUT") return true;
      }
    }
  } catch (const TimeoutError&) {
    return false;
  } catch (const PeerError& e) {
    TDIST_THROW(PeerError, "EtcdStore: watch on etcd at ", peer_, " broke: ", e.what());
  } catch (const json::exception& e) {
    TDIST_THROW(PeerError, "EtcdStore: etcd at ", peer_, " sent a watch reply that is not JSON (",
                e.what(), ")");
  }
  return true;  // the stream ended: look again
}

}  // namespace tdist::etcd
