// TorchWork (torch_work.h): tdist Works as a c10d::Work, and error translation.
#include "torch_work.h"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

// A timeout in the words torch's callers look for (" Timed out "), tdist's text after them.
std::string timed_out(const char* what) {
  std::string_view rest = what;
  if (rest.rfind("tdist: ", 0) == 0) rest.remove_prefix(7);
  return "tdist: Timed out while waiting: " + std::string(rest);
}

// The profiler's name of a call ("tdist:all_reduce", as gloo's "gloo:all_reduce"), when
// the profiler (or another RecordFunction callback) is on; else null: no event, no cost.
const char* profiled(::c10d::OpType type, const std::vector<at::Tensor>* inputs) {
  if (inputs == nullptr || !profiler_on()) return nullptr;
  using ::c10d::OpType;
  switch (type) {
    case OpType::BROADCAST:
      return "tdist:broadcast";
    case OpType::ALLREDUCE:
    case OpType::ALLREDUCE_COALESCED:
      return "tdist:all_reduce";
    case OpType::REDUCE:
      return "tdist:reduce";
    case OpType::ALLGATHER:
    case OpType::ALLGATHER_COALESCED:
      return "tdist:all_gather";
    case OpType::_ALLGATHER_BASE:
      return "tdist:all_gather_into_tensor";
    case OpType::GATHER:
      return "tdist:gather";
    case OpType::SCATTER:
      return "tdist:scatter";
    case OpType::REDUCE_SCATTER:
      return "tdist:reduce_scatter";
    case OpType::_REDUCE_SCATTER_BASE:
      return "tdist:reduce_scatter_tensor";
    case OpType::ALLTOALL:
    case OpType::ALLTOALL_BASE:
      return "tdist:all_to_all";
    case OpType::BARRIER:
      return "tdist:barrier";
    case OpType::SEND:
      return "tdist:send";
    case OpType::RECV:
      return "tdist:recv";
    case OpType::RECVANYSOURCE:
      return "tdist:recvAnySource";
    default:
      return "tdist:collective";
  }
}

// c10d::Work's optional inputs (LibTorch 1.13 has c10's own optional).
#if TORCH_VERSION_MAJOR >= 2
using OptionalTensors = std::optional<std::vector<at::Tensor>>;
#else
using OptionalTensors = c10::optional<std::vector<at::Tensor>>;
#endif

OptionalTensors profiled_inputs(::c10d::OpType type, const std::vector<at::Tensor>* inputs) {
  if (profiled(type, inputs) == nullptr) return OptionalTensors();
  return OptionalTensors(*inputs);
}

// Whether the Work may hold point-to-point operations: endCoalescing's may hold sends and
// receives too.
bool is_p2p(::c10d::OpType type) {
  using ::c10d::OpType;
#if TORCH_VERSION_MAJOR >= 2
  if (type == OpType::COALESCED) return true;
#endif
  return type == OpType::SEND || type == OpType::RECV || type == OpType::RECVANYSOURCE;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool profiler_on() {
  // The dispatcher's own test: a thread-local copy of the callbacks, rebuilt when they
  // change (at::hasCallbacks locks the global list).
  return at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value();
}

std::exception_ptr to_torch_error(std::exception_ptr error) {
  if (error == nullptr) return nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const InvalidArgument& e) {
    return torch_error<c10::ValueError>(e.what());
  } catch (const PeerError& e) {
    return backend_error(e.what());
  } catch (const TimeoutError& e) {
    return backend_error(timed_out(e.what()).c_str());
  } catch (const DesyncError& e) {
    return backend_error(e.what());
  } catch (const Error& e) {
    return torch_error<c10::Error>(e.what());
  } catch (...) {
    return error;
  }
}

TorchWork::TorchWork(int rank, ::c10d::OpType type, std::vector<WorkPtr> works,
                     std::vector<at::Tensor> outputs, std::shared_ptr<ProgressThread> progress,
                     Deadline deadline, bool timed, const std::vector<at::Tensor>* inputs)
    : ::c10d::Work(rank, type, profiled(type, inputs ? inputs : &outputs),
                   profiled_inputs(type, inputs ? inputs : &outputs)),
      works_(std::move(works)),
      outputs_(std::move(outputs)),
      p2p_(is_p2p(type)),
      progress_(std::move(progress)),
      deadline_(deadline),
      issued_ns_(timed ? steady_ns() : 0) {
  // The profiler's event (c10d::Work made it when the profiler runs) and the timing end
  // when the last operation finishes, on the thread that finishes it.
  std::function<void()> end_event = std::move(recordFunctionEndCallback_);
  recordFunctionEndCallback_ = nullptr;
  if (timed) finished_ns_ = std::make_shared<std::atomic<int64_t>>(0);
  if (!timed && !end_event) return;
  auto done = [finished = finished_ns_, end_event = std::move(end_event)] {
    if (finished) finished->store(steady_ns());
    if (end_event) end_event();
  };
  if (works_.empty()) {
    done();
    return;
  }
  auto left = std::make_shared<std::atomic<size_t>>(works_.size());
  for (const auto& w : works_) {
    w->add_callback([left, done] {
      if (left->fetch_sub(1) == 1) done();
    });
  }
}

int TorchWork::sourceRank() const {
  TDIST_CHECK(opType_ == ::c10d::OpType::RECVANYSOURCE && works_.size() == 1, InvalidArgument,
              "sourceRank: only a receive from any source has one");
  return torch_errors([&] { return works_[0]->source_rank(); });
}

#if TORCH_VERSION_MAJOR >= 2
float TorchWork::getDuration() const {
  TORCH_CHECK(finished_ns_ != nullptr,
              "getDuration: collective timing is off for this group (enableCollectivesTiming)");
  const int64_t end = finished_ns_->load();
  TORCH_CHECK(end != 0, "getDuration: the operation has not completed");
  return static_cast<float>(static_cast<double>(end - issued_ns_) / 1e6);
}
#endif

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
  const Deadline deadline = Deadline::earliest(
      deadline_, timeout == kNoTimeout ? Deadline::never() : Deadline::after(timeout));
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
