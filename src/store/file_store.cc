// FileStore: a Store over a FileLog shared by processes. Each instance keeps a cache of the
// log's state and the offset it has read to. Every call takes the instance mutex, then the
// file lock (shared to read, exclusive to write), replays records appended since, and, for
// writes, appends its own; read-modify-writes (add, compare_set, append) happen under the
// exclusive lock. Blocking calls poll, sleeping 1 ms doubling to 10 ms, until the deadline.
// Two internal counters ("refcount": live instances, "finished": destroyed instances) give
// torch's num_workers clean-up; they are not user keys and num_keys() does not count them.
#include "tdist/file_store.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "store/file_store_log.h"
#include "store/store_internal.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/thread_annotations.h"

namespace tdist {

using store_internal::FileLog;
using store_internal::LogOp;
using store_internal::LogRecord;

namespace {

constexpr char kRefCountKey[] = "refcount";
constexpr char kFinishedKey[] = "finished";
constexpr milliseconds kFirstPoll{1};
constexpr milliseconds kMaxPoll{10};
constexpr int kMaxReopens = 100;

}  // namespace

struct FileStore::State {
  State(std::string path, int workers) : log(std::move(path)), num_workers(workers) {}

  Mutex mu;  // guards everything below and serialises use of the log
  FileLog log TDIST_GUARDED_BY(mu);
  std::unordered_map<std::string, Bytes> cache TDIST_GUARDED_BY(mu);  // user keys
  std::unordered_map<std::string, Bytes> meta TDIST_GUARDED_BY(mu);   // internal counters
  const int num_workers;

  // Not checked: the log's path is fixed at construction, so it needs no lock.
  const std::string& path() const TDIST_NO_THREAD_SAFETY_ANALYSIS { return log.path(); }

  void apply(LogRecord&& r) TDIST_REQUIRES(mu) {
    switch (r.op) {
      case LogOp::kSet:
        cache[r.key] = std::move(r.value);
        break;
      case LogOp::kDelete:
        cache.erase(r.key);
        break;
      case LogOp::kAppend: {
        Bytes& v = cache[r.key];
        v.insert(v.end(), r.value.begin(), r.value.end());
        break;
      }
      case LogOp::kMeta:
        meta[r.key] = std::move(r.value);
        break;
    }
  }

  // Brings the cache up to date. Needs a file lock held too.
  void replay() TDIST_REQUIRES(mu) {
    for (auto& r : log.read_new()) apply(std::move(r));
  }

  // Brings the cache up to date for a read: skips the file lock when nothing is new.
  void refresh() TDIST_REQUIRES(mu) {
    if (!log.has_unread()) return;
    FileLog::Lock lock(log, /*exclusive=*/false);
    replay();
  }

  // Appends `records` and applies them to the cache. Needs the exclusive lock, replay().
  void write(std::vector<LogRecord> records) TDIST_REQUIRES(mu) {
    log.append(records);
    for (auto& r : records) apply(std::move(r));
  }

  const Bytes* find(const std::string& key) const TDIST_REQUIRES(mu) {
    auto it = cache.find(key);
    return it == cache.end() ? nullptr : &it->second;
  }

  // Adds delta to an internal counter and returns the new value. Needs what write() needs.
  int64_t add_meta(const std::string& key, int64_t delta) TDIST_REQUIRES(mu) {
    auto it = meta.find(key);
    const Bytes* current = it == meta.end() ? nullptr : &it->second;
    const int64_t value = store_internal::add_to_counter("FileStore", key, current, delta);
    write({LogRecord{LogOp::kMeta, key, to_bytes(std::to_string(value))}});
    return value;
  }

