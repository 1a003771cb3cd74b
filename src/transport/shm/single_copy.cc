// Single-copy transfers (single_copy.h).
#include "transport/shm/single_copy.h"

#include <sys/uio.h>

#include <atomic>
#include <cerrno>

#include "net/fd.h"
#include "tdist/logging.h"

namespace tdist::transport::shm {
namespace {

std::atomic<bool> refused{false};

}  // namespace

bool single_copy_allowed() { return !refused.load(std::memory_order_relaxed); }

bool single_copy_read(pid_t pid, void* dest, uint64_t address, size_t bytes) {
  auto* out = static_cast<uint8_t*>(dest);
  size_t done = 0;
  while (done < bytes) {
    const iovec local{out + done, bytes - done};
    const iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPERM || errno == ENOSYS || errno == EACCES) &&
        !refused.exchange(true)) {
      TDIST_LOG(kWarn) << "shm: single-copy transfers (process_vm_readv) are not permitted here ("
                       << net::errno_text(errno)
                       << "; Yama ptrace_scope, seccomp or a container); large messages go "
                          "through the shared-memory rings";
    }
    return false;
  }
  return true;
}

}  // namespace tdist::transport::shm
