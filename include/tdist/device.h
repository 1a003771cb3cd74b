// Device memory at the ProcessGroup API: which groups take it, and how an operation on it
// is ordered with the caller's CUDA work.
//
// Buffers: a ProcessGroup whose memory_kinds() include MemoryKind::kCuda takes CUDA device
// pointers in every call (`nccl`, and `cuda_ipc` for ranks of one host); the others take
// host memory only, and the LibTorch layer stages CUDA tensors through pinned host memory
// for them (gloo's way).
//
// Ordering: a device operation starts after the work queued before the call on the
// caller's stream: the stream named by the innermost CallerStream scope on the calling
// thread, or the legacy default stream (0) when there is none. The LibTorch layer opens a
// CallerStream with torch's current stream around each call. The operation itself runs on
// the group's own stream; DeviceWork::cuda_event() is an event recorded after it there,
// which a caller's stream can wait for (torch's Work::wait()), while Work::wait() blocks
// the host until it completed (torch's synchronize()).
//
// The types name no CUDA header: a stream and an event travel as void* (cudaStream_t,
// cudaEvent_t), so builds without CUDA compile this header too.
#pragma once

namespace tdist {

enum class MemoryKind : unsigned { kHost = 1u << 0, kCuda = 1u << 1 };

inline constexpr unsigned memory_bit(MemoryKind kind) { return static_cast<unsigned>(kind); }

// The caller's CUDA stream for device operations called on this thread while the scope
// lives (nested scopes: the innermost wins).
class CallerStream {
 public:
  explicit CallerStream(void* cuda_stream);
  ~CallerStream();
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;

  // The innermost scope's stream on this thread, or nullptr (the legacy default stream).
  static void* current();

 private:
  void* previous_;
};

// What a Work of a device operation adds: the CUDA event recorded after the operation on
// its group's stream (nullptr when it ran no device work, e.g. a world of one). Backends
// that take device memory derive their Work from it.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  virtual void* cuda_event() const = 0;
};

}  // namespace tdist
