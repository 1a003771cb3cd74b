// Output relay: whole prefixed lines to the console, raw bytes to files (see output.h).
#include "tdistrun/output.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::launcher {
namespace {

// Writes everything; 0 on success, else the errno. A non-blocking console (a terminal a
// previous program left in O_NONBLOCK) is waited on rather than dropped.
int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n >= 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    } else if (errno != EINTR) {
      return errno;
    }
  }
  return 0;
}

// The first byte that ends a line in [begin, end), or end.
const char* find_line_end(const char* begin, const char* end, bool carriage_return_ends) {
  if (!carriage_return_ends) {
    const void* nl = std::memchr(begin, '\n', static_cast<size_t>(end - begin));
    return nl != nullptr ? static_cast<const char*>(nl) : end;
  }
  return std::find_if(begin, end, [](char c) { return c == '\n' || c == '\r'; });
}

}  // namespace

StreamRelay::StreamRelay(int pipe_fd, RelayTargets targets)
    : pipe_fd_(pipe_fd), targets_(std::move(targets)) {
  int flags = ::fcntl(pipe_fd_, F_GETFL, 0);
  if (flags < 0 || ::fcntl(pipe_fd_, F_SETFL, flags | O_NONBLOCK) < 0) {
    int error = errno;
    ::close(pipe_fd_);
    if (targets_.file_fd >= 0) ::close(targets_.file_fd);
    TDIST_THROW(Error, "cannot make an output pipe non-blocking: ", std::strerror(error));
  }
}

StreamRelay::StreamRelay(StreamRelay&& other) noexcept
    : pipe_fd_(std::exchange(other.pipe_fd_, -1)),
      targets_(std::move(other.targets_)),
      partial_(std::move(other.partial_)),
      batch_(std::move(other.batch_)),
      ring_(std::move(other.ring_)),
      ring_trimmed_(other.ring_trimmed_) {
  other.targets_.file_fd = -1;
  other.targets_.console_fd = -1;
}

StreamRelay::~StreamRelay() { close(); }

void StreamRelay::read_once() {
  if (pipe_fd_ < 0) return;
  // One buffer for every relay: the launcher drives them all from one thread.
  static thread_local char buffer[kReadBytes];
  ssize_t n = ::read(pipe_fd_, buffer, sizeof(buffer));
  if (n > 0) {
    relay(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    end_of_stream();
  }
}

void StreamRelay::drain() {
  // A stream read to EAGAIN stops here; one that keeps being fed (a grandchild still
  // writing) is cut off after a bounded amount so the caller is never held up.
  for (int i = 0; i < 64 && pipe_fd_ >= 0; ++i) {
    pollfd p{pipe_fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    read_once();
  }
}

void StreamRelay::close() {
  drain();
  if (pipe_fd_ >= 0) end_of_stream();
  if (targets_.file_fd >= 0) ::close(std::exchange(targets_.file_fd, -1));
}

void StreamRelay::end_of_stream() {
  if (!partial_.empty()) {
    append_line(nullptr, 0, /*add_newline=*/true);
    write_console();
  }
  ::close(std::exchange(pipe_fd_, -1));
}

void StreamRelay::relay(const char* data, size_t size) {
  write_file(data, size);
  if (targets_.keep_tail) {
    ring_.append(data, size);
    if (ring_.size() >= 2 * kTailBytes) {
      ring_.erase(0, ring_.size() - kTailBytes);
      ring_trimmed_ = true;
    }
  }
  if (targets_.console_fd < 0) return;
  const bool prefixed = !targets_.prefix.empty();
  const char* end = data + size;
  while (data < end) {
    const char* line_end = find_line_end(data, end, !prefixed);
    if (line_end < end) {
      append_line(data, static_cast<size_t>(line_end + 1 - data), /*add_newline=*/false);
      data = line_end + 1;
      continue;
    }
    size_t take = std::min(static_cast<size_t>(end - data), kMaxLineBytes - partial_.size());
    partial_.append(data, take);
    data += take;
    if (partial_.size() == kMaxLineBytes) append_line(nullptr, 0, /*add_newline=*/prefixed);
  }
  write_console();
}

void StreamRelay::append_line(const char* data, size_t size, bool add_newline) {
  batch_ += targets_.prefix;
  batch_ += partial_;
  batch_.append(data, size);
  if (add_newline) batch_ += '\n';
  partial_.clear();
}

void StreamRelay::write_console() {
  if (batch_.empty()) return;
  if (targets_.console_fd >= 0) {
    if (int error = write_all(targets_.console_fd, batch_.data(), batch_.size()); error != 0) {
      TDIST_LOG(kWarn) << "worker output to fd " << targets_.console_fd
                       << " is dropped from now on: " << std::strerror(error);
      targets_.console_fd = -1;
    }
  }
  batch_.clear();
}

void StreamRelay::write_file(const char* data, size_t size) {
  if (targets_.file_fd < 0) return;
  if (int error = write_all(targets_.file_fd, data, size); error != 0) {
    TDIST_LOG(kWarn) << "worker output to its log file is dropped from now on: "
                     << std::strerror(error);
    ::close(std::exchange(targets_.file_fd, -1));
  }
}

std::string StreamRelay::tail(size_t max_lines) const {
  if (!targets_.keep_tail || max_lines == 0) return "";
  std::string_view kept = ring_;
  bool cut = ring_trimmed_ || kept.size() > kTailBytes;
  if (kept.size() > kTailBytes) kept.remove_prefix(kept.size() - kTailBytes);
  if (cut) {  // the first line lost its beginning: skip it
    size_t nl = kept.find('\n');
    kept.remove_prefix(nl == std::string_view::npos ? kept.size() : nl + 1);
  }
  const bool ends_with_newline = !kept.empty() && kept.back() == '\n';
  // Walk back over max_lines line ends; `start` is where the earliest line taken begins.
  size_t start = kept.size() - (ends_with_newline ? 1 : 0);
  size_t search_end = start;
  for (size_t taken = 0; taken < max_lines; ++taken) {
    size_t nl = search_end == 0 ? std::string_view::npos : kept.rfind('\n', search_end - 1);
    if (nl == std::string_view::npos) {
      start = 0;
      break;
    }
    start = nl + 1;
    search_end = nl;
  }
  std::string out(kept.substr(start));
  if (!out.empty() && !ends_with_newline) out += '\n';
  return out;
}

int open_output_file(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) TDIST_THROW(Error, "cannot create the directory ", parent.string(), ": ", ec.message());
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) TDIST_THROW(Error, "cannot open ", path, " for writing: ", std::strerror(errno));
  return fd;
}

}  // namespace tdist::launcher
