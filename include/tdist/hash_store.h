// HashStore: an in-process Store (a map behind a mutex and a condition variable).
// For ranks run as threads in one process, and for tests. Thread-safe.
#pragma once

#include <memory>

#include "tdist/store.h"

namespace tdist {

class HashStore : public Store {
 public:
  explicit HashStore(std::chrono::milliseconds timeout = kDefaultStoreTimeout);
  ~HashStore() override;

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
