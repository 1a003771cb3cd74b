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
#include <string_view>
#include <typeinfo>

namespace tdist {
namespace {

std::atomic<std::terminate_handler> g_previous_handler{nullptr};
std::atomic<bool> g_handler_busy{false};  // some thread is in on_terminate
thread_local bool t_in_handler = false;   // this thread is: a re-entry must not loop

// Length of the valid UTF-8 sequence at s[i] (lead byte >= 0x80), or 0 when it is invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

// Appends `s` as the inside of a JSON string literal.
void append_json_string(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD: Python's json.load rejects invalid UTF-8
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
}

std::string error_json(const std::string& message) {
  std::string out = R"({"message": {"message": ")";
  append_json_string(out, message);
  out += R"(", "extraInfo": {"py_callstack": ")";
  append_json_string(out, message);
  out += R"(", "timestamp": ")";
  out += std::to_string(static_cast<long long>(std::time(nullptr)));
  out += "\"}}}";
  return out;
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
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  write_file_atomically(path, error_json(message));
}

}  // namespace tdist
