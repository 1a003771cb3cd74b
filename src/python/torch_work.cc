// TorchWork (torch_work.h): tdist Works as a c10d::Work, and error translation.
#include "torch_work.h"

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "tdist/error.h"

namespace tdist::python {
namespace {

// tdist's messages start "tdist: " already; others get it.
std::string with_prefix(const char* what) {
  const std::string msg = what;
  return msg.rfind("tdist", 0) == 0 ? msg : "tdist: " + msg;
}

template <typename E>
std::exception_ptr torch_error(const char* what) {
  return std::make_exception_ptr(
      E(c10::SourceLocation{__func__, __FILE__, __LINE__}, with_prefix(what)));
}

// torch.distributed.DistBackendError where this LibTorch has it (2.x), else RuntimeError.
std::exception_ptr backend_error(const char* what) {
#if TORCH_VERSION_MAJOR >= 2
  return torch_error<c10::DistBackendError>(what);
#else
  return torch_error<c10::Error>(what);
#endif
}

}  // namespace

std::exception_ptr to_torch_error(std::exception_ptr error) {
  if (error == nullptr) return nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return torch_error<c10::ValueError>(e.what());
  } catch (const PeerError& e) {
    return backend_error(e.what());
  } catch (const TimeoutError& e) {
    return backend_error(e.what());
  } catch (const DesyncError& e) {
    return backend_error(e.what());
  } catch (const Error& e) {
    return torch_error<c10::Error>(e.what());
  } catch (...) {
    return error;
  }
}

TorchWork::TorchWork(int rank, ::c10d::OpType type, std::vector<WorkPtr> works,
                     std::vector<at::Tensor> outputs, std::shared_ptr<ProgressThread> progress)
    : ::c10d::Work(rank, type),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      p2p_(type == ::c10d::OpType::SEND || type == ::c10d::OpType::RECV),
      progress_(std::move(progress)) {}

bool TorchWork::isCompleted() {
  for (const auto& w : works_) {
    if (!w->is_completed()) return false;
  }
  return true;
}

bool TorchWork::isSuccess() const {
  for (const auto& w : works_) {
    if (!w->is_success()) return false;
  }
  return true;
}

std::exception_ptr TorchWork::exception() const {
  for (const auto& w : works_) {
    if (auto e = w->exception()) return to_torch_error(e);
  }
  return nullptr;
}

bool TorchWork::wait(std::chrono::milliseconds timeout) {
  const Deadline deadline = timeout == kNoTimeout ? Deadline::never() : Deadline::after(timeout);
  torch_errors([&] {
    for (const auto& w : works_) w->wait(deadline);
    return 0;
  });
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> TorchWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    MutexLock lock(mu_);
    if (future_) return future_;
    future_ =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future = future_;
  }
  // Outside mu_: completing the future runs its callbacks, which may use this Work.
  // The last Work to finish completes the future, with the first error if any.
  struct Pending {
    std::atomic<size_t> left;
    std::vector<WorkPtr> works;
    std::vector<at::Tensor> outputs;
    c10::intrusive_ptr<c10::ivalue::Future> future;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = works_.size();
  pending->works = works_;
  pending->outputs = outputs_;
  pending->future = future;
  auto done = [pending] {
    if (pending->left.fetch_sub(1) != 1) return;
    for (const auto& w : pending->works) {
      if (auto e = w->exception()) {
        pending->future->setError(to_torch_error(e));
        return;
      }
    }
    pending->future->markCompleted(c10::IValue(pending->outputs));
  };
  if (works_.empty()) {
    future->markCompleted(c10::IValue(outputs_));
    return future;
  }
  for (const auto& w : works_) w->add_callback(done);
  // Point-to-point Works may move only while somebody waits on them.
  if (p2p_ && progress_) progress_->add(works_);
  return future;
}

}  // namespace tdist::python
