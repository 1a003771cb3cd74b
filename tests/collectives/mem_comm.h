// MemComm: an in-memory transport::Comm for tests. A MemWorld holds N ranks that run as
// threads of one process; each (src, dst) pair has a mailbox of messages that arrived
// before their receive was posted and of receives waiting for their message, matched by
// tag in posting order as comm.h specifies. Sends copy eagerly and complete at once. A
// receive whose message has another length fails with DesyncError (and aborts the
// world). Destroying a pending receive withdraws it (comm.h), so no later message is
// copied into its buffer. abort() on any rank fails every pending and later request on
// every rank.
// Thread-safe: one mutex guards the world. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tdist/error.h"
#include "transport/comm.h"

namespace tdist::testing {

class MemWorld {
 public:
  explicit MemWorld(int size) : size_(size), boxes_(static_cast<size_t>(size * size)) {}

  int size() const { return size_; }

  // Messages and bytes ever sent (tests of traffic).
  size_t messages_sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }

  struct State {
    bool done = false;
    std::exception_ptr error;
  };

  class MemRequest : public transport::Request {
   public:
    // box: the mailbox of a posted receive, withdrawn on destruction; -1 for the others.
    MemRequest(MemWorld& world, std::shared_ptr<State> state, int box = -1)
        : world_(world), state_(std::move(state)), box_(box) {}
    MemRequest(const MemRequest&) = delete;
    MemRequest& operator=(const MemRequest&) = delete;
    ~MemRequest() override {
      if (box_ < 0) return;
      std::lock_guard<std::mutex> lock(world_.mu_);
      std::erase_if(world_.boxes_[static_cast<size_t>(box_)].posted,
                    [&](const Posted& p) { return p.state == state_; });
    }
    void wait(Deadline deadline) override {
      std::unique_lock<std::mutex> lock(world_.mu_);
      auto ready = [&] { return state_->done || world_.error_ != nullptr; };
      if (deadline.is_never()) {
        world_.cv_.wait(lock, ready);
      } else if (!world_.cv_.wait_until(lock, deadline.time(), ready)) {
        TDIST_THROW(TimeoutError, "MemComm: request timed out");
      }
      rethrow_locked();
    }
    bool test() override {
      std::lock_guard<std::mutex> lock(world_.mu_);
      if (!state_->done && world_.error_ == nullptr) return false;
      rethrow_locked();
      return true;
    }

   private:
    void rethrow_locked() {
      if (state_->error) std::rethrow_exception(state_->error);
      if (!state_->done) std::rethrow_exception(world_.error_);
    }
    MemWorld& world_;
    std::shared_ptr<State> state_;
    int box_;
  };

  transport::RequestPtr send(int src, int dst, uint64_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    check_peer(dst);
    auto state = std::make_shared<State>();
    ++messages_;
    Box& box = box_of(src, dst);
    for (auto it = box.posted.begin(); it != box.posted.end(); ++it) {
      if (it->tag != tag) continue;
      deliver_locked(*it, static_cast<const uint8_t*>(data), bytes);
      box.posted.erase(it);
      state->done = true;
      return std::make_unique<MemRequest>(*this, state);
    }
    const auto* p = static_cast<const uint8_t*>(data);
    box.arrived.push_back(Message{tag, std::vector<uint8_t>(p, p + bytes)});
    state->done = true;
    return std::make_unique<MemRequest>(*this, state);
  }

  transport::RequestPtr recv(int src, int dst, uint64_t tag, void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    check_peer(src);
    auto state = std::make_shared<State>();
    Box& box = box_of(src, dst);
    Posted posted{tag, data, bytes, state};
    for (auto it = box.arrived.begin(); it != box.arrived.end(); ++it) {
      if (it->tag != tag) continue;
      deliver_locked(posted, it->data.data(), it->data.size());
      box.arrived.erase(it);
      return std::make_unique<MemRequest>(*this, state);
    }
    box.posted.push_back(std::move(posted));
    return std::make_unique<MemRequest>(*this, state, src * size_ + dst);
  }

  void abort(std::exception_ptr reason) {
    std::lock_guard<std::mutex> lock(mu_);
    abort_locked(reason ? reason
                        : std::make_exception_ptr(PeerError("MemComm: aborted by a rank")));
  }

  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  struct Message {
    uint64_t tag;
    std::vector<uint8_t> data;
  };
  struct Posted {
    uint64_t tag;
    void* data;
    size_t bytes;
    std::shared_ptr<State> state;
  };
  struct Box {
    std::deque<Message> arrived;
    std::deque<Posted> posted;
  };

  Box& box_of(int src, int dst) { return boxes_[static_cast<size_t>(src * size_ + dst)]; }

  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_) TDIST_THROW(InvalidArgument, "MemComm: bad peer ", peer);
  }

  void deliver_locked(Posted& to, const uint8_t* data, size_t bytes) {
    if (bytes != to.bytes) {
      auto e = std::make_exception_ptr(DesyncError("MemComm: message of " + std::to_string(bytes) +
                                                   " bytes for a receive of " +
                                                   std::to_string(to.bytes)));
      to.state->error = e;
      abort_locked(e);
      return;
    }
    if (bytes > 0) std::memcpy(to.data, data, bytes);
    to.state->done = true;
    cv_.notify_all();
  }

  void abort_locked(std::exception_ptr reason) {
    if (error_ == nullptr) error_ = reason;
    cv_.notify_all();
  }

  const int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Box> boxes_;
  std::exception_ptr error_;
  size_t messages_ = 0;
};

class MemComm : public transport::Comm {
 public:
  MemComm(MemWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  transport::RequestPtr isend(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return world_.send(rank_, peer, tag, data, bytes);
  }
  transport::RequestPtr irecv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return world_.recv(peer, rank_, tag, data, bytes);
  }
  void abort(std::exception_ptr reason) override { world_.abort(std::move(reason)); }
  std::exception_ptr error() const override { return world_.error(); }

 private:
  MemWorld& world_;
  int rank_;
};

// Runs fn(comm) on `size` threads, one per rank, and returns each rank's exception (null
// when it returned normally).
inline std::vector<std::exception_ptr> run_ranks(int size,
                                                 const std::function<void(transport::Comm&)>& fn,
                                                 MemWorld* world_out = nullptr) {
  MemWorld local(size);
  MemWorld& world = world_out != nullptr ? *world_out : local;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      MemComm comm(world, r);
      try {
        fn(comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Like run_ranks, but fails the test with the first rank's error.
inline void run_ranks_ok(int size, const std::function<void(transport::Comm&)>& fn) {
  auto errors = run_ranks(size, fn);
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << " of " << size << ": " << e.what();
    }
  }
}

}  // namespace tdist::testing
