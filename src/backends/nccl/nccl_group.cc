// NcclProcessGroup (nccl_group.h): setup, the launch of operations, their completion, the
// watchdog and teardown.
#include "backends/nccl/nccl_group.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "backends/nccl/nccl_runtime.h"
#include "diag/error_context.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::backends::nccl {
namespace {

constexpr const char* kUniqueIdKey = "nccl/unique_id";
// How often the watchdog looks while operations are pending, and while none are.
constexpr auto kBusyTick = std::chrono::milliseconds(5);
constexpr auto kIdleTick = std::chrono::milliseconds(100);
// The longest sleep of a thread polling an event or NCCL's progress.
constexpr auto kLongestPause = std::chrono::microseconds(1000);

// Makes `device` the calling thread's current CUDA device (when it is not already). It is
// not restored afterwards: setting a thread's device back to one it never used would make
// a CUDA context there (CUDA 12 and later), costing memory on another rank's GPU.
void use_device(int device) {
  int current = -1;
  check_cuda(cudaGetDevice(&current), "nccl: cudaGetDevice");
  if (current != device) check_cuda(cudaSetDevice(device), "nccl: cudaSetDevice");
}

// The same for destructors and the abort path: errors are ignored.
void use_device_quietly(int device) noexcept {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) cudaSetDevice(device);
}

// Sleeps the next step of a 10 us doubling backoff, at most until `deadline`.
void pause(std::chrono::microseconds& step, Deadline deadline) {
  auto d = std::chrono::duration_cast<Clock::duration>(step);
  if (!deadline.is_never()) d = std::min<Clock::duration>(d, deadline.remaining());
  if (d > Clock::duration::zero()) std::this_thread::sleep_for(d);
  step = std::min(step * 2, kLongestPause);
}

ncclUniqueId agree_on_id(Store& store, int rank, Deadline deadline) {
  ncclUniqueId id{};
  if (rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "nccl: ncclGetUniqueId");
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store.set(kUniqueIdKey, Bytes(p, p + sizeof(id)));
    return id;
  }
  const Bytes value = store.get(kUniqueIdKey, deadline);
  TDIST_CHECK(value.size() == sizeof(id), Error, "nccl: the store's ", kUniqueIdKey, " holds ",
              value.size(), " bytes, not an ncclUniqueId (", sizeof(id),
              " bytes): another program uses this store's keys");
  std::memcpy(&id, value.data(), sizeof(id));
  return id;
}

}  // namespace

// ---- NcclWork ----

NcclWork::~NcclWork() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // released once it completed
}

void NcclWork::poll(Deadline deadline) {
  auto step = std::chrono::microseconds(10);
  bool on_device = false;
  while (!settled_.load(std::memory_order_acquire)) {
    std::shared_ptr<NcclProcessGroup> group = group_.lock();
    if (!group) return;  // being destroyed: its destructor settles this Work
    if (!on_device) {
      use_device_quietly(group->device());  // as for any call of the group
      on_device = true;
    }
    if (group->try_settle(*this)) return;
    group.reset();
    if (deadline.expired()) return;
    pause(step, deadline);
  }
}

// ---- Enqueuer ----

