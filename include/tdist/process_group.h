// ProcessGroup: a set of ranks that run collectives together, created by a backend.
//
// This is the abstract base every backend derives from (backends register a factory by
// name, backend.h; this class never names them). It holds what every group has: its
// rank, size, store (its own namespace in the job's store, owned jointly with whoever
// else holds it) and timeout (the deadline of its blocking operations). The collective
// API is declared here by a later layer; operations on one group must be issued in the
// same order on every rank.
//
// Thread-safety: the accessors are const and may be called from any thread. Construction
// validates its arguments (InvalidArgument: null store, size < 1, rank outside 0..size-1,
// negative timeout) and blocks on nothing. Destroying a group releases its store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tdist/store.h"

namespace tdist {

class ProcessGroup {
 public:
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The backend's registered name, e.g. "tcp".
  virtual std::string backend_name() const = 0;
  const std::shared_ptr<Store>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  ProcessGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tdist
