// NcclProcessGroup's point-to-point calls and sub-groups (nccl_group.h).
//
// isend, irecv and batch_isend_irecv are ncclSend/ncclRecv in one NCCL group on the
// group's stream, ordered with its collectives; their Work completes through an event like
// a collective's. NCCL matches the messages of a pair in issue order and has no tags: a
// tag is accepted and not matched (as PyTorch's NCCL backend does). Unlike the CPU
// backends, a failed point-to-point call fails the whole group, since the communicator's
// state is then unknown.
#include <utility>

#include "backends/nccl/nccl_group.h"

namespace tdist::backends::nccl {

WorkPtr NcclProcessGroup::do_batch_isend_irecv(std::span<const P2POp> ops) {
  std::vector<Enqueuer::Transfer> sends;
  std::vector<Enqueuer::Transfer> recvs;
  // One NCCL group takes one dtype per call: each op goes as its own transfer in bytes.
  for (const P2POp& op : ops) {
    check_buffer(p2p_name(ops), "the buffer", op.data, op.count);
    const Enqueuer::Transfer t{op.peer, op.data, op.count * dtype_size(op.dtype)};
    (op.kind == P2POp::Kind::kSend ? sends : recvs).push_back(t);
  }
  return launch(p2p_name(ops), std::nullopt,
                [sends = std::move(sends), recvs = std::move(recvs)](Enqueuer& e) {
                  e.exchange(sends, recvs, DType::kU8);
                });
}

std::shared_ptr<ProcessGroup> NcclProcessGroup::make_subgroup(std::shared_ptr<Store> store,
                                                              int rank, int size,
                                                              std::vector<int> global_ranks) {
  // Only members call this; each sub-group gets a communicator of its own through its own
  // store namespace, on this group's device.
  return std::make_shared<NcclProcessGroup>(device_, std::move(store), rank, size, timeout(),
                                            std::move(global_ranks));
}

}  // namespace tdist::backends::nccl
