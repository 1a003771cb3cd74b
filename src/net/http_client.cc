// HttpConnection: request writing and reply framing (status line, headers, Content-Length,
// chunked, until-close) over a non-blocking socket bounded by deadlines.
#include "net/http_client.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>

#include "net/address.h"
#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::net {
namespace {

constexpr size_t kHttpReadChunk = 64 * 1024;
constexpr size_t kHttpMaxHeadBytes = 64 * 1024;

std::string http_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view http_trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

HttpConnection HttpConnection::open(const std::string& host, uint16_t port, Deadline deadline) {
  return HttpConnection(connect_tcp(host, port, deadline), format_host_port(host, port));
}

void HttpConnection::send_request(std::string_view path, std::string_view body, Deadline deadline) {
  TDIST_CHECK(body_done_, Error, "HTTP: a new request to ", peer_,
              " before the last reply was read to its end");
  std::string request;
  request.reserve(body.size() + 160);
  request.append("POST ").append(path).append(" HTTP/1.1\r\nHost: ").append(peer_);
  request.append("\r\nContent-Type: application/json\r\nContent-Length: ");
  request.append(std::to_string(body.size())).append("\r\n\r\n").append(body);
  received_any_ = false;
  write_full(fd_.get(), request.data(), request.size(), deadline, peer_);
}

bool HttpConnection::fill(Deadline deadline) {
  char chunk[kHttpReadChunk];
  while (true) {
    const ssize_t n = ::recv(fd_.get(), chunk, sizeof(chunk), 0);
    if (n > 0) {
      in_.append(chunk, static_cast<size_t>(n));
      received_any_ = true;
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      TDIST_THROW(PeerError, "HTTP: reading from ", peer_, " failed: ", errno_text(errno));
    }
    if (!wait_fd(fd_.get(), POLLIN, deadline)) {
      TDIST_THROW(TimeoutError, "HTTP: timed out waiting for a reply from ", peer_);
    }
  }
}

int HttpConnection::read_head(Deadline deadline) {
  size_t end = 0;
  while ((end = in_.find("\r\n\r\n")) == std::string::npos) {
    TDIST_CHECK(in_.size() <= kHttpMaxHeadBytes, PeerError, "HTTP: ", peer_,
                " sent a reply head over ", kHttpMaxHeadBytes, " bytes");
    if (!fill(deadline)) {
      TDIST_THROW(PeerError, "HTTP: connection to ", peer_, " closed before a reply arrived");
    }
  }
  const std::string head = in_.substr(0, end + 2);
  in_.erase(0, end + 4);

  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  int status = 0;
  const size_t space = status_line.find(' ');
  if (status_line.rfind("HTTP/1.", 0) != 0 || space == std::string::npos ||
      std::from_chars(status_line.data() + space + 1, status_line.data() + status_line.size(),
                      status)
              .ec != std::errc()) {
    TDIST_THROW(PeerError, "HTTP: ", peer_, " replied '", status_line.substr(0, 80),
                "', which is not HTTP/1.x");
  }
  keep_alive_ = status_line.rfind("HTTP/1.1", 0) == 0;
  chunked_ = false;
  until_close_ = true;
  left_ = 0;
  for (size_t pos = line_end + 2; pos < head.size(); pos = line_end + 2) {
    line_end = head.find("\r\n", pos);
    const std::string_view line(head.data() + pos, line_end - pos);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string name = http_lower(http_trim(line.substr(0, colon)));
    const std::string value = http_lower(http_trim(line.substr(colon + 1)));
    if (name == "content-length") {
      until_close_ = false;
      std::from_chars(value.data(), value.data() + value.size(), left_);
    } else if (name == "transfer-encoding" && value.find("chunked") != std::string::npos) {
      chunked_ = true;
      until_close_ = false;
    } else if (name == "connection" && value == "close") {
      keep_alive_ = false;
    }
  }
  if (until_close_) keep_alive_ = false;
  chunk_crlf_due_ = false;
  body_done_ = !chunked_ && !until_close_ && left_ == 0;
  line_buffer_.clear();
  return status;
}

std::string HttpConnection::take_line(Deadline deadline) {
  size_t end = 0;
  while ((end = in_.find("\r\n")) == std::string::npos) {
    TDIST_CHECK(in_.size() <= kHttpMaxHeadBytes, PeerError, "HTTP: ", peer_,
                " sent a malformed chunked body");
    if (!fill(deadline)) {
      TDIST_THROW(PeerError, "HTTP: connection to ", peer_, " closed inside a reply");
    }
  }
  std::string line = in_.substr(0, end);
  in_.erase(0, end + 2);
  return line;
}

std::string HttpConnection::read_body_piece(Deadline deadline) {
  if (body_done_) return {};
  if (chunked_ && left_ == 0) {
    if (chunk_crlf_due_) {
      TDIST_CHECK(take_line(deadline).empty(), PeerError, "HTTP: ", peer_,
                  " sent a chunk longer than announced");
      chunk_crlf_due_ = false;
    }
    const std::string size_line = take_line(deadline);
    size_t size = 0;
    const auto parsed =
        std::from_chars(size_line.data(), size_line.data() + size_line.size(), size, 16);
    TDIST_CHECK(parsed.ec == std::errc() && parsed.ptr != size_line.data(), PeerError,
                "HTTP: ", peer_, " sent a bad chunk size line '", size_line.substr(0, 40), "'");
    if (size == 0) {
      while (!take_line(deadline).empty()) {  // trailer fields, up to the empty line
      }
      body_done_ = true;
      return {};
    }
    left_ = size;
    chunk_crlf_due_ = true;
  }
  if (in_.empty() && !fill(deadline)) {
    if (until_close_) {
      body_done_ = true;
      return {};
    }
    TDIST_THROW(PeerError, "HTTP: connection to ", peer_, " closed inside a reply");
  }
  if (until_close_) return std::exchange(in_, {});
  const size_t n = std::min(left_, in_.size());
  std::string piece = in_.substr(0, n);
  in_.erase(0, n);
  left_ -= n;
  if (!chunked_ && left_ == 0) body_done_ = true;
  return piece;
}

HttpReply HttpConnection::post(std::string_view path, std::string_view body, Deadline deadline) {
  HttpReply reply;
  reply.status = post_streaming(path, body, deadline);
  while (!body_done_) reply.body += read_body_piece(deadline);
  return reply;
}

int HttpConnection::post_streaming(std::string_view path, std::string_view body,
                                   Deadline deadline) {
  send_request(path, body, deadline);
  return read_head(deadline);
}

std::optional<std::string> HttpConnection::read_line(Deadline deadline) {
  while (true) {
    const size_t nl = line_buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = line_buffer_.substr(0, nl);
      line_buffer_.erase(0, nl + 1);
      return line;
    }
    if (body_done_) {
      if (line_buffer_.empty()) return std::nullopt;
      return std::exchange(line_buffer_, {});
    }
    line_buffer_ += read_body_piece(deadline);
  }
}

}  // namespace tdist::net
