// Comm's defaults for device memory and any-source receives (comm.h): a Comm without device
// channels refuses device memory, one that matches by source only refuses any source.
#include "transport/comm.h"

#include "tdist/error.h"

namespace tdist::transport {

RequestPtr Comm::isend_device(int peer, uint64_t /*tag*/, const void* /*data*/, size_t bytes) {
  TDIST_THROW(InvalidArgument, "rank ", rank(), ": isend of ", bytes,
              " bytes of CUDA memory to rank ", peer,
              ": no channel of this Comm carries device memory (use the cuda_ipc backend)");
}

RequestPtr Comm::irecv_device(int peer, uint64_t /*tag*/, void* /*data*/, size_t bytes) {
  TDIST_THROW(InvalidArgument, "rank ", rank(), ": irecv of ", bytes,
              " bytes of CUDA memory from rank ", peer,
              ": no channel of this Comm carries device memory (use the cuda_ipc backend)");
}

RequestPtr Comm::irecv_any(uint64_t /*tag*/, void* /*data*/, size_t bytes) {
  TDIST_THROW(InvalidArgument, "rank ", rank(), ": irecv of ", bytes,
              " bytes from any rank: this Comm matches messages by their source only");
}

void Comm::slot_gather(uint64_t /*tag*/, const void* /*mine*/, size_t bytes,
                       const void** /*blocks*/, Deadline /*deadline*/) {
  TDIST_THROW(InvalidArgument, "rank ", rank(), ": slot_gather of ", bytes,
              " bytes: this Comm has no slots (slot_bytes() is 0)");
}

RequestPtr Comm::irecv_any_device(uint64_t /*tag*/, void* /*data*/, size_t bytes) {
  TDIST_THROW(InvalidArgument, "rank ", rank(), ": irecv of ", bytes,
              " bytes of CUDA memory from any rank: this Comm does not receive device memory "
              "from any source");
}

}  // namespace tdist::transport
