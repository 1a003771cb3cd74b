// Store: the key-value store ranks use to meet and exchange small data (rendezvous).
//
// Keys are strings, values bytes. Semantics follow torch.distributed's Store:
//  - set(k, v) overwrites; get(k) blocks until k exists or the deadline passes
//    (TimeoutError naming the key and timeout).
//  - add(k, d) treats the value as a decimal integer (a missing key is 0), adds d and
//    returns the new value; get(k) then returns its decimal text.
//  - compare_set(k, expected, desired): when k's value equals `expected` (or k is missing
//    and `expected` is empty) sets it to `desired` and returns `desired`; otherwise
//    returns the current value (or `expected` when k is missing).
//  - check(keys): true when all exist, without blocking. wait(keys) blocks until all do.
//  - delete_key(k): true when it existed. num_keys(): keys stored (all prefixes).
//  - append(k, v): appends to the value (creating it). multi_get blocks like get.
//
// Calls without a deadline use the store's timeout (default 300 s, set_timeout changes
// it). Implementations are thread-safe: any number of threads may call one Store.
// Failures: TimeoutError at the deadline; PeerError when a remote store is unreachable
// or its connection breaks; InvalidArgument for keys or values over the limits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/deadline.h"

namespace tdist {

using Bytes = std::vector<uint8_t>;

inline Bytes to_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

inline constexpr std::chrono::milliseconds kDefaultStoreTimeout{300'000};

class Store {
 public:
  explicit Store(std::chrono::milliseconds timeout = kDefaultStoreTimeout) : timeout_(timeout) {}
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  void set(const std::string& key, const Bytes& value) { do_set(key, value); }
  void set(const std::string& key, std::string_view value) { do_set(key, to_bytes(value)); }

  Bytes get(const std::string& key) { return do_get(key, default_deadline()); }
  Bytes get(const std::string& key, Deadline deadline) { return do_get(key, deadline); }

  int64_t add(const std::string& key, int64_t delta) { return do_add(key, delta); }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
    return do_compare_set(key, expected, desired);
  }

  bool check(const std::vector<std::string>& keys) { return do_check(keys); }

  void wait(const std::vector<std::string>& keys) { do_wait(keys, default_deadline()); }
  void wait(const std::vector<std::string>& keys, Deadline deadline) { do_wait(keys, deadline); }

  bool delete_key(const std::string& key) { return do_delete_key(key); }
  int64_t num_keys() { return do_num_keys(); }

  void append(const std::string& key, const Bytes& value) { do_append(key, value); }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) {
    return do_multi_get(keys, default_deadline());
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& keys, Deadline deadline) {
    return do_multi_get(keys, deadline);
  }

  // Throws InvalidArgument when the two lists differ in length.
  void multi_set(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
    do_multi_set(keys, values);
  }

  std::chrono::milliseconds timeout() const { return timeout_.load(); }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  Deadline default_deadline() const { return Deadline::after(timeout_.load()); }

 protected:
  virtual void do_set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes do_get(const std::string& key, Deadline deadline) = 0;
  virtual int64_t do_add(const std::string& key, int64_t delta) = 0;
  virtual Bytes do_compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) = 0;
  virtual bool do_check(const std::vector<std::string>& keys) = 0;
  virtual void do_wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  virtual bool do_delete_key(const std::string& key) = 0;
  virtual int64_t do_num_keys() = 0;
  virtual void do_append(const std::string& key, const Bytes& value) = 0;
  virtual std::vector<Bytes> do_multi_get(const std::vector<std::string>& keys,
                                          Deadline deadline) = 0;
  virtual void do_multi_set(const std::vector<std::string>& keys,
                            const std::vector<Bytes>& values) = 0;

 private:
  std::atomic<std::chrono::milliseconds> timeout_;
};

}  // namespace tdist
