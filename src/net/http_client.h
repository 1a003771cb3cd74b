// HttpConnection: a minimal HTTP/1.1 client on one plain TCP connection, for JSON APIs such as
// etcd's v3 gRPC gateway. It POSTs a body and reads the reply's status and body, framed by
// Content-Length, chunked transfer encoding, or the end of the connection; a streamed reply
// (etcd's watch) can be read line by line as it arrives. Keep-alive: after a reply was read to
// its end, reusable() says whether the server keeps the connection for the next request.
//
// Ownership: owns its socket (closed on destruction). Thread-safety: none; one thread at a
// time (callers pool connections). Blocking: every call is bounded by its deadline.
// Failures: PeerError naming host:port when the connection breaks, the server closes it
// early or replies with something that is not HTTP/1.x; TimeoutError at the deadline (the
// connection is then in an unknown state: drop it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "net/fd.h"
#include "tdist/deadline.h"

namespace tdist::net {

struct HttpReply {
  int status = 0;    // 200, 400, ...
  std::string body;  // decoded (chunks joined)
};

class HttpConnection {
 public:
  // Connects to host:port, retrying refused attempts until `deadline` (connect_tcp), and
  // throws TimeoutError "could not connect to host:port ..." then.
  static HttpConnection open(const std::string& host, uint16_t port, Deadline deadline);

  // Sends `POST path` with a JSON body and reads the whole reply.
  HttpReply post(std::string_view path, std::string_view body, Deadline deadline);

  // Sends `POST path` and reads only the status line and headers; the body then comes from
  // read_line(). Returns the status.
  int post_streaming(std::string_view path, std::string_view body, Deadline deadline);
  // The next line of a streamed body (without its '\n'); nullopt when the body ended.
  std::optional<std::string> read_line(Deadline deadline);

  // True when the last reply was read to its end and the server keeps the connection.
  bool reusable() const { return body_done_ && keep_alive_; }
  // True until any byte of a reply arrived on this connection (a pooled connection that the
  // server closed while idle fails before that, and the request may be sent again).
  bool fresh() const { return !received_any_; }
  const std::string& peer() const { return peer_; }

 private:
  HttpConnection(Fd fd, std::string peer) : fd_(std::move(fd)), peer_(std::move(peer)) {}

  void send_request(std::string_view path, std::string_view body, Deadline deadline);
  int read_head(Deadline deadline);
  // Appends what the socket has to in_, waiting for it; false when the peer closed.
  bool fill(Deadline deadline);
  // The next decoded piece of the body ("" once it ended; body_done_ is then set).
  std::string read_body_piece(Deadline deadline);
  std::string take_line(Deadline deadline);  // a CRLF-terminated line of the framing

  Fd fd_;
  std::string peer_;
  std::string in_;  // received, not consumed yet
  bool received_any_ = false;
  bool keep_alive_ = true;
  bool body_done_ = true;
  bool chunked_ = false;
  bool until_close_ = false;     // no length given: the body ends when the peer closes
  size_t left_ = 0;              // bytes left of the body (Content-Length) or of the chunk
  bool chunk_crlf_due_ = false;  // a chunk's data ended; its CRLF follows
  std::string line_buffer_;      // read_line's bytes after the last '\n'
};

}  // namespace tdist::net
