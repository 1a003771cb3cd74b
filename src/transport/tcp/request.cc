// Completion (futex-backed one-shot flag) and TcpRequest's wait/test/cancel.
#include "transport/tcp/request.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <climits>

#include "tdist/error.h"
#include "transport/tcp/peer.h"

namespace tdist::transport::tcp {
namespace {

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

std::string describe(const Op& op) {
  return detail::str_cat(op.is_send ? "send to" : "receive from", " rank ",
                         op.peer != nullptr ? op.peer->rank() : -1, " (tag 0x", std::hex, op.tag,
                         std::dec, ", ", op.bytes, " bytes)");
}

}  // namespace

void Completion::complete(std::exception_ptr error) {
  error_ = std::move(error);
  uint32_t old = word_.fetch_or(kDone, std::memory_order_acq_rel);
  if ((old & kSleeping) != 0) futex(&word_, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
}

bool Completion::sleep_until_done(Deadline deadline) {
  uint32_t w = word_.load(std::memory_order_acquire);
  while ((w & kDone) == 0) {
    if ((w & kSleeping) == 0) {
      if (!word_.compare_exchange_weak(w, w | kSleeping, std::memory_order_acq_rel)) continue;
      w |= kSleeping;
    }
    timespec ts{};
    const timespec* timeout = nullptr;
    if (!deadline.is_never()) {
      auto left = deadline.time() - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
      timeout = &ts;
    }
    futex(&word_, FUTEX_WAIT_PRIVATE, w, timeout);
    w = word_.load(std::memory_order_acquire);
  }
  return true;
}

TcpRequest::~TcpRequest() {
  if (op_->peer != nullptr && !op_->completion.done()) op_->peer->cancel(*op_);
}

void TcpRequest::wait(Deadline deadline) {
  Completion& c = op_->completion;
  if (!c.done()) {
    const auto start = Clock::now();
    bool done =
        op_->peer != nullptr ? op_->peer->wait_for(*op_, deadline) : c.sleep_until_done(deadline);
    if (!done) {
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      TDIST_THROW(TimeoutError, "rank ", op_->peer != nullptr ? op_->peer->self_rank() : -1, ": ",
                  describe(*op_), " did not complete within its deadline (waited ",
                  static_cast<int64_t>(secs * 1000), " ms); the request is still pending");
    }
  }
  if (c.error()) std::rethrow_exception(c.error());
}

bool TcpRequest::test() {
  Completion& c = op_->completion;
  if (!c.done() && op_->peer != nullptr) op_->peer->try_progress(*op_);
  if (!c.done()) return false;
  if (c.error()) std::rethrow_exception(c.error());
  return true;
}

RequestPtr failed_request(bool send, uint64_t tag, size_t bytes, std::exception_ptr error) {
  auto op = std::make_shared<Op>(nullptr, send, tag, nullptr, bytes);
  op->completion.complete(std::move(error));
  return std::make_unique<TcpRequest>(std::move(op));
}

}  // namespace tdist::transport::tcp
