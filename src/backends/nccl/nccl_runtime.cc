// The nccl backend's dtype and op mapping, device choice and error translation
// (nccl_runtime.h).
#include "backends/nccl/nccl_runtime.h"

#include <charconv>

#include "tdist/error.h"
#include "tdist/settings.h"

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

int choose_device(int device_count, int64_t nccl_device, std::string_view local_rank) {
  if (nccl_device >= 0) {
    TDIST_CHECK(nccl_device < device_count, InvalidArgument,
                "nccl: TDIST_NCCL_DEVICE=", nccl_device, " but only ", device_count, " CUDA device",
                (device_count == 1 ? " is" : "s are"), " visible (0..", device_count - 1, ")");
    return static_cast<int>(nccl_device);
  }
  if (local_rank.empty()) return 0;
  int64_t value = -1;
  const auto [end, ec] =
      std::from_chars(local_rank.data(), local_rank.data() + local_rank.size(), value);
  TDIST_CHECK(ec == std::errc() && end == local_rank.data() + local_rank.size() && value >= 0,
              InvalidArgument, "nccl: LOCAL_RANK='", local_rank,
              "' is not a non-negative integer (set TDIST_NCCL_DEVICE to choose the device)");
  return static_cast<int>(value % device_count);
}

int choose_device(int device_count) {
  // TDIST_LOCAL_RANK, else torchrun's LOCAL_RANK (as tdist::torch::local_device()).
  const std::string local_rank = setting_is_set("TDIST_LOCAL_RANK")
                                     ? setting_string("TDIST_LOCAL_RANK")
                                     : env_string("LOCAL_RANK");
  return choose_device(device_count, setting_int("TDIST_NCCL_DEVICE"), local_rank);
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

int visible_devices(const char* backend) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  TDIST_CHECK(rc == cudaSuccess, Error, backend,
              ": no CUDA device is visible: ", cudaGetErrorString(rc), " (", cudaGetErrorName(rc),
              " from cudaGetDeviceCount)");
  TDIST_CHECK(count > 0, Error, backend,
              ": no CUDA device is visible: cudaGetDeviceCount found 0 devices "
              "(CUDA_VISIBLE_DEVICES=",
              env_string("CUDA_VISIBLE_DEVICES"), ")");
  return count;
}

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  TDIST_THROW(Error, what, ": ", cudaGetErrorString(rc), " (", cudaGetErrorName(rc), ")");
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
