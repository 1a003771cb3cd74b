// FileStore: a Store kept in one shared file, for processes on one host or on a shared
// file system (init_method file:///path). Every call takes an flock(2) on the file,
// replays the log of records appended since its last read, and appends its own.
// With num_workers > 0 the file is removed when that many FileStore objects (across all
// processes) have been destroyed, as torch does. Thread-safe and process-safe.
#pragma once

#include <memory>

#include "tdist/store.h"

namespace tdist {

class FileStore : public Store {
 public:
  explicit FileStore(std::string path, int num_workers = -1,
                     std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  const std::string& path() const;
  ~FileStore() override;

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
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tdist
