// EtcdStore: a Store kept in etcd (v3), a key-value service that outlives any node of the
// job: the launcher's agents meet on it (tdistrun --rdzv-backend etcd-v2), and so can ranks.
//
// Every call of store.h, with exactly its semantics, over etcd's JSON gateway (HTTP/1.1 on
// etcd's client URL, plain TCP; no TLS or etcd authentication). Every key lives under
// `prefix` (say "/tdist/<run id>/"); num_keys counts the keys under it only. add,
// compare_set and append are atomic read-modify-writes (a txn that puts only when the key's
// mod revision is still the one read, retried until it wins); multi_set is one txn per 128
// keys. A blocking get/wait/multi_get watches the missing key from the revision it read, so
// it wakes as soon as the key is put, and raises TimeoutError naming the missing keys at its
// deadline. Values are limited by etcd's --max-request-bytes (default 1.5 MiB); a larger one
// raises InvalidArgument (etcd's refusal).
//
// Thread-safety: any number of threads may call one EtcdStore (calls take a connection from
// a pool of keep-alive connections). Failures: PeerError naming host:port when etcd cannot
// be reached (a connect keeps retrying for connect_timeout) or a connection breaks;
// TimeoutError at a call's deadline; Error when etcd refuses a request otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tdist/store.h"

namespace tdist {

inline constexpr std::chrono::milliseconds kEtcdConnectTimeout{5'000};

class EtcdStore : public Store {
 public:
  // Connects lazily: nothing is sent before the first call. `host` without brackets.
  EtcdStore(std::string host, uint16_t port, std::string prefix,
            std::chrono::milliseconds timeout = kDefaultStoreTimeout,
            std::chrono::milliseconds connect_timeout = kEtcdConnectTimeout);
  ~EtcdStore() override;

  const std::string& host() const;
  uint16_t port() const;
  const std::string& prefix() const;

 protected:
  void do_set(const std::string& key, const Bytes& value) override;
  Bytes do_get(const std::string& key, Deadline deadline) override;
  int64_t do_add(const std::string& key, int64_t delta) override;
  Bytes do_compare_set(const std::string& key, const Bytes& expected,
                       const Bytes& desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, Deadline deadline) override;
  bool do_delete_key(const std::string& key) override;
  int64_t do_num_keys() override;
  void do_append(const std::string& key, const Bytes& value) override;
  std::vector<Bytes> do_multi_get(const std::vector<std::string>& keys, Deadline deadline) override;
  void do_multi_set(const std::vector<std::string>& keys,
                    const std::vector<Bytes>& values) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdist
