// Error files: the terminate handler in forked children that really die, and the JSON
// that write_error_file produces (checked byte for byte; the launcher's tests parse it, and
// have torch read it).
#include "tdist/error_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "tdist/error.h"

namespace tdist {
namespace {

using test_support::read_file;
using test_support::run_command;
using test_support::TempDir;

// Sets TORCHELASTIC_ERROR_FILE for one test and restores it afterwards.
class ErrorFileEnv {
 public:
  explicit ErrorFileEnv(const std::string& path) {
    if (const char* v = std::getenv(kName)) saved_ = v;
    had_ = std::getenv(kName) != nullptr;
    ::setenv(kName, path.c_str(), 1);
  }
  ~ErrorFileEnv() {
    if (had_) {
      ::setenv(kName, saved_.c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  ErrorFileEnv(const ErrorFileEnv&) = delete;
  ErrorFileEnv& operator=(const ErrorFileEnv&) = delete;

 private:
  static constexpr const char* kName = "TORCHELASTIC_ERROR_FILE";
  bool had_ = false;
  std::string saved_;
};

struct ChildResult {
  int status = 0;
  std::string stderr_text;
};

// Runs `body` in a forked child with its stderr going to `stderr_path`; the child must
// die within 10 s (it is SIGKILLed otherwise, and the test fails).
ChildResult run_child(const std::function<void()>& body, const std::string& stderr_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // the abort is expected; a core dump is slow
    int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, STDERR_FILENO);
    body();
    ::_exit(99);  // the body was supposed to end the process
  }
  EXPECT_GT(pid, 0) << "fork failed";
  ChildResult result;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    pid_t done = ::waitpid(pid, &result.status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid failed";
      break;
    }
    if (std::chrono::steady_clock::now() > give_up) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &result.status, 0);
      ADD_FAILURE() << "the child did not die within 10 s";
      break;
    }
    ::usleep(5000);
  }
  result.stderr_text = read_file(stderr_path);
  return result;
}

// Throws `e` out of a thread's function: std::terminate with `e` active, as when an
// exception escapes main (gtest would catch one thrown in the test body itself).
template <typename E>
void throw_from_thread(E e) {
  record_errors();
  record_errors();  // a second call must not chain the handler to itself
  std::thread([e] { throw e; }).join();
}

bool died_by_sigabrt(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT; }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(ErrorFile, UncaughtTdistErrorIsWrittenInTorchFormat) {
  TempDir dir;
  const std::string path = dir.path() + "/error.json";
  ErrorFileEnv env(path);
  const long long before = static_cast<long long>(std::time(nullptr));
  ChildResult child = run_child([] { throw_from_thread(PeerError("rank 1 lost \"peer\" 2")); },
                                dir.path() + "/stderr.txt");
  const long long after = static_cast<long long>(std::time(nullptr));
  EXPECT_TRUE(died_by_sigabrt(child.status)) << "status " << child.status;

  const std::string text = read_file(path);
  const std::regex format(
      R"re(\{"message":\{"message":"tdist::PeerError: rank 1 lost \\"peer\\" 2",)re"
      R"re("extraInfo":\{"py_callstack":"tdist::PeerError: rank 1 lost \\"peer\\" 2",)re"
      R"re("timestamp":"([0-9]+)"\}\}\})re");
  std::smatch match;
  ASSERT_TRUE(std::regex_match(text, match, format)) << text;
  const long long stamp = std::stoll(match[1].str());
  EXPECT_GE(stamp, before);
  EXPECT_LE(stamp, after);

  // Our line once (the handler did not chain to itself), then the runtime's.
  EXPECT_EQ(count(child.stderr_text, "tdist: uncaught tdist::PeerError: rank 1 lost \"peer\" 2\n"),
            1u)
      << child.stderr_text;
  EXPECT_NE(child.stderr_text.find("terminate called"), std::string::npos) << child.stderr_text;
  // Only the renamed file and the captured stderr: no temporary left behind.
  std::vector<std::string> files = dir.files();
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"error.json", "stderr.txt"}));
}

TEST(ErrorFile, NonStdExceptionGivesItsType) {
  TempDir dir;
  const std::string path = dir.path() + "/error.json";
  ErrorFileEnv env(path);
  ChildResult child = run_child([] { throw_from_thread(42); }, dir.path() + "/stderr.txt");
  EXPECT_TRUE(died_by_sigabrt(child.status));
  EXPECT_NE(read_file(path).find(R"({"message":{"message":"int",)"), std::string::npos)
      << read_file(path);
  EXPECT_NE(child.stderr_text.find("tdist: uncaught int\n"), std::string::npos);
}

