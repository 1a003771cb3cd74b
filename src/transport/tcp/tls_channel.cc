// TlsChannel: the TCP channel's bytes through a TLS session, one session call at a time.
#include "transport/tcp/tls_channel.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "net/socket.h"
#include "tdist/error.h"

namespace tdist::transport::tcp {
namespace {

using Status = net::tls::Session::Status;

bool wants(Status s) { return s == Status::kWantRead || s == Status::kWantWrite; }

// Whether the peer's end of the stream has been reached on `fd` (EOF pending or seen).
bool at_eof(int fd) {
  char byte;
  return ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

TlsChannel::TlsChannel(net::Fd fd, std::unique_ptr<net::tls::Session> session, std::string address,
                       size_t socket_buffer_bytes)
    : fd_(std::move(fd)),
      address_(std::move(address)),
      session_(std::move(session)),
      staging_(kRecordBytes) {
  net::prepare_stream(fd_.get(), socket_buffer_bytes);
  session_->gather_writes(kGatherBytes);
  session_->read_ahead(kGatherBytes);
}

size_t TlsChannel::write(const iovec* iov, size_t count, std::string* lost) {
  const size_t taken = write_records(iov, count, lost);
  if (!lost->empty()) return taken;
  MutexLock lock(mu_);
  const Status status = session_->flush();
  if (status == Status::kWantWrite) {
    writable_.store(false, std::memory_order_relaxed);  // holds_unsent() brings the core back
  } else if (status != Status::kOk) {
    *lost = session_->error();
  }
  return taken;
}

bool TlsChannel::holds_unsent() {
  MutexLock lock(mu_);
  return retry_bytes_ > 0 || session_->has_unsent();
}

size_t TlsChannel::write_records(const iovec* iov, size_t count, std::string* lost) {
  size_t taken = 0;
  size_t i = 0;  // the next byte to take: iov[i] at `offset`
  size_t offset = 0;
  auto advance = [&](size_t n) {
    taken += n;
    while (n > 0) {
      const size_t step = std::min(n, iov[i].iov_len - offset);
      offset += step;
      n -= step;
      if (offset == iov[i].iov_len) {
        ++i;
        offset = 0;
      }
    }
  };
  while (true) {
    MutexLock lock(mu_);
    while (i < count && offset == iov[i].iov_len) {
      ++i;
      offset = 0;
    }
    const bool retry = retry_bytes_ > 0;
    if (!retry && i == count) return taken;
    const uint8_t* data = staging_.data();
    size_t size = retry_bytes_;
    if (!retry) {
      const size_t rest = iov[i].iov_len - offset;
      if (rest >= kRecordBytes) {  // a large payload: a full record straight from it
        data = static_cast<const uint8_t*>(iov[i].iov_base) + offset;
        size = kRecordBytes;
      } else {  // small pieces: as many of them as one record holds
        for (size_t j = i, at = offset; j < count && size < kRecordBytes; ++j, at = 0) {
          const size_t n = std::min(iov[j].iov_len - at, kRecordBytes - size);
          std::memcpy(staging_.data() + size, static_cast<const uint8_t*>(iov[j].iov_base) + at, n);
          size += n;
        }
      }
    }
    const net::tls::Session::Io io = session_->write(data, size);
    if (io.status == Status::kOk) {
      if (retry) {  // part of a committed record: counted as taken before
        retry_bytes_ -= io.bytes;
        std::memmove(staging_.data(), staging_.data() + io.bytes, retry_bytes_);
      } else {
        advance(io.bytes);
      }
      continue;
    }
    if (wants(io.status)) {
      // OpenSSL holds this record now and must be asked for these same bytes again: keep
      // them and count them as taken, so the core's next write may be anything.
      if (!retry) {
        if (data != staging_.data()) std::memcpy(staging_.data(), data, size);
        retry_bytes_ = size;
        advance(size);
      }
      write_wants_read_.store(io.status == Status::kWantRead, std::memory_order_relaxed);
      writable_.store(false, std::memory_order_relaxed);
      return taken;
    }
    *lost = session_->error();
    return taken;
  }
}

size_t TlsChannel::read(const iovec* iov, size_t count, bool* eof, std::string* lost) {
  size_t got = 0;
  for (size_t i = 0; i < count; ++i) {
    auto* base = static_cast<uint8_t*>(iov[i].iov_base);
    size_t offset = 0;
    while (offset < iov[i].iov_len) {
      MutexLock lock(mu_);
      if (ended_) return report_end_locked(got, eof, lost);
      const net::tls::Session::Io io = session_->read(base + offset, iov[i].iov_len - offset);
      if (io.status == Status::kOk) {
        offset += io.bytes;
        got += io.bytes;
        continue;
      }
      if (wants(io.status)) {
        read_wants_write_.store(io.status == Status::kWantWrite, std::memory_order_relaxed);
        // Nothing decrypted is left when OpenSSL wants the socket; checked, not assumed.
        readable_.store(session_->has_pending(), std::memory_order_relaxed);
        return got;
      }
      // close_notify, or the peer vanished (OpenSSL 3: "unexpected eof while reading"):
      // the end of the stream; else the error.
      ended_ = true;
      if (io.status != Status::kClosed && !at_eof(fd_.get())) end_ = session_->error();
      return report_end_locked(got, eof, lost);
    }
  }
  return got;  // full: more may wait inside the session, so readable_ stays set
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
  if (want_read) {
    events |= read_wants_write_.load(std::memory_order_relaxed) ? POLLOUT : POLLIN | POLLRDHUP;
  }
  if (want_write) events |= write_wants_read_.load(std::memory_order_relaxed) ? POLLIN : POLLOUT;
  return {fd_.get(), events, 0};
}

void TlsChannel::on_poll(short revents) {
  if ((revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    readable_.store(true, std::memory_order_relaxed);
    if (write_wants_read_.exchange(false, std::memory_order_relaxed)) {
      writable_.store(true, std::memory_order_relaxed);
    }
  }
  // A hang-up reported while writing: let the write notice it.
  if ((revents & (POLLOUT | POLLHUP | POLLERR)) != 0) {
    writable_.store(true, std::memory_order_relaxed);
    if (read_wants_write_.exchange(false, std::memory_order_relaxed)) {
      readable_.store(true, std::memory_order_relaxed);
    }
  }
}

void TlsChannel::close(Deadline deadline) {
  // A committed record goes out first, then close_notify after the gathered records, all
  // bounded by the deadline.
  bool notified = false;
  while (true) {
    Status status = Status::kOk;
    {
      MutexLock lock(mu_);
      if (retry_bytes_ > 0) {
        const net::tls::Session::Io io = session_->write(staging_.data(), retry_bytes_);
        status = io.status;
        if (status == Status::kOk) {
          retry_bytes_ -= io.bytes;
          std::memmove(staging_.data(), staging_.data() + io.bytes, retry_bytes_);
          continue;
        }
      } else {
        if (!notified) session_->shutdown();  // best effort: gathered behind the records
        notified = true;
        status = session_->flush();
        if (status == Status::kOk) break;
      }
    }
    if (!wants(status) || deadline.expired()) break;
    pollfd p{fd_.get(), static_cast<short>(status == Status::kWantWrite ? POLLOUT : POLLIN), 0};
    (void)::poll(&p, 1, deadline.poll_timeout_ms());
  }
  // What is left to read (usually the peer's own goodbye) is dropped, so that close()
  // sends FIN, not RST.
  net::end_sending(fd_.get());
}

void TlsChannel::shut_down() { ::shutdown(fd_.get(), SHUT_RDWR); }

}  // namespace tdist::transport::tcp
