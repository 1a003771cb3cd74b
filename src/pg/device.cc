// CallerStream: a thread-local stack of the caller's CUDA streams (tdist/device.h).
#include "tdist/device.h"

namespace tdist {
namespace {
thread_local void* innermost_stream = nullptr;
}  // namespace

CallerStream::CallerStream(void* cuda_stream) : previous_(innermost_stream) {
  innermost_stream = cuda_stream;
}

CallerStream::~CallerStream() { innermost_stream = previous_; }

void* CallerStream::current() { return innermost_stream; }

}  // namespace tdist
