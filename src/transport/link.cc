// Link: a plain socket or a TLS session behind one small interface.
#include "transport/link.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::transport {

Link::Io Link::recv_some(void* data, size_t size) {
  if (session_ != nullptr) return session_->read(data, size);
  while (true) {
    const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
    if (n > 0) return {static_cast<size_t>(n), Status::kOk};
    if (n == 0) return {0, Status::kClosed};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {0, Status::kWantRead};
    error_ = detail::str_cat("read failed: ", net::errno_text(errno));
    return {0, Status::kFailed};
  }
}

Link::Io Link::send_some(const void* data, size_t size) {
  if (session_ != nullptr) return session_->write(data, size);
  while (true) {
    const ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {static_cast<size_t>(n), n > 0 ? Status::kOk : Status::kWantWrite};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {0, Status::kWantWrite};
    error_ = detail::str_cat("write failed: ", net::errno_text(errno));
    return {0, Status::kFailed};
  }
}

void Link::read_full(void* data, size_t size, Deadline deadline, std::string_view what) {
  if (session_ == nullptr) return net::read_full(fd_, data, size, deadline, what);
  net::tls::read_full(*session_, data, size, deadline, std::string(what));
}

void Link::write_full(const void* data, size_t size, Deadline deadline, std::string_view what) {
  if (session_ == nullptr) return net::write_full(fd_, data, size, deadline, what);
  try {
    net::tls::write_full(*session_, data, size, deadline, std::string(what));
  } catch (const PeerError&) {
    // A peer that refused this process's certificate (TLS 1.3: after our handshake ended)
    // sent its alert and closed; the alert still waits to be read, and says why.
    uint8_t byte = 0;
    if (session_->read(&byte, 1).status == Status::kFailed && session_->rejected()) {
      TDIST_THROW(AuthError, what,
                  ": TLS: this process's certificate was refused: ", session_->error(), " (",
                  net::tls::kTlsHint, ")");
    }
    throw;
  }
}

void Link::close_gently() {
  if (session_ != nullptr) session_->shutdown();
  net::end_sending(fd_, 1024);
}

}  // namespace tdist::transport
