// Output relay: what the launcher does with a worker's captured stdout or stderr.
//
// A StreamRelay owns the read end of one worker stream's pipe (non-blocking). Every read
// (at most kReadBytes) goes, as raw bytes, to the stream's file when it has one, and to a
// ring of the last kTailBytes when asked (the failure summary shows a worker's last stderr
// lines). Lines shown on the console are written only whole: complete lines, each with the
// prefix in front, are gathered and written with one write(2) per read, so lines of
// different workers never interleave mid-line. The partial line at the end of a read waits
// for the rest; at the end of the stream it is written with a newline added. Without a
// prefix a '\r' also ends a line, so progress bars keep moving. A line that grows past
// kMaxLineBytes without ending is written in pieces of that size (with a prefix, each piece
// becomes its own console line).
//
// Thread-safety: none; one thread drives all relays. Failures: a console or file write that
// fails (EPIPE after `| head`, a full disk) turns that destination off with one warning,
// and the relay goes on; nothing here throws after construction.
#pragma once

#include <cstddef>
#include <string>

namespace tdist::launcher {

struct RelayTargets {
  int console_fd = -1;     // 1 or 2 to show lines on the console; -1 drops them
  std::string prefix;      // put before every console line ("" = lines pass unchanged)
  int file_fd = -1;        // raw bytes are appended here; the relay takes ownership
  bool keep_tail = false;  // keep the last kTailBytes for tail()
};

class StreamRelay {
 public:
  static constexpr size_t kReadBytes = 64 * 1024;
  static constexpr size_t kMaxLineBytes = 64 * 1024;
  static constexpr size_t kTailBytes = 64 * 1024;

  // Takes ownership of pipe_fd (made non-blocking) and of targets.file_fd.
  StreamRelay(int pipe_fd, RelayTargets targets);
  ~StreamRelay();  // close()
  StreamRelay(StreamRelay&& other) noexcept;
  StreamRelay& operator=(StreamRelay&&) = delete;
  StreamRelay(const StreamRelay&) = delete;
  StreamRelay& operator=(const StreamRelay&) = delete;

  // The pipe to poll for POLLIN; -1 once the stream ended or was closed.
  int fd() const { return pipe_fd_; }

  // One read and its relay. At the end of the stream (EOF or a read error) the partial
  // line is flushed and the pipe closed.
  void read_once();
  // Reads until the pipe is empty (or the stream ends); never blocks.
  void drain();
  // drain(), then flushes the partial line and closes the pipe and the file.
  void close();

  // The last max_lines lines kept in the ring, each ending in '\n'; "" without a ring.
  std::string tail(size_t max_lines) const;

 private:
  void relay(const char* data, size_t size);
  void end_of_stream();
  void append_line(const char* data, size_t size, bool add_newline);
  void write_console();
  void write_file(const char* data, size_t size);

  int pipe_fd_ = -1;
  RelayTargets targets_;
  std::string partial_;  // the console line begun but not ended yet
  std::string batch_;    // whole console lines waiting for one write
  std::string ring_;     // raw bytes; trimmed to kTailBytes when twice that
  bool ring_trimmed_ = false;
};

// Opens `path` for appending (O_APPEND | O_CREAT, mode 0644, close-on-exec), creating
// missing parent directories. Returns the descriptor (the caller owns it); throws
// tdist::Error naming the path and the reason.
int open_output_file(const std::string& path);

}  // namespace tdist::launcher