void Enqueuer::await(ncclResult_t rc, const char* what) const {
  check_nccl(rc, what, comm_);
  if (rc == ncclSuccess) return;  // NCCL has the call
  const Deadline deadline = Deadline::after(timeout_);
  auto step = std::chrono::microseconds(10);
  for (;;) {
    ncclResult_t state = ncclInProgress;
    check_nccl(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError", comm_);
    check_nccl(state, what, comm_);
    if (state == ncclSuccess) return;
    TDIST_CHECK(!abort_.load(std::memory_order_acquire), PeerError, what,
                ": the group was aborted while NCCL was taking the call");
    TDIST_CHECK(!deadline.expired(), TimeoutError, what, ": NCCL did not take the call within ",
                timeout_.count(), " ms (rank ", rank_,
                "; its peers may not have reached the same call)");
    pause(step, deadline);
  }
}

void Enqueuer::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                        DType dtype, const void* self_src, void* self_dst,
                        size_t self_bytes) const {
  if (self_bytes != 0 && self_src != self_dst) {
    check_cuda(cudaMemcpyAsync(self_dst, self_src, self_bytes, cudaMemcpyDeviceToDevice, stream_),
               "nccl: cudaMemcpyAsync of this rank's own block");
  }
  if (sends.empty() && recvs.empty()) return;
  const ncclDataType_t type = nccl_datatype(dtype);
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  // Inside a group NCCL only records the calls (ncclSuccess, or ncclInProgress in
  // non-blocking mode); the first failure stops the recording.
  ncclResult_t rc = ncclSuccess;
  auto fine = [&] { return rc == ncclSuccess || rc == ncclInProgress; };
  for (const Transfer& t : sends) {
    if (fine() && t.count != 0) rc = ncclSend(t.data, t.count, type, t.peer, comm_, stream_);
  }
  for (const Transfer& t : recvs) {
    if (fine() && t.count != 0) rc = ncclRecv(t.data, t.count, type, t.peer, comm_, stream_);
  }
  const ncclResult_t end = ncclGroupEnd();  // always: the group depth is per thread
  check_nccl(rc, "ncclSend/ncclRecv", comm_);
  await(end, "ncclGroupEnd");
}