TEST(ErrorFile, TerminateWithoutExceptionWritesNothing) {
  TempDir dir;
  ErrorFileEnv env(dir.path() + "/error.json");
  ChildResult child = run_child(
      [] {
        record_errors();
        std::terminate();
      },
      dir.path() + "/stderr.txt");
  EXPECT_TRUE(died_by_sigabrt(child.status));
  EXPECT_EQ(dir.files(), std::vector<std::string>{"stderr.txt"});
  EXPECT_EQ(child.stderr_text.find("tdist: uncaught"), std::string::npos);
}

TEST(ErrorFile, UnsetVariableStillPrintsAndAborts) {
  TempDir dir;
  ErrorFileEnv env("");  // empty counts as unset
  ChildResult child =
      run_child([] { throw_from_thread(InvalidArgument("bad size")); }, dir.path() + "/stderr.txt");
  EXPECT_TRUE(died_by_sigabrt(child.status));
  EXPECT_NE(child.stderr_text.find("tdist: uncaught tdist::InvalidArgument: bad size\n"),
            std::string::npos)
      << child.stderr_text;
  EXPECT_EQ(dir.files(), std::vector<std::string>{"stderr.txt"});
}

TEST(ErrorFile, WriteEscapesAndKeepsUtf8) {
  TempDir dir;
  const std::string path = dir.path() + "/error.json";
  ErrorFileEnv env(path);
  write_error_file("old message");
  // Quotes, backslash, newline, CR, tab, other control characters, DEL, UTF-8 (2, 3 and
  // 4 bytes), and invalid UTF-8 (a stray continuation, a truncated sequence, an overlong
  // '/', a surrogate), which become U+FFFD: one per maximal ill-formed part, as Python's
  // bytes.decode('utf-8', 'replace') has it (the truncated sequence one, the others one per
  // byte).
  const std::string message =
      "a \"q\" \\b\\ line1\nline2\r\tx\x01\x1f\x7f \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 "
      "bad:\x80|\xe6\x97|\xc0\xaf|\xed\xa0\x80|";
  write_error_file(message);
  const std::string escaped =
      "a \\\"q\\\" \\\\b\\\\ line1\\nline2\\r\\tx\\u0001\\u001f\x7f \xc3\xa9 \xe6\x97\xa5 "
      "\xf0\x9f\x98\x80 bad:\xef\xbf\xbd|\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|"
      "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|";
  const std::string text = read_file(path);
  const std::string head = R"({"message":{"message":")" + escaped +
                           R"(","extraInfo":{"py_callstack":")" + escaped + R"(","timestamp":")";
  EXPECT_EQ(text.substr(0, head.size()), head) << text;
  EXPECT_EQ(text.find("old message"), std::string::npos);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"error.json"});
}

// Python's json reads a file whose message had invalid UTF-8, and finds what Python's own
// decoding with replacement makes of those bytes.
TEST(ErrorFile, PythonReadsInvalidUtf8AsItDecodesIt) {
  std::string out;
  if (run_command("python3 -c pass", &out) != 0) GTEST_SKIP() << "no python3: " << out;
  TempDir dir;
  const std::string path = dir.file("error.json");
  ErrorFileEnv env(path);
  const std::string message = "x\x80y\xe6\x97|\xc0\xaf|\xed\xa0\x80|\xf0\x9f\x98 \xc3\xa9\n\x01\"";
  write_error_file(message);
  const std::string raw = dir.write("raw.bin", message);
  const std::string script =
      dir.write("check.py",
                "import json, sys\n"
                "want = open(sys.argv[2], 'rb').read().decode('utf-8', 'replace')\n"
                "m = json.load(open(sys.argv[1], encoding='utf-8'))['message']\n"
                "ok = m['message'] == want == m['extraInfo']['py_callstack']\n"
                "print(ascii(m['message']), ascii(want))\n"
                "sys.exit(0 if ok else 1)\n");
  EXPECT_EQ(run_command("python3 " + script + " " + path + " " + raw, &out), 0) << out;
}

TEST(ErrorFile, WriteIsANoOpWhenUnsetAndNeverThrows) {
  TempDir dir;
  {
    ErrorFileEnv env("");
    ::unsetenv("TORCHELASTIC_ERROR_FILE");
    write_error_file("nothing");
  }
  EXPECT_TRUE(dir.files().empty());
  ErrorFileEnv env(dir.path() + "/no/such/dir/error.json");
  EXPECT_NO_THROW(write_error_file("cannot be written"));
  EXPECT_TRUE(dir.files().empty());
}

}  // namespace
}  // namespace tdist
