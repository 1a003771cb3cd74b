// CommProcessGroup (comm_group.h): the ordered worker and the collectives.
#include "backends/comm/comm_group.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "collectives/collectives.h"
#include "core/block_cache.h"
#include "core/coarse_clock.h"
#include "diag/error_context.h"
#include "diag/status.h"
#include "tdist/error.h"
#include "transport/context_comm.h"

namespace tdist::backends {
namespace {

// How long the worker leaves a new operation to its caller: `all_reduce(...)->wait()` from
// C++, or torch.distributed's synchronous calls through Python, claim it well within this,
// and then run it on their own thread with no hand-off. Work nobody waits on starts this
// much later, which the compute it overlaps with (DDP's backward) hides.
constexpr std::chrono::microseconds kClaimDelay(200);

// The group's store key where a rank that found a desync leaves its text, so that a peer
// whose connection broke before the abort notice arrived reports the desync too.
constexpr const char* kDesyncKey = "desync";
// How long a rank whose operation failed with PeerError looks for that text. The rank that
// found the desync writes it before it aborts, or (when its transport aborted by itself)
// right after.
constexpr auto kDesyncLookup = std::chrono::milliseconds(250);

Bytes text_bytes(const std::string& text) { return Bytes(text.begin(), text.end()); }

size_t bytes_of(size_t count, DType dtype) { return count * dtype_size(dtype); }

size_t total(std::span<const size_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), size_t{0});
}

std::vector<size_t> to_bytes(std::span<const size_t> counts, DType dtype) {
  std::vector<size_t> out(counts.begin(), counts.end());
  for (size_t& c : out) c *= dtype_size(dtype);
  return out;
}

// all_to_allv with `send` and `recv` allowed to overlap (the in-place form, send == recv):
// the algorithm needs disjoint buffers, so an overlapping send is copied first.
void all_to_allv_any(const coll::Ctx& ctx, const void* send, std::span<const size_t> send_bytes,
                     void* recv, std::span<const size_t> recv_bytes) {
  const auto* s = static_cast<const uint8_t*>(send);
  const auto* r = static_cast<const uint8_t*>(recv);
  const size_t sn = total(send_bytes);
  const size_t rn = total(recv_bytes);
  if (sn == 0 || rn == 0 || s + sn <= r || r + rn <= s) {
    coll::all_to_allv(ctx, send, send_bytes, recv, recv_bytes);
    return;
  }
  if (ctx.device != nullptr) {  // device buffers: the copy in device scratch
    struct Copy {
      coll::DeviceOps& ops;
      size_t bytes;
      void* data = ops.allocate(bytes);
      ~Copy() { ops.release(data, bytes); }
    } copy{*ctx.device, sn};
    ctx.device->copy(copy.data, send, sn);
    coll::all_to_allv(ctx, copy.data, send_bytes, recv, recv_bytes);
    return;
  }
  std::vector<uint8_t> copy(s, s + sn);
  coll::all_to_allv(ctx, copy.data(), send_bytes, recv, recv_bytes);
}

}  // namespace

CommProcessGroup::CommProcessGroup(std::string backend, CommFactory factory,
                                   std::shared_ptr<Store> store, int rank, int size,
                                   std::chrono::milliseconds timeout, std::vector<int> global_ranks,
                                   std::shared_ptr<CommDevice> device,
                                   std::shared_ptr<transport::Comm> comm)
    : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)),
      backend_(std::move(backend)),
      factory_(std::move(factory)),
      device_(std::move(device)),
      comm_(comm ? std::move(comm) : factory_(this->store(), rank, size, timeout)),
      settings_(coll::CollectiveSettings::from_environment()),
      device_settings_(device_settings(settings_)),
      ops_(kClaimDelay, timeout) {
  TDIST_CHECK(comm_ != nullptr, Error, backend_, ": the transport factory returned null");
}

CommProcessGroup::~CommProcessGroup() { ops_.stop(); }

std::shared_ptr<ProcessGroup> CommProcessGroup::make_subgroup(std::shared_ptr<Store> store,
                                                              int rank, int size,
                                                              std::vector<int> global_ranks) {
  return std::make_shared<CommProcessGroup>(backend_, factory_, std::move(store), rank, size,
                                            timeout(), std::move(global_ranks), device_);
}

std::shared_ptr<ProcessGroup> CommProcessGroup::make_split_subgroup(std::shared_ptr<Store> store,
                                                                    const std::vector<int>& members,
                                                                    std::vector<int> global_ranks) {
  std::shared_ptr<transport::Comm> comm =
      transport::make_context_comm(comm_, members, *store, Deadline::after(timeout()));
  if (!comm) return ProcessGroup::make_split_subgroup(std::move(store), members, global_ranks);
  return std::make_shared<CommProcessGroup>(backend_, factory_, std::move(store), comm->rank(),
                                            comm->size(), timeout(), std::move(global_ranks),
                                            device_, std::move(comm));
}

