// Single-copy transfers (single_copy.h).
#include "transport/shm/single_copy.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "net/fd.h"
#include "tdist/logging.h"

namespace tdist::transport::shm {
namespace {

std::atomic<bool> refused{false};

// single_copy_pays(): the test's size and the kernel copy's allowance over memcpy.
constexpr size_t kProbeBytes = size_t{1} << 20;
constexpr double kAllowance = 1.5;

bool measure_single_copy() {
  using Clock = std::chrono::steady_clock;
  std::vector<uint8_t> from(kProbeBytes, 1);
  std::vector<uint8_t> to(kProbeBytes, 2);  // both touched: no page faults timed
  auto best = [](auto copy) {
    Clock::duration shortest = Clock::duration::max();
    for (int i = 0; i < 3; ++i) {
      const Clock::time_point start = Clock::now();
      if (!copy()) return Clock::duration::max();
      shortest = std::min(shortest, Clock::now() - start);
    }
    return shortest;
  };
  const Clock::duration user = best([&] {
    std::memcpy(to.data(), from.data(), kProbeBytes);
    asm volatile("" : : "r"(to.data()) : "memory");  // the copy is not optimised away
    return true;
  });
  const Clock::duration kernel = best([&] {
    return single_copy_read(::getpid(), to.data(), reinterpret_cast<uint64_t>(from.data()),
                            kProbeBytes);
  });
  if (kernel == Clock::duration::max()) return false;
  const bool pays = kernel.count() <= kAllowance * static_cast<double>(user.count());
  TDIST_LOG(kDebug) << "shm: a 1 MiB copy takes "
                    << std::chrono::duration<double, std::micro>(user).count()
                    << " us by memcpy and "
                    << std::chrono::duration<double, std::micro>(kernel).count()
                    << " us by process_vm_readv: large messages go "
                    << (pays ? "by single copy" : "through the rings");
  return pays;
}

}  // namespace

bool single_copy_pays() {
  static const bool pays = measure_single_copy();
  return pays;
}

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
