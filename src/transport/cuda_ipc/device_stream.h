// DeviceStream: the device and CUDA stream a cuda_ipc group works on, shared by its
// backend (which runs kernels and copies there) and its channels (which record the IPC
// events of sends and copy received payloads there).
//
// Creation picks the device (cudaSetDevice on the creating thread) and makes a
// non-blocking stream on it; destruction destroys the stream (errors ignored: at process
// exit the runtime may be gone). use() makes the device current on the calling thread
// (progress may run on any thread). Throws Error naming the CUDA call when one fails.
// Thread-safety: immutable after construction; CUDA streams may be used from any thread.
#pragma once

namespace tdist::transport::cuda_ipc {

class DeviceStream {
 public:
  explicit DeviceStream(int device);
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  int device() const { return device_; }
  void* stream() const { return stream_; }  // a cudaStream_t
  // cudaSetDevice(device()) on this thread; throws Error when it fails.
  void use() const;

 private:
  const int device_;
  void* stream_ = nullptr;
};

// Throws Error "cuda_ipc: <what>: <CUDA's error string> (<name>)" unless `rc` (a
// cudaError_t) is cudaSuccess.
void check_cuda(int rc, const char* what);

}  // namespace tdist::transport::cuda_ipc
