// The GPU backends' shared CUDA runtime helpers (runtime.h).
#include "cuda/runtime.h"

#include "core/device_choice.h"
#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::cuda {

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

int process_device(const char* backend) {
  return choose_device(visible_devices(backend), device_choice_from_env(), backend,
                       " (set TDIST_NCCL_DEVICE to choose the device)");
}

void check_cuda(cudaError_t rc, const std::string& what) {
  if (rc == cudaSuccess) return;
  TDIST_THROW(Error, what, ": ", cudaGetErrorString(rc), " (", cudaGetErrorName(rc), ")");
}

}  // namespace tdist::cuda
