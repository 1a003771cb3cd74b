// TcpChannel: the TCP transport's channel (core/channel.h) — one connected, non-blocking
// TCP socket to a peer. A peer may have several (TDIST_SOCKET_NSOCKS_PERPEER): the core
// stripes whole messages over them.
//
// write() is one sendmsg (MSG_DONTWAIT), read() one readv. readable()/writable() are flags:
// set by poll() reporting the socket ready, cleared when a read or write comes back short.
// close() shuts the sending side and drains what is left, so closing sends FIN, not RST.
// Failure: a reset or write error is reported as lost ("write failed: ..."), EOF as the
// end of the stream. Thread-safety: channel.h (the core serialises each direction).
#pragma once

#include <atomic>
#include <string>

#include "net/fd.h"
#include "transport/core/channel.h"

namespace tdist::transport::tcp {

class TcpChannel final : public core::Channel {
 public:
  // Takes a connected socket; `address` ("host:port") names the peer in messages.
  TcpChannel(net::Fd fd, std::string address, size_t socket_buffer_bytes);

  const char* kind() const override { return "tcp"; }
  std::string describe() const override { return "tcp " + address_; }
  size_t write(const iovec* iov, size_t count, std::string* lost) override;
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override;
  bool readable() override { return readable_.load(std::memory_order_relaxed); }
  bool writable() override { return writable_.load(std::memory_order_relaxed); }
  void refresh() override {
    readable_.store(true, std::memory_order_relaxed);
    writable_.store(true, std::memory_order_relaxed);
  }
  // A round trip costs less than 5% from here.
  size_t rendezvous_bytes() const override { return size_t{1} << 20; }
  void arm(bool) override {}
  void disarm() override {}
  pollfd poll_for(bool want_read, bool want_write) override;
  void on_poll(short revents) override;
  void close(Deadline deadline) override;
  void shut_down() override;

 private:
  net::Fd fd_;
  const std::string address_;
  std::atomic<bool> readable_{false};
  std::atomic<bool> writable_{true};
};

}  // namespace tdist::transport::tcp
