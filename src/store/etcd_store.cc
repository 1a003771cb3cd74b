// EtcdStore: store.h's semantics over EtcdKv (etcd_kv.h). Read-modify-writes retry a txn
// guarded by the key's mod revision; blocking reads watch the first missing key from the
// revision they read it at, then read every key again.
#include "tdist/etcd_store.h"

#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "store/etcd_kv.h"
#include "store/store_internal.h"
#include "tdist/error.h"

namespace tdist {

using etcd::KeyValue;

struct EtcdStore::Impl {
  std::string host;
  uint16_t port;
  std::string prefix;
  etcd::EtcdKv kv;

  Impl(std::string h, uint16_t p, std::string pre, std::chrono::milliseconds connect_timeout)
      : host(std::move(h)), port(p), prefix(std::move(pre)), kv(host, port, connect_timeout) {}

  std::string full(const std::string& key) const { return prefix + key; }

  // Puts next(current value, or null when missing) unless the key changed since it was read
  // (then reads it again and retries). Returns what next returned (nullopt: nothing put) and
  // the value it saw.
  struct Updated {
    std::optional<Bytes> written;
    std::optional<Bytes> seen;
  };
  Updated update(const std::string& key,
                 const std::function<std::optional<Bytes>(const Bytes*)>& next, Deadline deadline) {
    std::optional<KeyValue> current = kv.get(full(key), deadline).kv;
    for (int lost = 0;; ++lost) {
      Updated out;
      if (current) out.seen = current->value;
      out.written = next(current ? &current->value : nullptr);
      if (!out.written) return out;
      etcd::PutIfResult r =
          kv.put_if(full(key), *out.written, current ? current->mod_revision : 0, deadline);
      if (r.succeeded) return out;
      current = std::move(r.current);
      back_off(lost);
    }
  }

  // After `lost` + 1 lost races on one key: a random pause, growing with `lost`, so that
  // contending writers spread out instead of all retrying (and failing) together.
  static void back_off(int lost) {
    thread_local std::minstd_rand random(std::random_device{}());
    const int64_t cap_us = std::min<int64_t>(int64_t{250} << std::min(lost, 5), 8000);
    std::this_thread::sleep_for(std::chrono::microseconds(random() % cap_us));
  }

  // The keys' current values (nullopt: missing), kMaxTxnOps per txn; `revision` gets the
  // store's revision when the first missing key was seen missing.
  std::vector<std::optional<KeyValue>> read(const std::vector<std::string>& keys, bool keys_only,
                                            int64_t* revision, Deadline deadline) {
    std::vector<std::optional<KeyValue>> out;
    for (size_t begin = 0; begin < keys.size(); begin += etcd::kMaxTxnOps) {
      std::vector<std::string> chunk;
      for (size_t i = begin; i < std::min(keys.size(), begin + etcd::kMaxTxnOps); ++i) {
        chunk.push_back(full(keys[i]));
      }
      etcd::Many many = kv.get_many(chunk, keys_only, deadline);
      for (auto& value : many.kvs) {
        if (!value && *revision == 0) *revision = many.revision;
        out.push_back(std::move(value));
      }
    }
    return out;
  }

