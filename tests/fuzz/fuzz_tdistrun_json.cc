// fuzz_tdistrun_json: the JSON tdistrun reads (tdistrun/failure.h). The input is both a
// failure record sent by another node (parse_failure: a record or InvalidArgument; a
// record must survive serialize and be summarised) and a worker's error file
// (read_error_file, which never throws; the input is in a memfd it reads by path).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tdist/error.h"
#include "tdistrun/failure.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tdist::launcher;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const FailureRecord r = parse_failure(text);
    if (!(parse_failure(serialize(r)) == r)) std::abort();
    std::vector<FailureRecord> records{r, r};
    records[1].global_rank ^= 1;
    (void)format_summary("fuzz", records, 1, 3);
    (void)summary_exit_code(records);
  } catch (const tdist::InvalidArgument&) {
    // Not a record: expected.
  }

  static const int fd = ::memfd_create("fuzz_tdistrun_json", 0);
  if (fd < 0 || ::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) {
    std::abort();
  }
  (void)read_error_file("/proc/self/fd/" + std::to_string(fd));
  return 0;
}
