// Fd and small descriptor helpers.
#include "net/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tdist/error.h"

namespace tdist::net {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // Linux frees the descriptor even when close fails
  fd_ = fd;
}

void set_nonblocking(int fd, bool nonblocking) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) TDIST_THROW(Error, "fcntl(F_GETFL) failed: ", errno_text(errno));
  int wanted = nonblocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (wanted != flags && ::fcntl(fd, F_SETFL, wanted) < 0) {
    TDIST_THROW(Error, "fcntl(F_SETFL) failed: ", errno_text(errno));
  }
}

const char* errno_text(int error) {
  // glibc (>= 2.32) keeps strerror's buffer per thread, so this is thread-safe here.
  return std::strerror(error);
}

}  // namespace tdist::net
