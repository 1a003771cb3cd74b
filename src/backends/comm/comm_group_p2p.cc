// CommProcessGroup's point-to-point operations (comm_group.h), receives from any source
// included: posted straight to the transport from the calling thread; their Work completes
// when the transport's requests do, checked whenever the Work is waited on or polled. A
// single receive's Work takes its request's source (Work::source_rank).
#include <utility>

#include "backends/comm/comm_group.h"
#include "core/block_cache.h"
#include "core/coarse_clock.h"
#include "diag/error_context.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist::backends {
namespace {

// Its device messages are complete, copied, when the requests are (cuda_ipc): no device
// work follows them on the group's stream, so it has no event.
class RequestWork : public Work, public DeviceWork {
 public:
  // `where` names the operation in errors ("rank 0/2 (shm) isend"); it is written out only
  // when an error needs it, so a short message costs no string formatting.
  RequestWork(const char* op, int rank, int size, const std::string& backend,
              std::vector<transport::RequestPtr> requests, Deadline op_deadline)
      : Work(op),
        rank_(rank),
        size_(size),
        backend_(backend),
        requests_(std::move(requests)),
        op_deadline_(op_deadline) {}

 protected:
  void* cuda_event() const override { return nullptr; }

 protected:
  // Finishes outside poll_mu_: finish() runs callbacks, which may poll this Work again.
  void poll(Deadline deadline) override TDIST_EXCLUDES(poll_mu_) {
    std::exception_ptr error;
    {
      MutexLock lock(poll_mu_);
      const bool just_test = !deadline.is_never() && deadline.time() <= Clock::now();
      try {
        while (next_ < requests_.size()) {
          transport::Request& r = *requests_[next_];
          if (just_test) {
            if (!r.test()) return;
          } else {
            r.wait(Deadline::earliest(deadline, op_deadline_));
          }
          ++next_;
        }
        if (requests_.size() == 1) set_source_rank(requests_.front()->source());
      } catch (const TimeoutError&) {
        // The caller's own deadline only ends this wait; the operation's ends the op.
        if (!op_deadline_.expired()) return;
        error = diag::add_context(std::current_exception(), where() + ": ");
      } catch (...) {
        error = diag::add_context(std::current_exception(), where() + ": ");
      }
    }
    finish(error);
  }

 private:
  std::string where() const {
    return detail::str_cat("rank ", rank_, "/", size_, " (", backend_, ") ", op());
  }

  const int rank_;
  const int size_;
  const std::string backend_;
  Mutex poll_mu_;
  std::vector<transport::RequestPtr> requests_ TDIST_GUARDED_BY(poll_mu_);
  size_t next_ TDIST_GUARDED_BY(poll_mu_) = 0;  // first request not yet complete
  const Deadline op_deadline_;
};

}  // namespace

WorkPtr CommProcessGroup::do_batch_isend_irecv(std::span<const P2POp> ops) {
  std::vector<transport::RequestPtr> requests;
  requests.reserve(ops.size());
  const MemoryKind memory = device_ ? device_->memory() : MemoryKind::kHost;
  if (device_) device_->order_after_caller();  // sends are described after the caller's work
  for (const P2POp& op : ops) {
    const size_t bytes = op.count * dtype_size(op.dtype);
    const uint64_t tag = transport::p2p_tag(op.tag);
    requests.push_back(op.kind == P2POp::Kind::kSend
                           ? comm_->isend_on(memory, op.peer, tag, op.data, bytes)
                           : comm_->irecv_on(memory, op.peer, tag, op.data, bytes));
  }
  return std::allocate_shared<RequestWork>(core::CachingAllocator<RequestWork>(), p2p_name(ops),
                                           rank(), size(), backend_, std::move(requests),
                                           core::coarse_deadline_after(timeout()));
}

WorkPtr CommProcessGroup::do_irecv_any(void* data, size_t count, DType dtype, uint32_t tag) {
  const MemoryKind memory = device_ ? device_->memory() : MemoryKind::kHost;
  if (device_) device_->order_after_caller();  // as batch_isend_irecv's receives
  std::vector<transport::RequestPtr> requests;
  requests.push_back(
      comm_->irecv_any_on(memory, transport::p2p_tag(tag), data, count * dtype_size(dtype)));
  return std::allocate_shared<RequestWork>(core::CachingAllocator<RequestWork>(), "irecv_any",
                                           rank(), size(), backend_, std::move(requests),
                                           core::coarse_deadline_after(timeout()));
}

}  // namespace tdist::backends
