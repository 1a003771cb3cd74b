// TlsChannel: the TCP transport's channel (core/channel.h) when TLS is on — one connected,
// non-blocking TCP socket to a peer, every byte through its TLS session (net/tls.h), which
// build_mesh (mesh.h) handshook and authenticated.
//
// write() coalesces the small leading iovecs (a header, a short payload) into one record
// of up to 16 KiB (one SSL_write), and hands larger payloads to SSL_write as they are, a
// record at a time; the session gathers the records (up to 256 KiB) and each write() ends
// with one send of them (net::tls::Session::gather_writes), not a send per record. What the
// socket had no room for stays gathered: holds_unsent() brings the core back to write it.
// When even the gathering is full, a record stays committed inside the session (OpenSSL
// encrypted it already): write() copies it to its staging buffer, counts it as taken, and
// sends it first on the next call (or in close()), so the core may write whatever it likes
// next (OpenSSL requires the same bytes on a retry); holds_unsent() covers it too.
// The session reads ahead as much (net::tls::Session::read_ahead): one recv for several
// records, not two per record. read() fills the iovecs from the session until they are
// full or it has nothing. readable() stays true while decrypted bytes wait inside the
// session (the socket will not signal them again). A read that needs the socket writable,
// or a write that needs it readable (TLS may), makes poll_for() ask for that event.
// close() sends what is gathered and the TLS close_notify, then shuts the sending side and
// drains like TcpChannel.
//
// Ownership: owns the socket and the session. Thread-safety: the core serialises each
// direction, but a read and a write may run at once on two threads; OpenSSL allows one
// thread at a time on a session, so every session call holds mu_.
// Failure: a TLS or socket error is reported as lost ("TLS write: ..."), the peer's
// close_notify or EOF as the end of the stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/fd.h"
#include "net/tls.h"
#include "tdist/thread_annotations.h"
#include "transport/core/channel.h"

namespace tdist::transport::tcp {

class TlsChannel final : public core::Channel {
 public:
  // Takes a connected socket and its established session; `address` ("host:port") names
  // the peer in messages.
  TlsChannel(net::Fd fd, std::unique_ptr<net::tls::Session> session, std::string address,
             size_t socket_buffer_bytes);

  const char* kind() const override { return "tcp"; }
  std::string describe() const override { return "tcp+tls " + address_; }
  size_t write(const iovec* iov, size_t count, std::string* lost) override;
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override;
  bool readable() override { return readable_.load(std::memory_order_relaxed); }
  bool writable() override { return writable_.load(std::memory_order_relaxed); }
  bool holds_unsent() override;
  void refresh() override {
    readable_.store(true, std::memory_order_relaxed);
    writable_.store(true, std::memory_order_relaxed);
  }
  size_t rendezvous_bytes() const override { return size_t{1} << 20; }  // as TcpChannel
  void arm(bool) override {}
  void disarm() override {}
  pollfd poll_for(bool want_read, bool want_write) override;
  void on_poll(short revents) override;
  void close(Deadline deadline) override;
  void shut_down() override;

  // The most bytes of one TLS record: the staging buffer's size.
  static constexpr size_t kRecordBytes = 16 * 1024;
  // Records gathered for one send (net::tls::Session::gather_writes), and read ahead.
  static constexpr size_t kGatherBytes = 256 * 1024;

 private:
  // write() without the flush of the gathered records.
  size_t write_records(const iovec* iov, size_t count, std::string* lost) TDIST_EXCLUDES(mu_);
  size_t report_end_locked(size_t got, bool* eof, std::string* lost) TDIST_REQUIRES(mu_);

  net::Fd fd_;
  const std::string address_;
  Mutex mu_;
  const std::unique_ptr<net::tls::Session> session_ TDIST_PT_GUARDED_BY(mu_);
  // Small iovecs gathered into one record; or the committed record to send again.
  std::vector<uint8_t> staging_ TDIST_GUARDED_BY(mu_);
  size_t retry_bytes_ TDIST_GUARDED_BY(mu_) = 0;  // > 0: staging_ holds a committed record
  bool ended_ TDIST_GUARDED_BY(mu_) = false;      // the session reported the end or an error
  std::string end_ TDIST_GUARDED_BY(mu_);         // the error ("" = the end of the stream)
  // readable_ is cleared only when the session has nothing decrypted left (see read()).
  std::atomic<bool> readable_{true};
  std::atomic<bool> writable_{true};
  std::atomic<bool> read_wants_write_{false};  // the last read stopped on kWantWrite
  std::atomic<bool> write_wants_read_{false};  // the last write stopped on kWantRead
};

}  // namespace tdist::transport::tcp
