// ProgressBar: train_fashion_mnist's per-epoch progress on a stream (stderr):
//   epoch 1/3 [==========>         ] 234/469  loss 0.4123  10234 samples/s
// On a terminal one line is redrawn with '\r', at most 10 times a second; otherwise (a
// log file, CI) a plain line is written at each tenth of the epoch, so logs stay short.
// Not thread-safe; write errors are ignored (progress is cosmetic).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace fashion_mnist {

class ProgressBar {
 public:
  // total_steps: the steps this epoch will run (> 0).
  ProgressBar(std::FILE* out, int epoch, int epochs, int64_t total_steps);

  // After `step` of total_steps steps, `samples` samples over all ranks since the epoch
  // began, `loss` the smoothed training loss.
  void update(int64_t step, int64_t samples, double loss);
  // Draws the final state and ends the line.
  void finish();

 private:
  void draw();

  std::FILE* out_;
  bool tty_;
  int epoch_;
  int epochs_;
  int64_t total_steps_;
  int64_t step_ = 0;
  int64_t samples_ = 0;
  double loss_ = 0;
  int64_t tenths_drawn_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace fashion_mnist
