// Op's description and ShmRequest's wait/test/cancel (the waiting itself is the Engine's).
#include "transport/shm/request.h"

#include <chrono>

#include "tdist/error.h"
#include "transport/shm/engine.h"

namespace tdist::transport::shm {

std::string Op::describe() const {
  return detail::str_cat(is_send ? "send to" : "receive from", " rank ", peer, " (tag 0x", std::hex,
                         tag, std::dec, ", ", bytes, " bytes)");
}

ShmRequest::~ShmRequest() {
  if (!op_->done()) engine_->cancel(*op_);
}

void ShmRequest::wait(Deadline deadline) {
  if (!op_->done()) {
    const auto start = Clock::now();
    if (!engine_->wait_for(*op_, deadline)) {
      double secs = std::chrono::duration<double>(Clock::now() - start).count();
      TDIST_THROW(TimeoutError, "rank ", engine_->rank(), ": ", op_->describe(),
                  " did not complete within its deadline (waited ",
                  static_cast<int64_t>(secs * 1000), " ms); the request is still pending");
    }
  }
  if (op_->error()) std::rethrow_exception(op_->error());
}

bool ShmRequest::test() {
  if (!op_->done()) engine_->try_progress(*op_);
  if (!op_->done()) return false;
  if (op_->error()) std::rethrow_exception(op_->error());
  return true;
}

}  // namespace tdist::transport::shm
