// A worker for the launcher's tests: prints what a test checks.
//
//   launcher_echo_worker env              every environment entry, one per line (stdout)
//   launcher_echo_worker lines N TAG      N lines "TAG line <i> xxx..." (about 100 bytes each)
//                                         on stdout through stdio's buffer, so the pipe sees
//                                         lines split at arbitrary points
//   launcher_echo_worker long N           N bytes 'a'..'z' with no newline (stdout)
//
// Exit codes: 0 done, 2 bad arguments.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env" && argc == 2) {
    for (char** e = environ; *e != nullptr; ++e) std::printf("%s\n", *e);
    return 0;
  }
  if (mode == "lines" && argc == 4) {
    long count = std::strtol(argv[2], nullptr, 10);
    for (long i = 0; i < count; ++i) {
      std::printf("%s line %ld %s\n", argv[3], i, std::string(80, 'x').c_str());
    }
    return 0;
  }
  if (mode == "long" && argc == 3) {
    long count = std::strtol(argv[2], nullptr, 10);
    for (long i = 0; i < count; ++i) std::putchar('a' + static_cast<int>(i % 26));
    return 0;
  }
  std::fprintf(stderr, "usage: launcher_echo_worker env | lines N TAG | long N\n");
  return 2;
}
