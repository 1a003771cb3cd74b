// ProgressBar (see fashion_mnist_progress.h).
#include "fashion_mnist_progress.h"

#include <unistd.h>

#include <algorithm>
#include <string>

namespace fashion_mnist {

namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

}  // namespace

ProgressBar::ProgressBar(std::FILE* out, int epoch, int epochs, int64_t total_steps)
    : out_(out),
      tty_(isatty(fileno(out)) != 0),
      epoch_(epoch),
      epochs_(epochs),
      total_steps_(std::max<int64_t>(total_steps, 1)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(int64_t step, int64_t samples, double loss) {
  step_ = step;
  samples_ = samples;
  loss_ = loss;
  if (tty_) {
    auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < kRedrawInterval) return;
    last_draw_ = now;
    draw();
    return;
  }
  int64_t tenths = step * 10 / total_steps_;
  if (tenths > tenths_drawn_ && step < total_steps_) {
    tenths_drawn_ = tenths;
    draw();
  }
}

void ProgressBar::finish() {
  draw();
  if (tty_) std::fputc('\n', out_);
  std::fflush(out_);
}

// A terminal gets "\r<line><erase to end of line>" so a shorter line leaves no residue.
void ProgressBar::draw() {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = seconds > 0 ? static_cast<double>(samples_) / seconds : 0;
  auto filled = static_cast<int>(std::min<int64_t>(step_, total_steps_) * kBarWidth / total_steps_);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  std::fprintf(out_, "%sepoch %d/%d [%s] %lld/%lld  loss %.4f  %.0f samples/s%s", tty_ ? "\r" : "",
               epoch_, epochs_, bar.c_str(), static_cast<long long>(step_),
               static_cast<long long>(total_steps_), loss_, rate, tty_ ? "\033[K" : "\n");
  std::fflush(out_);
}

}  // namespace fashion_mnist