void* Enqueuer::copy_of(const void* src, size_t bytes) const {
  void* p = nullptr;
  check_cuda(cudaMallocAsync(&p, bytes, stream_), "nccl: cudaMallocAsync");
  const cudaError_t rc = cudaMemcpyAsync(p, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  if (rc != cudaSuccess) cudaFreeAsync(p, stream_);
  check_cuda(rc, "nccl: cudaMemcpyAsync");
  return p;
}

// ---- NcclProcessGroup ----

NcclProcessGroup::NcclProcessGroup(int device, std::shared_ptr<Store> store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::vector<int> global_ranks)
    : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)),
      device_(device) {
  const Deadline deadline = Deadline::after(timeout);
  const std::string what =
      detail::str_cat("nccl: rank ", rank, "/", size, " on CUDA device ", device, ": ");
  use_device(device_);
  ncclComm_t comm = nullptr;
  try {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               what + "cudaStreamCreateWithFlags");
    check_cuda(cudaEventCreateWithFlags(&caller_done_, cudaEventDisableTiming),
               what + "cudaEventCreateWithFlags");
    check_cuda(cudaMalloc(&scratch_, sizeof(float)), what + "cudaMalloc");
    check_cuda(cudaMemset(scratch_, 0, sizeof(float)), what + "cudaMemset");
    const ncclUniqueId id = agree_on_id(*this->store(), rank, deadline);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    check_nccl(rc, what + "ncclCommInitRankConfig", comm);
    auto step = std::chrono::microseconds(10);
    while (rc == ncclInProgress) {
      check_nccl(ncclCommGetAsyncError(comm, &rc), what + "ncclCommGetAsyncError", comm);
      check_nccl(rc, what + "ncclCommInitRankConfig", comm);
      TDIST_CHECK(rc == ncclSuccess || !deadline.expired(), TimeoutError, what,
                  "the NCCL communicator was not ready within ", timeout.count(),
                  " ms: not every rank of the group reached its creation");
      if (rc == ncclInProgress) pause(step, deadline);
    }
  } catch (...) {
    if (comm != nullptr) ncclCommAbort(comm);
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (caller_done_ != nullptr) cudaEventDestroy(caller_done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    throw;
  }
  {
    MutexLock lock(launch_mu_);
    comm_ = comm;
  }
  notice_ = std::make_unique<FailureNotice>(this->store(), [this](const std::string& text) {
    fail(std::make_exception_ptr(
             PeerError(detail::str_cat("rank ", this->rank(), "/", this->size(),
                                       " (nccl): another rank of the group failed: ", text))),
         /*announce=*/false);
  });
  watchdog_ = std::thread([this] { watchdog(); });
  TDIST_LOG(kDebug) << "nccl: rank " << rank << "/" << size << " on CUDA device " << device
                    << ", NCCL " << nccl_runtime_version();
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    MutexLock lock(mu_);
    // Each pending operation ends by its deadline at the latest (the watchdog fails it).
    while (!pending_.empty()) cv_.wait(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  notice_.reset();  // no peer's notice fails the group after this
  use_device_quietly(device_);
  ncclComm_t comm = nullptr;
  {
    MutexLock lock(launch_mu_);
    std::swap(comm, comm_);
  }
  if (comm != nullptr) {
    // Finalize flushes NCCL's own pending work, non-blocking: poll it within the timeout,
    // then destroy; abort when it does not end.
    ncclResult_t rc = ncclCommFinalize(comm);
    const Deadline deadline = Deadline::after(timeout());
    auto step = std::chrono::microseconds(10);
    while (rc == ncclInProgress && !deadline.expired()) {
      if (ncclCommGetAsyncError(comm, &rc) != ncclSuccess) break;
      if (rc == ncclInProgress) pause(step, deadline);
    }
    if (rc == ncclSuccess) {
      ncclCommDestroy(comm);
    } else {
      ncclCommAbort(comm);
    }
  }
  cudaFree(scratch_);
  cudaEventDestroy(caller_done_);
  cudaStreamDestroy(stream_);
}

std::string NcclProcessGroup::where(const std::string& op, std::optional<uint64_t> seq) const {
  if (seq) return diag::describe(rank(), size(), "nccl", op, *seq);
  return detail::str_cat("rank ", rank(), "/", size(), " (nccl) ", op);
}

void NcclProcessGroup::check_buffer(const char* op, const char* name, const void* p,
                                    size_t count) const {
  if (p == nullptr || count == 0) return;
  use_device(device_);  // a thread new to CUDA would otherwise start on device 0
  cudaPointerAttributes attributes{};
  const cudaError_t rc = cudaPointerGetAttributes(&attributes, p);
  if (rc != cudaSuccess) cudaGetLastError();  // not sticky: clear it for later calls
  const std::string problem =
      rc == cudaSuccess ? buffer_problem(attributes.type, attributes.device, device_)
                        : std::string("not memory CUDA knows (") + cudaGetErrorString(rc) + ")";
  TDIST_CHECK(problem.empty(), InvalidArgument, op, ": ", name, " is ", problem,
              "; the nccl backend takes device memory of CUDA device ", device_,
              " (the group's device)");
}

std::exception_ptr NcclProcessGroup::failure() const {
  MutexLock lock(mu_);
  return failed_;
}

WorkPtr NcclProcessGroup::launch(const char* op, std::optional<uint64_t> seq,
                                 const Enqueue& enqueue) {
  auto work =
      std::make_shared<NcclWork>(op, seq, Deadline::after(timeout()),
                                 std::static_pointer_cast<NcclProcessGroup>(shared_from_this()));
  if (std::exception_ptr failed = failure()) {
    settle(*work, diag::add_context(failed, where(op, seq) + ": the group failed earlier: "));
    return work;
  }
  if (seq) note_started(*seq);
  std::exception_ptr error;
  {
    MutexLock lock(launch_mu_);
    try {
      TDIST_CHECK(comm_ != nullptr, PeerError, "the group's communicator was aborted");
      use_device(device_);
      check_cuda(cudaEventCreateWithFlags(&work->event_, cudaEventDisableTiming),
                 "nccl: cudaEventCreateWithFlags");
      // After what the caller queued on its stream (its inputs): CallerStream's, or the
      // legacy default stream.
      void* caller = CallerStream::current();
      check_cuda(cudaEventRecord(caller_done_, caller != nullptr ? static_cast<cudaStream_t>(caller)
                                                                 : cudaStreamLegacy),
                 "nccl: cudaEventRecord on the caller's stream");
      check_cuda(cudaStreamWaitEvent(stream_, caller_done_, 0), "nccl: cudaStreamWaitEvent");
      Enqueuer e(comm_, stream_, rank(), timeout(), abort_requested_);
      enqueue(e);
      check_cuda(cudaEventRecord(work->event_, stream_), "nccl: cudaEventRecord");
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) {
    // The communicator's state after a failed enqueue is unknown: the group fails.
    error = diag::add_context(error, where(op, seq) + ": ");
    fail(error);
    settle(*work, error);
    return work;
  }
  {
    MutexLock lock(mu_);
    pending_.push_back(work);
  }
  cv_.notify_all();
  return work;
}

bool NcclProcessGroup::try_settle(NcclWork& work) {
  if (work.settled_.load(std::memory_order_acquire)) return true;
  const cudaError_t rc = cudaEventQuery(work.event_);
  if (rc == cudaSuccess) {
    settle(work, nullptr);
    return true;
  }
  if (rc != cudaErrorNotReady) {
    cudaGetLastError();  // clears a non-sticky error for later calls
    fail(std::make_exception_ptr(PeerError(detail::str_cat(
        where(work.op(), work.seq_), ": the CUDA event failed: ", cudaGetErrorString(rc), " (",
        cudaGetErrorName(rc), ")"))));
  }
  if (std::exception_ptr failed = failure()) {
    settle(work, diag::add_context(failed, where(work.op(), work.seq_) + ": "));
    return true;
  }
  return false;
}

void NcclProcessGroup::settle(NcclWork& work, std::exception_ptr error) {
  if (work.settled_.exchange(true, std::memory_order_acq_rel)) return;
  if (work.seq_) note_finished(*work.seq_, error, "nccl");
  work.finish(std::move(error));
  cv_.notify_all();  // the watchdog drops it; a destructor may wait for that
}

void NcclProcessGroup::fail(std::exception_ptr error, bool announce) {
  {
    MutexLock lock(mu_);
    if (failed_) return;
    failed_ = error;
  }
  abort_requested_.store(true, std::memory_order_release);
  if (announce && notice_) notice_->announce(diag::what_of(error));
  TDIST_LOG(kWarn) << "nccl: " << diag::what_of(error) << "; aborting the NCCL communicator";
  {
    MutexLock lock(launch_mu_);
    if (comm_ != nullptr) {
      use_device_quietly(device_);
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }
  cv_.notify_all();
}

void NcclProcessGroup::abort() {
  fail(std::make_exception_ptr(
      PeerError(diag::describe(rank(), size(), "nccl", "abort", next_seq()) +
                ": the group was aborted by the user")));
}

void NcclProcessGroup::check_async_error() {
  std::exception_ptr error;
  {
    // A call holding the communicator polls NCCL itself; never wait behind it.
    if (!launch_mu_.try_lock()) return;
    MutexLock lock(launch_mu_, std::adopt_lock);
    if (comm_ == nullptr) return;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) state = rc;
    if (state != ncclSuccess && state != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      error = std::make_exception_ptr(PeerError(detail::str_cat(
          where("watchdog", std::nullopt), ": NCCL reported an asynchronous error: ",
          ncclGetErrorString(state), (last != nullptr && *last != '\0' ? " (" : ""),
          (last != nullptr ? last : ""), (last != nullptr && *last != '\0' ? ")" : ""))));
    }
  }
  if (error) fail(error);
}

void NcclProcessGroup::watchdog() {
  try {
    use_device(device_);
  } catch (...) {
    fail(std::current_exception());
  }
  for (;;) {
    std::vector<std::shared_ptr<NcclWork>> pending;
    {
      MutexLock lock(mu_);
      while (!pending_.empty() && pending_.front()->settled_.load(std::memory_order_acquire)) {
        pending_.pop_front();
      }
      if (pending_.empty()) {
        cv_.notify_all();  // a destructor waits for this
        if (stopping_) return;
        cv_.wait_until(mu_, Clock::now() + kIdleTick);
      } else {
        cv_.wait_until(mu_, Clock::now() + kBusyTick);
      }
      pending.assign(pending_.begin(), pending_.end());
    }
    notice_->watch(!pending.empty());  // outside mu_: a peer's notice takes it in fail()
    // Completions, in stream order: the first not ready ends the pass.
    for (const auto& work : pending) {
      if (!try_settle(*work)) {
        if (work->deadline_.expired()) {
          fail(std::make_exception_ptr(TimeoutError(detail::str_cat(
              where(work->op(), work->seq_), ": did not finish within ", timeout().count(),
              " ms (the group's timeout); its peers may not have reached it or a peer died"))));
          try_settle(*work);
          continue;  // settles the rest with the failure
        }
        break;
      }
    }
    check_async_error();
  }
}

}  // namespace tdist::backends::nccl
