// Op's description and CoreRequest's wait/test/cancel (the waiting itself is the Engine's).
#include "transport/core/op.h"

#include <chrono>

#include "core/coarse_clock.h"
#include "tdist/error.h"
#include "transport/core/engine.h"

namespace tdist::transport::core {

std::string Op::describe() const {
  if (peer == kAnySource) {
    const int from = source();
    return detail::str_cat("receive from any rank (",
                           from >= 0 ? detail::str_cat("matched to rank ", from, "; ") : "",
                           "tag 0x", std::hex, tag, std::dec, ", ", bytes, " bytes)");
  }
  return detail::str_cat(is_send ? "send to" : "receive from", " rank ", peer, " (tag 0x", std::hex,
                         tag, std::dec, ", ", bytes, " bytes)");
}

CoreRequest::~CoreRequest() {
  if (op_ && engine_ != nullptr && !op_->done()) engine_->cancel(*op_);
}

void CoreRequest::wait(Deadline deadline) {
  if (!op_) return;
  if (!op_->done()) {
    const auto start = tdist::core::coarse_now();  // for the error text only
    if (!engine_->wait_for(*op_, deadline)) {
      double secs = std::chrono::duration<double>(tdist::core::coarse_now() - start).count();
      TDIST_THROW(TimeoutError, "rank ", engine_->rank(), ": ", op_->describe(),
                  " did not complete within its deadline (waited ",
                  static_cast<int64_t>(secs * 1000), " ms); the request is still pending");
    }
  }
  if (op_->error()) std::rethrow_exception(op_->error());
}

int CoreRequest::source() const {
  if (!op_ || op_->is_send || !op_->done() || op_->error()) return -1;
  return op_->source();
}

bool CoreRequest::test() {
  if (!op_) return true;
  if (!op_->done()) engine_->try_progress(*op_);
  if (!op_->done()) return false;
  if (op_->error()) std::rethrow_exception(op_->error());
  return true;
}

}  // namespace tdist::transport::core