template <typename Run>
WorkPtr CommProcessGroup::enqueue(uint64_t seq, Run run) {
  if (device_) device_->order_after_caller();  // on the caller's thread (comm_device.h)
  // The fingerprint ProcessGroup numbered the call with (its call site included).
  const core::OpFingerprint& fp = issuing_fingerprint();
  const char* op = core::op_kind_name(fp.kind);
  // A caller that waits at once runs it itself when the queue is idle (WaitsAtOnce): a
  // host operation here and now, with no Work to queue and poll.
  const bool at_once = WaitsAtOnce::active() && ops_.reserve();
  if (at_once && !device_) {
    std::exception_ptr error;
    {
      const WaitsAtOnce off(false);  // what the operation's code issues is not the caller's
      error = execute(seq, fp, op, nullptr, std::cref(run));
    }
    WorkPtr work;
    if (error) {
      work = completed_work(op, error);
    } else {
      WorkPtr& done = done_[static_cast<size_t>(fp.kind)];  // the reservation guards it
      if (!done) done = completed_work(op);
      work = done;
    }
    ops_.release();
    return work;
  }
  // One block from this thread's cache: the Work holds the operation (a std::function
  // over a reference stores it in place).
  auto call = [this, fp, op, run = std::move(run)](uint64_t n, pg::QueuedWork& work) {
    work.finish(execute(n, fp, op, &work, std::cref(run)));
  };
  using Call = pg::QueuedCall<decltype(call)>;
  auto work = std::allocate_shared<Call>(core::CachingAllocator<Call>(), op, weak_from_this(), ops_,
                                         std::move(call));
  // A device group's: ProcessGroup polls the Work, which runs it, before the call returns.
  if (at_once) {
    work->run_on_poll(seq);
  } else {
    ops_.push(seq, work);
  }
  return work;
}

std::exception_ptr CommProcessGroup::execute(uint64_t seq, const core::OpFingerprint& fp,
                                             const char* op, pg::QueuedWork* work,
                                             const std::function<void(const coll::Ctx&)>& run) {
  auto where = [&] { return diag::describe(rank(), size(), backend_, op, seq); };
  if (std::exception_ptr failed = comm_->error()) {
    if (std::exception_ptr settled = failure()) failed = settled;
    failed = diag::add_context(failed, where() + ": the group was aborted earlier: ");
    note_finished(seq, failed);
    return failed;
  }
  note_started(seq);
  coll::Algorithm chosen = coll::Algorithm::kAuto;  // for the timeline
  auto algorithm = [&] {
    return chosen == coll::Algorithm::kAuto ? std::string_view() : coll::algorithm_name(chosen);
  };
  try {
    comm_->begin_collective(seq, fp);
    coll::Ctx ctx{*comm_, seq, core::coarse_deadline_after(timeout()),
                  device_ ? device_settings_ : settings_, &chosen};
    ctx.helper = &helper_;
    if (device_) {
      ctx.memory = device_->memory();
      ctx.device = device_->ops();
    }
    run(ctx);
    // A root that only sent: a peer that named another root sent to it too (comm.h). A
    // reduce's or gather's root receives, where the fingerprints are checked anyway.
    if (fp.root == rank() &&
        (fp.kind == core::OpKind::kBroadcast || fp.kind == core::OpKind::kScatter)) {
      comm_->check_arrivals();
    }
    if (device_ && work != nullptr) work->set_cuda_event(device_->complete());
    note_finished(seq, nullptr, algorithm());
    return nullptr;
  } catch (...) {
    std::exception_ptr error =
        settle(seq, diag::add_context(std::current_exception(), where() + ": "));
    comm_->abort(error);
    note_finished(seq, error, algorithm());
    return error;
  }
}

