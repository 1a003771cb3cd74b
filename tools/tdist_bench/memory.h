// tdist-bench memory: benchmark buffers that cost exactly their size, and RSS readings.
//
// PageBuffer maps anonymous memory (mmap) and unmaps it when destroyed, so a buffer adds
// exactly its touched pages to the RSS and gives them back when freed; the malloc heap,
// which may keep freed memory resident, holds none of the benchmark's data. The RSS
// helpers read /proc/self/status; reset_peak_rss() restarts VmHWM at the current RSS
// (/proc/self/clear_refs, Linux 4.0+) so each collective's peak can be read on its own.
// PageBuffer is move-only and not thread-safe; the functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tdist_bench {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Maps `bytes` (rounded up to pages); 0 maps nothing and data() is null. Throws
  // std::bad_alloc when the mapping fails.
  explicit PageBuffer(size_t bytes);
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer();

  unsigned char* data() const { return data_; }
  size_t size() const { return size_; }  // as asked, not rounded

 private:
  void release();
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

// A "Field:  123 kB" line of /proc/self/status ("VmHWM", "VmRSS") in KiB; -1 when absent.
int64_t proc_status_kib(const char* field);

// Returns freed heap memory to the system (malloc_trim) and restarts the VmHWM peak at
// the current RSS. False when the kernel refused the reset (VmHWM then keeps counting
// from the start of the process).
bool reset_peak_rss();

}  // namespace tdist_bench
