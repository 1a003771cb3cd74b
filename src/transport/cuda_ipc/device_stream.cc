// DeviceStream (device_stream.h).
#include "transport/cuda_ipc/device_stream.h"

#include <cuda_runtime_api.h>

#include "tdist/error.h"

namespace tdist::transport::cuda_ipc {

void check_cuda(int rc, const char* what) {
  const auto e = static_cast<cudaError_t>(rc);
  if (e == cudaSuccess) return;
  TDIST_THROW(Error, "cuda_ipc: ", what, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e),
              ")");
}

DeviceStream::DeviceStream(int device) : device_(device) {
  use();
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = s;
}

DeviceStream::~DeviceStream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void DeviceStream::use() const { check_cuda(cudaSetDevice(device_), "cudaSetDevice"); }

}  // namespace tdist::transport::cuda_ipc
