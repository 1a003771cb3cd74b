// C10dStore (store_adapter.h): tdist's Store interface over a c10d store.
#include "store_adapter.h"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "tdist/error.h"

namespace tdist::python {
namespace {

// Runs `fn`, turning c10d's errors into tdist's: a timeout when `deadline` has passed
// (or the message says so), otherwise a lost store.
template <typename F>
auto translated(const char* what, const std::string& key, Deadline deadline, F&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    const bool passed = !deadline.is_never() && Clock::now() >= deadline.time();
    if (passed || msg.find("imeout") != std::string::npos) {
      TDIST_THROW(TimeoutError, "store ", what, " '", key, "' timed out: ", msg);
    }
    TDIST_THROW(PeerError, "store ", what, " '", key, "' failed: ", msg);
  }
}

std::chrono::milliseconds remaining(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.time() - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

void C10dStore::do_set(const std::string& key, const Bytes& value) {
  translated("set", key, Deadline::never(), [&] {
    store_->set(key, value);
    return 0;
  });
}

Bytes C10dStore::do_get(const std::string& key, Deadline deadline) {
  do_wait({key}, deadline);
  return translated("get", key, deadline, [&] { return store_->get(key); });
}

int64_t C10dStore::do_add(const std::string& key, int64_t delta) {
  return translated("add", key, Deadline::never(), [&] { return store_->add(key, delta); });
}

Bytes C10dStore::do_compare_set(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  return translated("compare_set", key, Deadline::never(),
                    [&] { return store_->compareSet(key, expected, desired); });
}

bool C10dStore::do_check(const std::vector<std::string>& keys) {
  return translated("check", keys.empty() ? "" : keys[0], Deadline::never(),
                    [&] { return store_->check(keys); });
}

void C10dStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  if (keys.empty()) return;
  translated("wait", keys[0], deadline, [&] {
    if (deadline.is_never()) {
      store_->wait(keys);
    } else {
      store_->wait(keys, remaining(deadline));
    }
    return 0;
  });
}

bool C10dStore::do_delete_key(const std::string& key) {
  return translated("delete_key", key, Deadline::never(), [&] { return store_->deleteKey(key); });
}

int64_t C10dStore::do_num_keys() {
  return translated("num_keys", "", Deadline::never(), [&] { return store_->getNumKeys(); });
}

// LibTorch 1.13's c10d::Store has no append or multi-key calls: there, append is a
// compare-and-set loop and the multi-key calls go key by key.
void C10dStore::do_append(const std::string& key, const Bytes& value) {
  translated("append", key, Deadline::never(), [&] {
#if TORCH_VERSION_MAJOR >= 2
    store_->append(key, value);
#else
    Bytes current = store_->check({key}) ? store_->get(key) : Bytes{};
    for (;;) {
      Bytes next = current;
      next.insert(next.end(), value.begin(), value.end());
      Bytes seen = store_->compareSet(key, current, next);
      if (seen == next) break;
      current = std::move(seen);
    }
#endif
    return 0;
  });
}

std::vector<Bytes> C10dStore::do_multi_get(const std::vector<std::string>& keys,
                                           Deadline deadline) {
  do_wait(keys, deadline);
  return translated("multi_get", keys.empty() ? "" : keys[0], deadline, [&] {
#if TORCH_VERSION_MAJOR >= 2
    return store_->multiGet(keys);
#else
    std::vector<Bytes> values;
    for (const auto& key : keys) values.push_back(store_->get(key));
    return values;
#endif
  });
}

void C10dStore::do_multi_set(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  translated("multi_set", keys.empty() ? "" : keys[0], Deadline::never(), [&] {
#if TORCH_VERSION_MAJOR >= 2
    store_->multiSet(keys, values);
#else
    for (size_t i = 0; i < keys.size(); ++i) store_->set(keys[i], values[i]);
#endif
    return 0;
  });
}

}  // namespace tdist::python
