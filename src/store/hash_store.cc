// HashStore: the in-process Store. One map guarded by one mutex; a condition variable wakes
// blocked get/wait/multi_get whenever a key is written. Waits end at their Deadline
// (Deadline::never() waits forever) with a TimeoutError naming the missing keys.
#include "tdist/hash_store.h"

#include <string>
#include <unordered_map>

#include "store/store_internal.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist {

struct HashStore::State {
  Mutex mu;
  CondVar cv;
  std::unordered_map<std::string, Bytes> map TDIST_GUARDED_BY(mu);

  // The first of `keys` not in the map, or nullptr when all are present.
  const std::string* first_missing(const std::vector<std::string>& keys) const TDIST_REQUIRES(mu) {
    for (const auto& key : keys) {
      if (map.find(key) == map.end()) return &key;
    }
    return nullptr;
  }

  // Blocks (with mu held on entry and exit) until every key exists; TimeoutError at the
  // deadline naming the keys still missing.
  void wait_for(const std::vector<std::string>& keys, Deadline deadline, const char* op)
      TDIST_REQUIRES(mu) {
    const auto start = Clock::now();
    if (deadline.is_never()) {
      while (first_missing(keys) != nullptr) cv.wait(mu);
      return;
    }
    while (first_missing(keys) != nullptr) {
      if (!cv.wait_until(mu, deadline.time())) break;  // timed out: the check below decides
    }
    if (first_missing(keys) == nullptr) return;
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (map.find(key) == map.end()) missing.push_back(key);
    }
    store_internal::throw_wait_timeout("HashStore", op, missing, start);
  }
};

HashStore::HashStore(std::chrono::milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>()) {}

HashStore::~HashStore() = default;

void HashStore::do_set(const std::string& key, const Bytes& value) {
  {
    MutexLock lock(state_->mu);
    state_->map[key] = value;
  }
  state_->cv.notify_all();
}

Bytes HashStore::do_get(const std::string& key, Deadline deadline) {
  MutexLock lock(state_->mu);
  state_->wait_for({key}, deadline, "get");
  return state_->map.at(key);
}

int64_t HashStore::do_add(const std::string& key, int64_t delta) {
  int64_t result = 0;
  {
    MutexLock lock(state_->mu);
    auto it = state_->map.find(key);
    const Bytes* current = it == state_->map.end() ? nullptr : &it->second;
    result = store_internal::add_to_counter("HashStore", key, current, delta);
    state_->map[key] = to_bytes(std::to_string(result));
  }
  state_->cv.notify_all();
  return result;
}

Bytes HashStore::do_compare_set(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  UniqueLock lock(state_->mu);
  auto it = state_->map.find(key);
  if (it == state_->map.end()) {
    if (!expected.empty()) return expected;
    state_->map.emplace(key, desired);
  } else if (it->second == expected) {
    it->second = desired;
  } else {
    return it->second;
  }
  lock.unlock();
  state_->cv.notify_all();
  return desired;
}

bool HashStore::do_check(const std::vector<std::string>& keys) {
  MutexLock lock(state_->mu);
  return state_->first_missing(keys) == nullptr;
}

void HashStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  MutexLock lock(state_->mu);
  state_->wait_for(keys, deadline, "wait");
}

bool HashStore::do_delete_key(const std::string& key) {
  MutexLock lock(state_->mu);
  return state_->map.erase(key) > 0;
}

int64_t HashStore::do_num_keys() {
  MutexLock lock(state_->mu);
  return static_cast<int64_t>(state_->map.size());
}

void HashStore::do_append(const std::string& key, const Bytes& value) {
  {
    MutexLock lock(state_->mu);
    Bytes& current = state_->map[key];
    current.insert(current.end(), value.begin(), value.end());
  }
  state_->cv.notify_all();
}

std::vector<Bytes> HashStore::do_multi_get(const std::vector<std::string>& keys,
                                           Deadline deadline) {
  MutexLock lock(state_->mu);
  state_->wait_for(keys, deadline, "multi_get");
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(state_->map.at(key));
  return values;
}

void HashStore::do_multi_set(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  TDIST_CHECK(keys.size() == values.size(), InvalidArgument, "HashStore::multi_set: ", keys.size(),
              " keys but ", values.size(), " values");
  {
    MutexLock lock(state_->mu);
    for (size_t i = 0; i < keys.size(); ++i) state_->map[keys[i]] = values[i];
  }
  state_->cv.notify_all();
}

}  // namespace tdist
