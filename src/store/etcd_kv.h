// EtcdKv: the few etcd v3 KV calls EtcdStore needs (range, put, delete, txn, watch), spoken
// as JSON to etcd's gRPC gateway over HTTP/1.1 (POST /v3/kv/..., keys and values base64).
// Internal to the store layer.
//
// Connections: a pool of keep-alive HTTP connections; each call takes one (or opens one,
// retrying refused connects for up to connect_timeout) and puts it back when the reply was
// read to its end. Thread-safe: any number of threads may call one EtcdKv.
// Failures: PeerError naming host:port when etcd cannot be reached or the connection breaks;
// TimeoutError at the call's deadline; InvalidArgument when etcd refuses a request as invalid
// (a request over --max-request-bytes, too many operations); Error for other refusals.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "net/http_client.h"
#include "tdist/store.h"
#include "tdist/thread_annotations.h"

namespace tdist::etcd {

struct KeyValue {
  Bytes value;
  int64_t mod_revision = 0;
};

// The result of put_if: whether the put happened, and else the key's current state.
struct PutIfResult {
  bool succeeded = false;
  std::optional<KeyValue> current;
};

// What a get() saw: the key (if present) and the store's revision at the time.
struct Observed {
  std::optional<KeyValue> kv;
  int64_t revision = 0;
};

// What get_many() saw: each key's value (nullopt: missing) and the store's revision.
struct Many {
  std::vector<std::optional<KeyValue>> kvs;
  int64_t revision = 0;
};

// etcd's default --max-txn-ops: operations per txn.
inline constexpr size_t kMaxTxnOps = 128;

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix);
// "\0" (every key) when the prefix is empty or all 0xff.
std::string prefix_end(const std::string& prefix);

class EtcdKv {
 public:
  EtcdKv(std::string host, uint16_t port, std::chrono::milliseconds connect_timeout);
  ~EtcdKv();

  const std::string& peer() const { return peer_; }

  Observed get(const std::string& key, Deadline deadline);
  void put(const std::string& key, const Bytes& value, Deadline deadline);
  // Keys removed (0 or 1).
  int64_t remove(const std::string& key, Deadline deadline);
  // Keys in [begin, end).
  int64_t count(const std::string& begin, const std::string& end, Deadline deadline);
  // Puts when the key's mod_revision is `revision` (0: the key is missing), atomically.
  PutIfResult put_if(const std::string& key, const Bytes& value, int64_t revision,
                     Deadline deadline);
  // The keys' values in one txn (at most kMaxTxnOps keys); `keys_only` fetches no values.
  Many get_many(const std::vector<std::string>& keys, bool keys_only, Deadline deadline);
  // Puts the keys in one txn (at most kMaxTxnOps keys), atomically.
  void put_many(const std::vector<std::string>& keys, const std::vector<Bytes>& values,
                Deadline deadline);
  // Blocks until `key` is put at a revision after `revision`, or the deadline (false).
  bool watch_put(const std::string& key, int64_t revision, Deadline deadline);

 private:
  struct Call;
  net::HttpConnection take(Deadline deadline);
  void give_back(net::HttpConnection connection);

  std::string host_;
  uint16_t port_;
  std::string peer_;  // "host:port"
  std::chrono::milliseconds connect_timeout_;
  Mutex mu_;
  std::vector<net::HttpConnection> idle_ TDIST_GUARDED_BY(mu_);
};

}  // namespace tdist::etcd
