// DDP's side stream for gradient communication on a CUDA device (internal to tdist_torch).
//
// A bucket's collective runs with torch's current stream set to the side stream, after the
// side stream waited for the work queued on the current stream up to then (the bucket's
// gradients and their copy into it): computing the next gradients and communicating the
// ready ones overlap on the GPU. join() makes the current stream wait for everything queued
// on the side stream, so that what follows on it (writing the averaged gradients, the
// optimizer) sees the reduced buckets. On the CPU, or in builds against a LibTorch without
// CUDA, run() calls `issue` and join() does nothing. Thread-safety: one thread at a time
// (the Reducer's lock).
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

#include "tdist/work.h"

namespace tdist::torch {

class CommStream {
 public:
  explicit CommStream(c10::Device device);
  ~CommStream();
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  // Calls `issue` on the side stream (see above) and returns its Work.
  WorkPtr run(const std::function<WorkPtr()>& issue);
  // The current stream waits for the side stream.
  void join();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;  // null on the CPU
};

}  // namespace tdist::torch
