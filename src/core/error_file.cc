// Torch-format error files and the terminate handler that writes them (error_file.h).
#include "tdist/error_file.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <nlohmann/json.hpp>
#include <string_view>
#include <typeinfo>

#include "tdist/settings.h"

namespace tdist {
namespace {

std::atomic<std::terminate_handler> g_previous_handler{nullptr};
std::atomic<bool> g_handler_busy{false};  // some thread is in on_terminate
thread_local bool t_in_handler = false;   // this thread is: a re-entry must not loop

// torch's format: {"message":{"message":M,"extraInfo":{"py_callstack":M,"timestamp":"T"}}}
// (T: seconds since the epoch, as text); invalid UTF-8 in M becomes U+FFFD.
std::string error_json(const std::string& message) {
  using nlohmann::ordered_json;
  const ordered_json extra = {{"py_callstack", message},
                              {"timestamp", std::to_string(std::time(nullptr))}};
  const ordered_json error = {{"message", {{"message", message}, {"extraInfo", extra}}}};
  return error.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0 && write_all(fd, text);
  int err = errno;
  if (fd >= 0 && ::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    if (fd >= 0) ::unlink(tmp.c_str());
    write_all(STDERR_FILENO,
              "tdist: could not write the error file " + path + ": " + std::strerror(err) + "\n");
  }
}

// "<demangled type>: <what()>" of the exception being handled; "" when there is none.
std::string current_exception_text() {
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "";
  int status = 0;
  char* name = abi::__cxa_demangle(type->name(), nullptr, nullptr, &status);
  std::string text = status == 0 && name != nullptr ? name : type->name();
  std::free(name);
  try {
    throw;  // rethrows the current exception without copying or allocating
  } catch (const std::exception& e) {
    text += ": ";
    text += e.what();
  } catch (...) {  // not a std::exception: the type is all there is
  }
  return text;
}

[[noreturn]] void on_terminate() {
  if (!t_in_handler) {
    t_in_handler = true;
    // Two threads failing at once: the first writes the file and aborts; the second
    // waits for that instead of aborting the process under the first one's write.
    if (g_handler_busy.exchange(true)) {
      for (int i = 0; i < 100; ++i) ::usleep(100 * 1000);
    } else {
      try {
        std::string text = current_exception_text();
        if (!text.empty()) {
          write_all(STDERR_FILENO, "tdist: uncaught " + text + "\n");
          write_error_file(text);
        }
      } catch (...) {  // out of memory, most likely: abort without the file
      }
    }
  }
  std::terminate_handler previous = g_previous_handler.load();
  if (previous != nullptr) previous();
  std::abort();
}

}  // namespace

void record_errors() {
  static const bool installed = [] {
    g_previous_handler.store(std::set_terminate(&on_terminate));
    return true;
  }();
  (void)installed;
}

void write_error_file(const std::string& message) {
  const std::string path = env_string("TORCHELASTIC_ERROR_FILE");
  if (path.empty()) return;
  write_file_atomically(path, error_json(message));
}

}  // namespace tdist