  // Polls until all `keys` exist, releasing mu (held on entry and return) while it sleeps.
  // TimeoutError at the deadline naming the keys still missing.
  void poll(const std::vector<std::string>& keys, Deadline deadline, const char* op)
      TDIST_REQUIRES(mu) {
    const auto start = Clock::now();
    milliseconds pause = kFirstPoll;
    for (;;) {
      refresh();
      std::vector<std::string> missing;
      for (const auto& key : keys) {
        if (cache.find(key) == cache.end()) missing.push_back(key);
      }
      if (missing.empty()) return;
      if (deadline.expired()) store_internal::throw_wait_timeout("FileStore", op, missing, start);
      MutexUnlock unlocked(mu);
      std::this_thread::sleep_for(std::min(pause, deadline.remaining()));
      pause = std::min(pause * 2, kMaxPoll);
    }
  }
};

FileStore::FileStore(std::string path, int num_workers, std::chrono::milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>(std::move(path), num_workers)) {
  MutexLock guard(state_->mu);
  // The last FileStore of a previous job may remove the file between our open() and our
  // lock; then the path names a new file (or none), so open it again.
  for (int attempt = 0;; ++attempt) {
    {
      FileLog::Lock lock(state_->log, /*exclusive=*/true);
      if (!state_->log.detached()) {
        state_->replay();
        state_->add_meta(kRefCountKey, 1);
        return;
      }
    }
    TDIST_CHECK(attempt < kMaxReopens, Error, "FileStore: '", state_->path(),
                "' keeps being removed while opening it");
    state_->log.reopen();
  }
}

FileStore::~FileStore() {
  try {
    MutexLock guard(state_->mu);
    if (state_->log.detached()) return;  // already removed by someone else
    FileLog::Lock lock(state_->log, /*exclusive=*/true);
    state_->replay();
    const int64_t finished = state_->add_meta(kFinishedKey, 1);
    const int64_t live = state_->add_meta(kRefCountKey, -1);
    if (state_->num_workers > 0 && live <= 0 && finished >= state_->num_workers) {
      if (::unlink(state_->path().c_str()) != 0) {
        TDIST_LOG(kWarn) << "FileStore: could not remove '" << state_->path() << "'";
      }
    }
  } catch (const std::exception& e) {
    TDIST_LOG(kWarn) << "FileStore: clean-up of '" << state_->path() << "' failed: " << e.what();
  }
}

const std::string& FileStore::path() const { return state_->path(); }

void FileStore::do_set(const std::string& key, const Bytes& value) {
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  state_->write({LogRecord{LogOp::kSet, key, value}});
}

Bytes FileStore::do_get(const std::string& key, Deadline deadline) {
  MutexLock guard(state_->mu);
  state_->poll({key}, deadline, "get");
  return *state_->find(key);
}

int64_t FileStore::do_add(const std::string& key, int64_t delta) {
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  const int64_t value = store_internal::add_to_counter("FileStore", key, state_->find(key), delta);
  state_->write({LogRecord{LogOp::kSet, key, to_bytes(std::to_string(value))}});
  return value;
}

Bytes FileStore::do_compare_set(const std::string& key, const Bytes& expected,
                                const Bytes& desired) {
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  const Bytes* current = state_->find(key);
  if (current == nullptr && !expected.empty()) return expected;
  if (current != nullptr && *current != expected) return *current;
  state_->write({LogRecord{LogOp::kSet, key, desired}});
  return desired;
}

bool FileStore::do_check(const std::vector<std::string>& keys) {
  MutexLock guard(state_->mu);
  state_->refresh();
  for (const auto& key : keys) {
    if (state_->find(key) == nullptr) return false;
  }
  return true;
}

void FileStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  MutexLock guard(state_->mu);
  state_->poll(keys, deadline, "wait");
}

bool FileStore::do_delete_key(const std::string& key) {
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  if (state_->find(key) == nullptr) return false;
  state_->write({LogRecord{LogOp::kDelete, key, {}}});
  return true;
}

int64_t FileStore::do_num_keys() {
  MutexLock guard(state_->mu);
  state_->refresh();
  return static_cast<int64_t>(state_->cache.size());
}

void FileStore::do_append(const std::string& key, const Bytes& value) {
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  state_->write({LogRecord{LogOp::kAppend, key, value}});
}

std::vector<Bytes> FileStore::do_multi_get(const std::vector<std::string>& keys,
                                           Deadline deadline) {
  MutexLock guard(state_->mu);
  state_->poll(keys, deadline, "multi_get");
  std::vector<Bytes> values;
  values.reserve(keys.size());
  for (const auto& key : keys) values.push_back(*state_->find(key));
  return values;
}

void FileStore::do_multi_set(const std::vector<std::string>& keys,
                             const std::vector<Bytes>& values) {
  TDIST_CHECK(keys.size() == values.size(), InvalidArgument, "FileStore::multi_set: ", keys.size(),
              " keys but ", values.size(), " values");
  std::vector<LogRecord> records;
  records.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) records.push_back({LogOp::kSet, keys[i], values[i]});
  MutexLock guard(state_->mu);
  FileLog::Lock lock(state_->log, /*exclusive=*/true);
  state_->replay();
  state_->write(std::move(records));
}

}  // namespace tdist
