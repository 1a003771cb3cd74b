// Helpers shared by the rendezvous tests and rendezvous_worker: a clean environment, a
// free port, and a minimal test backend ("fake") registered through the public registry.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support/scoped_env.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/process_group.h"

namespace tdist::rdzv_test {

// Every variable the rendezvous layer reads.
inline const std::vector<std::string>& rendezvous_env_vars() {
  static const std::vector<std::string> kVars = {"MASTER_ADDR",
                                                 "MASTER_PORT",
                                                 "RANK",
                                                 "WORLD_SIZE",
                                                 "OMPI_COMM_WORLD_RANK",
                                                 "OMPI_COMM_WORLD_SIZE",
                                                 "PMI_RANK",
                                                 "PMI_SIZE",
                                                 "SLURM_PROCID",
                                                 "SLURM_NTASKS",
                                                 "TDIST_USE_AGENT_STORE",
                                                 "TDIST_AGENT_STORE",
                                                 "TDIST_AGENT_STORE_PREFIX",
                                                 "TORCHELASTIC_USE_AGENT_STORE",
                                                 "TORCHELASTIC_RESTART_COUNT",
                                                 "TDIST_TIMEOUT",
                                                 "TDIST_STORE_BIND"};
  return kVars;
}

// Clears the rendezvous variables for the test's lifetime and restores them afterwards.
class ScopedEnv : public test_support::ScopedEnv {
 public:
  ScopedEnv() {
    for (const std::string& name : rendezvous_env_vars()) unset(name);
  }
};

// A port that was free a moment ago (bound on every IPv4 address, then closed).
inline uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// The smallest possible backend: a ProcessGroup with no collectives.
// A backend registered by the test program itself, as a user would: it reports the
// name "fake" and forwards every operation to a "tcp" group over the same store,
// created on the first operation (so that constructing one connects nothing).
class FakeProcessGroup : public ProcessGroup {
 public:
  FakeProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   std::chrono::milliseconds timeout, std::vector<int> global_ranks = {})
      : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)) {}
  std::string backend_name() const override { return "fake"; }

  void abort() override { inner().abort(); }

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> sub_store, int sub_rank,
                                              int sub_size, std::vector<int> globals) override {
    return std::make_shared<FakeProcessGroup>(std::move(sub_store), sub_rank, sub_size, timeout(),
                                              std::move(globals));
  }

  WorkPtr do_all_reduce(uint64_t, const void* s, void* r, size_t n, DType t, ReduceOp op) override {
    return inner().all_reduce(s, r, n, t, op);
  }
  WorkPtr do_broadcast(uint64_t, void* d, size_t n, DType t, int root) override {
    return inner().broadcast(d, n, t, root);
  }
  WorkPtr do_reduce(uint64_t, const void* s, void* r, size_t n, DType t, ReduceOp op,
                    int root) override {
    return inner().reduce(s, r, n, t, op, root);
  }
  WorkPtr do_all_gather(uint64_t, const void* s, void* r, size_t n, DType t) override {
    return inner().all_gather(s, r, n, t);
  }
  WorkPtr do_all_gatherv(uint64_t, const void* s, size_t n, void* r, std::span<const size_t> counts,
                         DType t) override {
    return inner().all_gatherv(s, n, r, counts, t);
  }
  WorkPtr do_gather(uint64_t, const void* s, void* r, size_t n, DType t, int root) override {
    return inner().gather(s, r, n, t, root);
  }
  WorkPtr do_scatter(uint64_t, const void* s, void* r, size_t n, DType t, int root) override {
    return inner().scatter(s, r, n, t, root);
  }
  WorkPtr do_reduce_scatter(uint64_t, const void* s, void* r, size_t n, DType t,
                            ReduceOp op) override {
    return inner().reduce_scatter(s, r, n, t, op);
  }
  WorkPtr do_all_to_all(uint64_t, const void* s, void* r, size_t n, DType t) override {
    return inner().all_to_all(s, r, n, t);
  }
  WorkPtr do_all_to_allv(uint64_t, const void* s, std::span<const size_t> sc, void* r,
                         std::span<const size_t> rc, DType t) override {
    return inner().all_to_allv(s, sc, r, rc, t);
  }
  WorkPtr do_barrier(uint64_t) override { return inner().barrier(); }
  WorkPtr do_batch_isend_irecv(std::span<const P2POp> ops) override {
    return inner().batch_isend_irecv(ops);
  }

 private:
  ProcessGroup& inner() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!inner_) inner_ = backend_factory("tcp")(store(), rank(), size(), timeout());
    return *inner_;
  }
  std::mutex mu_;
  std::shared_ptr<ProcessGroup> inner_;  // guarded by mu_
};

inline constexpr char kFakeBackend[] = "fake";

// Registers "fake" once per process.
inline void register_fake_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(kFakeBackend, [](std::shared_ptr<Store> store, int rank, int world_size,
                                      std::chrono::milliseconds timeout) {
      return std::make_shared<FakeProcessGroup>(std::move(store), rank, world_size, timeout);
    });
  });
}

}  // namespace tdist::rdzv_test
