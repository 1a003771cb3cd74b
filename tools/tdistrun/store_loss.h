// StoreLossGuard: the agents' rendezvous store, wrapped so that losing it says so plainly.
//
// Forwards every Store call to the wrapped store; a PeerError (the store's connection broke,
// or the store cannot be reached) is raised again as a PeerError that names the store, says
// it was lost, and adds `hint` (for a TCPStore hosted by node 0: that node probably died,
// and --rdzv-backend etcd-v2 keeps a job alive through that). Other errors pass unchanged.
// Thread-safety and blocking: those of the wrapped store.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tdist/store.h"

namespace tdist::launcher {

class StoreLossGuard : public Store {
 public:
  // `what`: the store as the message names it ("the rendezvous store at 10.0.0.1:29400").
  StoreLossGuard(std::shared_ptr<Store> base, std::string what, std::string hint);

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
  template <typename F>
  auto guarded(F&& call) -> decltype(call());

  std::shared_ptr<Store> base_;
  std::string what_;
  std::string hint_;
};

}  // namespace tdist::launcher
