// Fd: owns one file descriptor and closes it when destroyed (move-only RAII).
//
// Ownership: exactly one Fd owns a descriptor; release() hands it back to the caller.
// Thread-safety: none (a plain value; do not share one Fd between threads without a lock).
// Failures: close errors are ignored (the descriptor is gone either way).
#pragma once

#include <utility>

namespace tdist::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Gives up ownership and returns the descriptor (-1 when empty).
  int release() { return std::exchange(fd_, -1); }
  // Closes the owned descriptor (if any) and takes `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Sets or clears O_NONBLOCK; throws Error naming the errno text on failure.
void set_nonblocking(int fd, bool nonblocking);

// The text of an errno value ("Connection refused").
const char* errno_text(int error);

}  // namespace tdist::net
