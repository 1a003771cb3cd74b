// TlsChannel: the TCP channel's bytes in sealed frames (net/sealed_stream.h).
#include "transport/tcp/tls_channel.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::transport::tcp {
namespace {

using net::tls::SealedStream;

constexpr size_t kMaxPieces = 16;
constexpr size_t kFrameCap = SealedStream::kMaxFrameBytes + SealedStream::kOverheadBytes;
// A frame holds fewer bytes only where the iovecs end: no small frames while the send
// buffer is nearly full (the core comes back when the socket took some).
constexpr size_t kMinFrameBytes = 4096;

// A position in a list of iovecs.
struct Cursor {
  const iovec* iov;
  size_t count;
  size_t i = 0;
  size_t offset = 0;

  // The next bytes, up to `bytes`, as at most kMaxPieces pieces in `out`: how many bytes
  // they cover.
  size_t pieces(size_t bytes, iovec* out, size_t* n) const {
    size_t covered = 0;
    *n = 0;
    for (size_t j = i, at = offset; j < count && covered < bytes && *n < kMaxPieces; ++j, at = 0) {
      const size_t take = std::min(iov[j].iov_len - at, bytes - covered);
      if (take == 0) continue;
      out[(*n)++] = {static_cast<uint8_t*>(iov[j].iov_base) + at, take};
      covered += take;
    }
    return covered;
  }
  void advance(size_t bytes) {
    while (bytes > 0) {
      const size_t step = std::min(bytes, iov[i].iov_len - offset);
      offset += step;
      bytes -= step;
      if (offset == iov[i].iov_len) {
        ++i;
        offset = 0;
      }
    }
  }
};

size_t total_of(const iovec* iov, size_t count) {
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += iov[i].iov_len;
  return total;
}

}  // namespace

TlsChannel::TlsChannel(net::Fd fd, std::unique_ptr<net::tls::Session> session, std::string address,
                       size_t socket_buffer_bytes)
    : fd_(std::move(fd)),
      address_(std::move(address)),
      session_(std::move(session)),
      stream_(*session_) {
  net::prepare_stream(fd_.get(), socket_buffer_bytes);
}

size_t TlsChannel::write(const iovec* iov, size_t count, std::string* lost) {
  MutexLock lock(send_mu_);
  if (!send_locked(lost)) return 0;
  if (out_begin_ > 0) {  // keep what waits at the front: the rest of the buffer is room
    std::memmove(out_.get(), out_.get() + out_begin_, out_end_ - out_begin_);
    out_end_ -= out_begin_;
    out_begin_ = 0;
  }
  const size_t total = total_of(iov, count);
  if (total > 0 && !out_) out_ = std::make_unique_for_overwrite<uint8_t[]>(kBufferBytes);
  Cursor cursor{iov, count};
  size_t taken = 0;
  while (taken < total) {
    const size_t room = kBufferBytes - out_end_;
    const size_t left = total - taken;
    if (room < SealedStream::kOverheadBytes + std::min(left, kMinFrameBytes)) break;
    const size_t want =
        std::min({left, SealedStream::kMaxFrameBytes, room - SealedStream::kOverheadBytes});
    iovec pieces[kMaxPieces];
    size_t n = 0;
    const size_t bytes = cursor.pieces(want, pieces, &n);
    stream_.seal(pieces, n, bytes, out_.get() + out_end_);
    out_end_ += bytes + SealedStream::kOverheadBytes;
    cursor.advance(bytes);
    taken += bytes;
  }
  send_locked(lost);
  return taken;
}

bool TlsChannel::send_locked(std::string* lost) {
  while (out_begin_ < out_end_) {
    const ssize_t n = ::send(fd_.get(), out_.get() + out_begin_, out_end_ - out_begin_,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      out_begin_ += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *lost = detail::str_cat("TLS write failed: ", std::strerror(errno));
      return false;
    }
    writable_.store(false, std::memory_order_relaxed);  // holds_unsent() brings the core back
    break;
  }
  if (out_begin_ == out_end_) out_begin_ = out_end_ = 0;
  unsent_.store(out_begin_ < out_end_, std::memory_order_release);
  return true;
}

