// The nccl backend's dtype and op mapping and error translation (nccl_runtime.h).
#include "backends/nccl/nccl_runtime.h"

#include "tdist/error.h"

namespace tdist::backends::nccl {

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI8:
      return ncclInt8;
    case DType::kU8:
    case DType::kBool:
      return ncclUint8;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
  }
  TDIST_THROW(InvalidArgument, "nccl: dtype ", static_cast<int>(dtype), " is not a tdist DType");
}

ncclRedOp_t nccl_reduce_op(const char* what, ReduceOpKind op, DType dtype) {
  const bool boolean = dtype == DType::kBool;
  switch (op) {
    case ReduceOpKind::kSum:
      return boolean ? ncclMax : ncclSum;  // OR
    case ReduceOpKind::kProd:
      return boolean ? ncclMin : ncclProd;  // AND
    case ReduceOpKind::kMin:
      return ncclMin;
    case ReduceOpKind::kMax:
      return ncclMax;
    case ReduceOpKind::kAvg:
      return ncclAvg;
    case ReduceOpKind::kBand:
    case ReduceOpKind::kBor:
    case ReduceOpKind::kBxor:
      TDIST_THROW(InvalidArgument, what, ": reduce op ", reduce_op_name(op),
                  " is not available on the nccl backend (NCCL has no bitwise reductions); use "
                  "a CPU backend (tcp, shm, auto) for it");
    case ReduceOpKind::kPremulSum:
      break;
  }
  TDIST_THROW(InvalidArgument, what, ": reduce op ", reduce_op_name(op),
              " has no fixed NCCL op (premul_sum is made per call)");
}

std::string buffer_problem(cudaMemoryType type, int device, int group_device) {
  switch (type) {
    case cudaMemoryTypeDevice:
      if (device == group_device) return "";
      return detail::str_cat("device memory of CUDA device ", device,
                             ", not of the group's device ", group_device);
    case cudaMemoryTypeManaged:
      return "";
    case cudaMemoryTypeHost:
      return "pinned host memory (cudaMallocHost), not device memory";
    case cudaMemoryTypeUnregistered:
      break;
  }
  return "host memory (not known to CUDA), not device memory";
}

void check_nccl(ncclResult_t rc, const std::string& what, ncclComm_t comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string detail;
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') detail = std::string(" (") + last + ")";
  }
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) {
    TDIST_THROW(InvalidArgument, what, ": ", ncclGetErrorString(rc), detail);
  }
  TDIST_THROW(PeerError, what, ": ", ncclGetErrorString(rc), detail);
}

std::string nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) is X*10000 + Y*100 + Z since 2.9.
  return detail::str_cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace tdist::backends::nccl