  // Blocks until every key exists and returns their values (empty with keys_only). At the
  // deadline raises TimeoutError naming the keys still missing.
  std::vector<Bytes> wait_all(const char* op, const std::vector<std::string>& keys, bool keys_only,
                              Deadline deadline) {
    const auto start = Clock::now();
    std::vector<std::string> missing = keys;
    try {
      while (true) {
        int64_t revision = 0;
        std::vector<std::optional<KeyValue>> values = read(keys, keys_only, &revision, deadline);
        missing.clear();
        for (size_t i = 0; i < keys.size(); ++i) {
          if (!values[i]) missing.push_back(keys[i]);
        }
        if (missing.empty()) {
          std::vector<Bytes> out;
          if (!keys_only) {
            for (auto& value : values) out.push_back(std::move(value->value));
          }
          return out;
        }
        // Woken by a put of the first missing key after `revision`, or at the deadline.
        if (deadline.expired() || !kv.watch_put(full(missing.front()), revision, deadline)) {
          break;
        }
      }
    } catch (const TimeoutError&) {
    }
    store_internal::throw_wait_timeout("EtcdStore", op, missing, start);
  }
};

EtcdStore::EtcdStore(std::string host, uint16_t port, std::string prefix,
                     std::chrono::milliseconds timeout, std::chrono::milliseconds connect_timeout)
    : Store(timeout),
      impl_(std::make_unique<Impl>(std::move(host), port, std::move(prefix), connect_timeout)) {
  TDIST_CHECK(!impl_->host.empty() && port != 0, InvalidArgument,
              "EtcdStore: needs etcd's host and port, got '", impl_->host, ":", port, "'");
}

EtcdStore::~EtcdStore() = default;

const std::string& EtcdStore::host() const { return impl_->host; }
uint16_t EtcdStore::port() const { return impl_->port; }
const std::string& EtcdStore::prefix() const { return impl_->prefix; }

void EtcdStore::do_set(const std::string& key, const Bytes& value) {
  impl_->kv.put(impl_->full(key), value, default_deadline());
}

Bytes EtcdStore::do_get(const std::string& key, Deadline deadline) {
  return std::move(impl_->wait_all("get", {key}, false, deadline).front());
}

int64_t EtcdStore::do_add(const std::string& key, int64_t delta) {
  int64_t sum = 0;
  impl_->update(
      key,
      [&](const Bytes* current) -> std::optional<Bytes> {
        sum = store_internal::add_to_counter("EtcdStore", key, current, delta);
        return to_bytes(std::to_string(sum));
      },
      default_deadline());
  return sum;
}

Bytes EtcdStore::do_compare_set(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  Impl::Updated u = impl_->update(
      key,
      [&](const Bytes* current) -> std::optional<Bytes> {
        if (current != nullptr ? *current == expected : expected.empty()) return desired;
        return std::nullopt;
      },
      default_deadline());
  if (u.written) return *u.written;
  return u.seen ? *u.seen : expected;
}

bool EtcdStore::do_check(const std::vector<std::string>& keys) {
  int64_t revision = 0;
  for (const auto& value : impl_->read(keys, true, &revision, default_deadline())) {
    if (!value) return false;
  }
  return true;
}

void EtcdStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  impl_->wait_all("wait", keys, true, deadline);
}

bool EtcdStore::do_delete_key(const std::string& key) {
  return impl_->kv.remove(impl_->full(key), default_deadline()) > 0;
}

int64_t EtcdStore::do_num_keys() {
  return impl_->kv.count(impl_->prefix.empty() ? std::string(1, '\0') : impl_->prefix,
                         etcd::prefix_end(impl_->prefix), default_deadline());
}

void EtcdStore::do_append(const std::string& key, const Bytes& value) {
  impl_->update(
      key,
      [&](const Bytes* current) -> std::optional<Bytes> {
        Bytes joined = current != nullptr ? *current : Bytes{};
        joined.insert(joined.end(), value.begin(), value.end());
        return joined;
      },
      default_deadline());
}

std::vector<Bytes> EtcdStore::do_multi_get(const std::vector<std::string>& keys,
                                           Deadline deadline) {
  if (keys.empty()) return {};
  return impl_->wait_all("multi_get", keys, false, deadline);
}

void EtcdStore::do_multi_set(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  TDIST_CHECK(keys.size() == values.size(), InvalidArgument, "EtcdStore::multi_set: ", keys.size(),
              " keys but ", values.size(), " values");
  const Deadline deadline = default_deadline();
  for (size_t begin = 0; begin < keys.size(); begin += etcd::kMaxTxnOps) {
    const size_t end = std::min(keys.size(), begin + etcd::kMaxTxnOps);
    std::vector<std::string> chunk_keys;
    for (size_t i = begin; i < end; ++i) chunk_keys.push_back(impl_->full(keys[i]));
    impl_->kv.put_many(chunk_keys, std::vector<Bytes>(values.begin() + begin, values.begin() + end),
                       deadline);
  }
}

}  // namespace tdist