size_t TlsChannel::read(const iovec* iov, size_t count, bool* eof, std::string* lost) {
  MutexLock lock(recv_mu_);
  const size_t total = total_of(iov, count);
  Cursor cursor{iov, count};
  size_t got = 0;
  while (got < total) {
    if (plain_begin_ < plain_end_) {  // the rest of a frame opened aside
      iovec pieces[kMaxPieces];
      size_t n = 0;
      const size_t bytes = cursor.pieces(plain_end_ - plain_begin_, pieces, &n);
      for (size_t j = 0; j < n; ++j) {
        std::memcpy(pieces[j].iov_base, plain_.get() + plain_begin_, pieces[j].iov_len);
        plain_begin_ += pieces[j].iov_len;
      }
      cursor.advance(bytes);
      got += bytes;
      continue;
    }
    const size_t avail = in_end_ - in_begin_;
    if (!ended_ && avail >= SealedStream::kLengthBytes) {
      const uint8_t* frame = in_.get() + in_begin_;
      const size_t bytes = SealedStream::plain_bytes(frame);
      if (bytes == 0 || bytes > SealedStream::kMaxFrameBytes) {
        ended_ = true;
        end_ = detail::str_cat("TLS: a frame from ", address_, " announces ", bytes,
                               " bytes (a corrupt stream)");
        continue;
      }
      if (avail >= bytes + SealedStream::kOverheadBytes) {
        iovec pieces[kMaxPieces];
        size_t n = 0;
        const bool direct = cursor.pieces(bytes, pieces, &n) == bytes;
        if (!direct) {
          if (!plain_)
            plain_ = std::make_unique_for_overwrite<uint8_t[]>(SealedStream::kMaxFrameBytes);
          pieces[0] = {plain_.get(), bytes};
          n = 1;
        }
        if (!stream_.open(frame, pieces, n)) {
          ended_ = true;
          end_ = detail::str_cat("TLS: a frame from ", address_,
                                 " failed authentication (an altered or corrupt stream)");
          continue;
        }
        in_begin_ += bytes + SealedStream::kOverheadBytes;
        if (direct) {
          cursor.advance(bytes);
          got += bytes;
        } else {
          plain_begin_ = 0;
          plain_end_ = bytes;
        }
        continue;
      }
    }
    if (ended_) return report_end_locked(got, eof, lost);
    const size_t capacity = kBufferBytes + kFrameCap;
    if (!in_) in_ = std::make_unique_for_overwrite<uint8_t[]>(capacity);
    if (in_begin_ == in_end_) {
      in_begin_ = in_end_ = 0;
    } else if (capacity - in_end_ < kFrameCap) {  // make room for a whole frame
      std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    const ssize_t n = ::recv(fd_.get(), in_.get() + in_end_, capacity - in_end_, MSG_DONTWAIT);
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      readable_.store(false, std::memory_order_relaxed);  // nothing whole waits here
      return got;
    }
    ended_ = true;
    if (n < 0) {
      end_ = detail::str_cat("TLS read failed: ", std::strerror(errno));
    } else if (in_end_ > in_begin_) {
      end_ = detail::str_cat("TLS: the connection from ", address_, " ended inside a frame");
    }
  }
  return got;  // full: more may wait here, so readable_ stays set
}

// The core takes the end of the stream as final once it is reported, so it is reported by
// a call that returns no bytes; an end met after some bytes waits in ended_ for the next.
size_t TlsChannel::report_end_locked(size_t got, bool* eof, std::string* lost) {
  if (got > 0) return got;
  if (end_.empty()) {
    *eof = true;
  } else {
    *lost = end_;
  }
  return 0;
}

pollfd TlsChannel::poll_for(bool want_read, bool want_write) {
  short events = 0;
  if (want_read) events |= POLLIN | POLLRDHUP;
  if (want_write) events |= POLLOUT;
  return {fd_.get(), events, 0};
}

void TlsChannel::on_poll(short revents) {
  if ((revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    readable_.store(true, std::memory_order_relaxed);
  }
  // A hang-up reported while writing: let the write notice it.
  if ((revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
    writable_.store(true, std::memory_order_relaxed);
  }
}

void TlsChannel::close(Deadline deadline) {
  while (true) {
    {
      MutexLock lock(send_mu_);
      std::string lost;
      if (!send_locked(&lost) || out_begin_ == out_end_) break;
    }
    if (deadline.expired()) break;
    pollfd p{fd_.get(), POLLOUT, 0};
    (void)::poll(&p, 1, deadline.poll_timeout_ms());
  }
  // What is left to read (usually the peer's own goodbye) is dropped, so that close()
  // sends FIN, not RST.
  net::end_sending(fd_.get());
}

void TlsChannel::shut_down() { ::shutdown(fd_.get(), SHUT_RDWR); }

}  // namespace tdist::transport::tcp
