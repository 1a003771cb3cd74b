// TlsChannel: the TCP transport's channel (core/channel.h) when TLS is on — one connected,
// non-blocking TCP socket to a peer whose TLS session (net/tls.h) build_mesh (mesh.h) or
// the lazy mesh handshook, authenticated and exchanged the hello over. From then on the
// bytes go in frames sealed under keys exported from that session (net/sealed_stream.h):
// no more TLS records, so no copies and per-record work of OpenSSL's own.
//
// write() seals the iovecs' bytes, up to 64 KiB per frame, straight into its send buffer
// (256 KiB) and sends what it holds, as much as the socket takes; what the socket had no
// room for stays there, sent first next time (holds_unsent() brings the core back for it),
// and bytes are taken only while the buffer has room. read() receives as much as its
// receive buffer holds (several frames per recv) and opens each whole frame straight into
// the iovecs when they have room for all of it, else into a buffer of its own that the
// next reads drain. readable() stays true while opened bytes or whole frames wait.
// close() sends what is buffered, then shuts the sending side and drains like TcpChannel.
//
// Ownership: owns the socket and the session (kept for the exporter). Thread-safety: the
// core serialises each direction; a read and a write may run at once on two threads, each
// under its own lock.
// Failure: a socket error, or a frame that fails to open (tampered, cut or corrupt), is
// reported as lost ("TLS ..."); EOF between frames as the end of the stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "net/fd.h"
#include "net/sealed_stream.h"
#include "net/tls.h"
#include "tdist/thread_annotations.h"
#include "transport/core/channel.h"

namespace tdist::transport::tcp {

class TlsChannel final : public core::Channel {
 public:
  // Takes a connected socket and its established session, both ends at the same point of
  // the stream (sealed_stream.h); `address` ("host:port") names the peer in messages.
  TlsChannel(net::Fd fd, std::unique_ptr<net::tls::Session> session, std::string address,
             size_t socket_buffer_bytes);

  const char* kind() const override { return "tcp"; }
  std::string describe() const override { return "tcp+tls " + address_; }
  size_t write(const iovec* iov, size_t count, std::string* lost) override;
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override;
  bool readable() override { return readable_.load(std::memory_order_relaxed); }
  bool writable() override { return writable_.load(std::memory_order_relaxed); }
  bool holds_unsent() override { return unsent_.load(std::memory_order_acquire); }
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

  // Sealed frames buffered for one send, and received per recv.
  static constexpr size_t kBufferBytes = 256 * 1024;

 private:
  // Sends out_[out_begin_, out_end_) as far as the socket takes; false with *lost set when
  // the socket failed.
  bool send_locked(std::string* lost) TDIST_REQUIRES(send_mu_);
  // One whole frame at in_[in_begin_] opened into `iov` (room enough) or into plain_.
  bool open_frame_locked(const iovec* iov, size_t count, size_t room) TDIST_REQUIRES(recv_mu_);
  size_t report_end_locked(size_t got, bool* eof, std::string* lost) TDIST_REQUIRES(recv_mu_);

  net::Fd fd_;
  const std::string address_;
  const std::unique_ptr<net::tls::Session> session_;
  net::tls::SealedStream stream_;

  // The buffers are made at their first use: a lane that never carries bulk bytes (most
  // lanes of a large full mesh under a ring algorithm) holds none.
  Mutex send_mu_;
  std::unique_ptr<uint8_t[]> out_ TDIST_GUARDED_BY(send_mu_);  // sealed frames to send
  size_t out_begin_ TDIST_GUARDED_BY(send_mu_) = 0;
  size_t out_end_ TDIST_GUARDED_BY(send_mu_) = 0;

  Mutex recv_mu_;
  // Received bytes (frames, the last maybe partial), and a frame opened aside because it
  // did not fit the iovecs.
  std::unique_ptr<uint8_t[]> in_ TDIST_GUARDED_BY(recv_mu_);
  std::unique_ptr<uint8_t[]> plain_ TDIST_GUARDED_BY(recv_mu_);
  size_t in_begin_ TDIST_GUARDED_BY(recv_mu_) = 0;
  size_t in_end_ TDIST_GUARDED_BY(recv_mu_) = 0;
  size_t plain_begin_ TDIST_GUARDED_BY(recv_mu_) = 0;
  size_t plain_end_ TDIST_GUARDED_BY(recv_mu_) = 0;
  bool ended_ TDIST_GUARDED_BY(recv_mu_) = false;  // the stream ended or failed
  std::string end_ TDIST_GUARDED_BY(recv_mu_);     // the error ("" = the end of the stream)

  std::atomic<bool> readable_{true};  // cleared only when nothing waits here (see read())
  std::atomic<bool> writable_{true};
  std::atomic<bool> unsent_{false};  // out_ holds bytes
};

}  // namespace tdist::transport::tcp
