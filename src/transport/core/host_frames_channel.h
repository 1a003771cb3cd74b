// HostFramesChannel: a base for a channel that sends its host frames over another channel.
//
// A device-memory channel (cuda_ipc; the tests' host_device stand-in) moves device payloads
// by descriptor itself but leaves every host byte (headers, control frames, host payloads),
// readiness and sleep to a wrapped host channel (shm). This base forwards all of those
// calls, unchanged, to the wrapped channel; the subclass names itself and adds the device
// calls (channel.h). Ownership: owns the wrapped channel. Thread-safety: as the wrapped
// channel's (channel.h).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "transport/core/channel.h"

namespace tdist::transport::core {

class HostFramesChannel : public Channel {
 public:
  size_t write(const iovec* iov, size_t count, std::string* lost) override {
    return host_->write(iov, count, lost);
  }
  size_t read(const iovec* iov, size_t count, bool* eof, std::string* lost) override {
    return host_->read(iov, count, eof, lost);
  }
  size_t peek(const uint8_t** data) override { return host_->peek(data); }
  void consume(size_t bytes) override { host_->consume(bytes); }
  bool readable() override { return host_->readable(); }
  bool writable() override { return host_->writable(); }
  void refresh() override { host_->refresh(); }
  size_t rendezvous_bytes() const override { return host_->rendezvous_bytes(); }
  size_t single_copy_bytes() const override { return host_->single_copy_bytes(); }
  bool read_remote(void* dest, uint64_t remote_address, size_t bytes) override {
    return host_->read_remote(dest, remote_address, bytes);
  }

  void arm(bool want_write) override { host_->arm(want_write); }
  void disarm() override { host_->disarm(); }
  pollfd poll_for(bool want_read, bool want_write) override {
    return host_->poll_for(want_read, want_write);
  }
  void on_poll(short revents) override { host_->on_poll(revents); }
  void close(Deadline deadline) override { host_->close(deadline); }
  void shut_down() override { host_->shut_down(); }

 protected:
  explicit HostFramesChannel(std::unique_ptr<Channel> host) : host_(std::move(host)) {}
  const Channel& host() const { return *host_; }

 private:
  const std::unique_ptr<Channel> host_;
};

}  // namespace tdist::transport::core
