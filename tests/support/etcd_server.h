// EtcdServer: a real single-member etcd for a test, on free loopback ports, its data in a
// fresh folder (in /dev/shm where there is one: fsync is then free), killed when the object
// goes (or the test process dies). Test-only.
//
// start() finds `etcd` on PATH and throws std::runtime_error saying how to install it when it
// is missing (a test that needs etcd fails rather than skips: CI installs it through
// scripts/setup.sh). Ports are picked by binding port 0 and releasing it; when etcd then
// cannot bind (another process took the port), start() tries again with new ports. It returns
// once etcd answers a KV request. Not thread-safe; call from the test's main thread.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/socket.h"
#include "support/temp_dir.h"

namespace tdist::test_support {

// The absolute path of `etcd` on PATH, or "".
inline std::string find_etcd() {
  const char* path = ::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (size_t pos = 0; pos <= dirs.size();) {
    size_t end = dirs.find(':', pos);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(pos, end - pos) + "/etcd";
    if (end > pos && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = end + 1;
  }
  return "";
}

class EtcdServer {
 public:
  EtcdServer() = default;
  ~EtcdServer() { stop(); }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  void start() {
    const std::string etcd = find_etcd();
    if (etcd.empty()) {
      throw std::runtime_error(
          "etcd is not installed (no `etcd` on PATH): install Debian's etcd-server "
          "(apt-get install etcd-server, as scripts/setup.sh does)");
    }
    const char* shm = "/dev/shm";
    dir_ = std::make_unique<TempDir>(std::filesystem::is_directory(shm)
                                         ? std::string(shm) + "/tdist_etcd"
                                         : std::string("tdist_etcd"));
    std::string last;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      const uint16_t peer_port = free_port();
      if (launch(etcd, peer_port, attempt)) return;
      last = read_file(log_path(attempt));
    }
    throw std::runtime_error("etcd did not start on free ports in 5 tries; its last log:\n" +
                             last.substr(last.size() > 3000 ? last.size() - 3000 : 0));
  }

  // SIGKILLs etcd (a lost store) and reaps it; no-op when not running.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  bool running() const { return pid_ > 0; }
  uint16_t port() const { return port_; }
  std::string host() const { return "127.0.0.1"; }
  std::string endpoint() const { return host() + ":" + std::to_string(port_); }

 private:
  static uint16_t free_port() { return net::listen_tcp("127.0.0.1", 0).port(); }

  std::string log_path(int attempt) const {
    return dir_->file("etcd" + std::to_string(attempt) + ".log");
  }

  // Starts etcd and waits until it answers; false (etcd reaped) when it exited first.
  bool launch(const std::string& etcd, uint16_t peer_port, int attempt) {
    const std::string client = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    std::vector<std::string> args = {etcd,
                                     "--name=test",
                                     "--data-dir=" + dir_->file("data" + std::to_string(attempt)),
                                     "--listen-client-urls=" + client,
                                     "--advertise-client-urls=" + client,
                                     "--listen-peer-urls=" + peer,
                                     "--initial-advertise-peer-urls=" + peer,
                                     "--initial-cluster=test=" + peer,
                                     "--log-level=error"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log =
        ::open(log_path(attempt).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the test
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log);
    if (pid_ < 0) throw std::runtime_error("fork failed");
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < give_up) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      try {
        auto connection =
            net::HttpConnection::open(host(), port_, Deadline::after(std::chrono::seconds(1)));
        if (connection
                .post("/v3/kv/range", R"({"key":"AA=="})", Deadline::after(std::chrono::seconds(2)))
                .status == 200) {
          return true;
        }
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop();
    return false;
  }

  std::unique_ptr<TempDir> dir_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

}  // namespace tdist::test_support