std::exception_ptr CommProcessGroup::settle(uint64_t seq, std::exception_ptr error) {
  if (diag::is_a<TimeoutError>(error) &&
      diag::what_of(error).find("; not arrived: ") == std::string::npos) {
    // Which ranks never arrived, asked of the job (status.h) within 2 s, unless the peer
    // whose timeout this is (its abort notice) said so already.
    const std::vector<std::string> missing = diag::diagnose_wait(*this, seq);
    if (!missing.empty()) {
      std::string text = diag::what_of(error) + "; not arrived: ";
      for (size_t i = 0; i < missing.size(); ++i) text += (i > 0 ? "; " : "") + missing[i];
      error = std::make_exception_ptr(TimeoutError(text));
    }
  } else if (diag::is_a<DesyncError>(error)) {
    try {
      store()->set(kDesyncKey, text_bytes(diag::what_of(error)));
    } catch (const std::exception&) {  // best effort: the peers may say PeerError then
    }
  } else if (diag::is_a<PeerError>(error)) {
    // A peer that aborted may have found a desync (its notice may be unread behind a failed
    // write, or on another lane). A connection that simply ended (the peer's process died)
    // gets one look, not the wait: a rank that finds a desync writes it before it aborts,
    // and waiting would delay every survivor of an elastic job by kDesyncLookup.
    const bool vanished = transport::reports_vanished_peer(diag::what_of(error));
    auto desync_written = [&] {
      if (vanished) return store()->check({kDesyncKey});
      store()->wait({kDesyncKey}, Deadline::after(kDesyncLookup));  // TimeoutError: none
      return true;
    };
    try {
      if (desync_written()) {
        const Bytes text = store()->get(kDesyncKey);
        error = std::make_exception_ptr(DesyncError(diag::what_of(error) + "; because " +
                                                    std::string(text.begin(), text.end())));
      }
    } catch (const std::exception&) {  // no desync was found: the PeerError it is
    }
  }
  MutexLock lock(failure_mu_);
  if (!failure_) failure_ = error;
  return error;
}

std::exception_ptr CommProcessGroup::failure() const {
  MutexLock lock(failure_mu_);
  return failure_;
}

WorkPtr CommProcessGroup::do_all_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype, ReduceOp op) {
  return enqueue(
      seq, [=](const coll::Ctx& ctx) { coll::all_reduce(ctx, send, recv, count, dtype, op); });
}

WorkPtr CommProcessGroup::do_broadcast(uint64_t seq, void* data, size_t count, DType dtype,
                                       int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, [=](const coll::Ctx& ctx) { coll::broadcast(ctx, data, bytes, root); });
}

WorkPtr CommProcessGroup::do_reduce(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, ReduceOp op, int root) {
  return enqueue(
      seq, [=](const coll::Ctx& ctx) { coll::reduce(ctx, send, recv, count, dtype, op, root); });
}

WorkPtr CommProcessGroup::do_all_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  std::vector<size_t> bytes(static_cast<size_t>(size()), bytes_of(count, dtype));
  return enqueue(seq, [=, bytes = std::move(bytes)](const coll::Ctx& ctx) {
    coll::all_gatherv(ctx, send, recv, bytes);
  });
}

WorkPtr CommProcessGroup::do_all_gatherv(uint64_t seq, const void* send, size_t /*send_count*/,
                                         void* recv, std::span<const size_t> recv_counts,
                                         DType dtype) {
  return enqueue(seq, [=, bytes = to_bytes(recv_counts, dtype)](const coll::Ctx& ctx) {
    coll::all_gatherv(ctx, send, recv, bytes);
  });
}

WorkPtr CommProcessGroup::do_gather(uint64_t seq, const void* send, void* recv, size_t count,
                                    DType dtype, int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, [=](const coll::Ctx& ctx) { coll::gather(ctx, send, recv, bytes, root); });
}

WorkPtr CommProcessGroup::do_scatter(uint64_t seq, const void* send, void* recv, size_t count,
                                     DType dtype, int root) {
  const size_t bytes = bytes_of(count, dtype);
  return enqueue(seq, [=](const coll::Ctx& ctx) { coll::scatter(ctx, send, recv, bytes, root); });
}

WorkPtr CommProcessGroup::do_reduce_scatter(uint64_t seq, const void* send, void* recv,
                                            size_t count, DType dtype, ReduceOp op) {
  return enqueue(
      seq, [=](const coll::Ctx& ctx) { coll::reduce_scatter(ctx, send, recv, count, dtype, op); });
}

WorkPtr CommProcessGroup::do_all_to_all(uint64_t seq, const void* send, void* recv, size_t count,
                                        DType dtype) {
  std::vector<size_t> bytes(static_cast<size_t>(size()), bytes_of(count, dtype));
  return enqueue(seq, [=, bytes = std::move(bytes)](const coll::Ctx& ctx) {
    all_to_allv_any(ctx, send, bytes, recv, bytes);
  });
}

WorkPtr CommProcessGroup::do_all_to_allv(uint64_t seq, const void* send,
                                         std::span<const size_t> send_counts, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype) {
  return enqueue(seq, [=, sb = to_bytes(send_counts, dtype), rb = to_bytes(recv_counts, dtype)](
                          const coll::Ctx& ctx) { all_to_allv_any(ctx, send, sb, recv, rb); });
}

WorkPtr CommProcessGroup::do_barrier(uint64_t seq) {
  return enqueue(seq, [](const coll::Ctx& ctx) { coll::barrier(ctx); });
}

void CommProcessGroup::abort() {
  comm_->abort(std::make_exception_ptr(
      PeerError(diag::describe(rank(), size(), backend_, "abort", next_seq()) +
                ": the group was aborted by the user")));
}

}  // namespace tdist::backends
