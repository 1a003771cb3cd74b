// C10dStore: a tdist::Store over a torch.distributed (c10d) store, so that the groups the
// Python backend creates meet through the store torch.distributed hands it (a PrefixStore
// per group over the job's TCPStore/FileStore). Internal to the Python extension.
//
// Deadlines: c10d calls block up to the c10d store's own timeout; get and wait first wait
// for the keys until the tdist deadline, so a passed deadline is a tdist::TimeoutError.
// Failures of the c10d store (a lost server) become tdist::PeerError, timeouts
// tdist::TimeoutError. Thread-safety: as the wrapped store's (c10d stores are thread-safe).
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "tdist/store.h"

namespace tdist::python {

class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {}

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
  c10::intrusive_ptr<::c10d::Store> store_;
};

}  // namespace tdist::python
