// store_attack_bench: the TCPStore server's peak memory under each attack of issue 14,
// against its buffer budget, and whether it keeps serving meanwhile.
//
// For each attack it forks a fresh child that runs only a TCPStoreServer (127.0.0.1, port 0,
// the port passed back through a pipe) with TDIST_STORE_MAX_BUFFER_BYTES set to the budget,
// connects a good client that sets a key, reads the child's baseline VmRSS from
// /proc/<pid>/status, runs the attack from this process (raw sockets speaking frames), checks
// during the attack that the good client and a fresh client can still set and get, ends the
// attack, checks a fresh client again and that the key set before is intact, and reads the
// child's peak RSS (VmHWM). One markdown row per attack: what was sent, peak RSS over the
// baseline, the budget, the limit the row is held to, whether the server kept serving, and
// the slowest check (for the parked-waits attack: from closing them all to a fresh client
// served), and the longest round trip of a client that gets a key in a loop meanwhile.
//
//   store_attack_bench [--budget-mib N] [--only NAME] [--server-log FILE]
//
// --budget-mib: TDIST_STORE_MAX_BUFFER_BYTES for the servers (default 256); the other
// TDIST_STORE_* settings come from the environment and are printed. --only runs the attacks
// whose name contains NAME. --server-log appends the servers' log lines to FILE (default:
// discarded).
//
// The limit: budget + slack, the slack being 32 MiB (allocator, the loop's read chunk,
// decoding temporaries) + the largest single buffer, min(budget, frame limit) (decoding copies
// a value out of its frame, and a std::vector that doubles briefly holds the old and the new
// copy) + 128 KiB per attacking connection (the 64 KiB that always fits the budget, plus
// bookkeeping) + the data the attack stored in the map (its own keys). An attack whose
// growth passes 2 GiB stops escalating (the row says so), to spare the machine.
//
// Exits 1 when a server stopped serving or its peak RSS exceeded the limit, 2 on bad usage.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.h"
#include "store/tcp_store_protocol.h"
#include "tdist/error.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"

namespace {

using namespace std::chrono_literals;
using tdist::Deadline;
using tdist::store_wire::Command;
using tdist::store_wire::FrameWriter;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kKiB = size_t{1} << 10;
constexpr long kSafetyKiB = 2048L * 1024;  // growth at which an attack stops escalating
constexpr char kToken[] = "store-attack-bench-token";

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// ---- the server child ----------------------------------------------------------------------

struct ServerSpec {
  std::string token;  // "" = no authentication
  rlim_t nofile = 0;  // 0 = inherited; else soft and hard RLIMIT_NOFILE
};

struct Child {
  pid_t pid = -1;
  int control = -1;  // closing it tells the child to stop
  uint16_t port = 0;
};

// Forks a child that serves until `control` closes. The parent has no threads when it forks.
Child spawn_server(const ServerSpec& spec, const std::string& log_path) {
  int port_pipe[2];
  int control_pipe[2];
  if (::pipe(port_pipe) != 0 || ::pipe(control_pipe) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(port_pipe[0]);
    ::close(control_pipe[1]);
    const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log >= 0) ::dup2(log, STDERR_FILENO);
    if (spec.nofile > 0) {
      const rlimit rl{spec.nofile, spec.nofile};
      if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(3);
    }
    uint16_t port = 0;
    std::unique_ptr<tdist::TCPStoreServer> server;
    try {
      server = tdist::TCPStoreServer::start("127.0.0.1", 0, spec.token);
      port = server->port();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "server failed to start: %s\n", e.what());
    }
    if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port) || port == 0) ::_exit(4);
    char byte;
    while (::read(control_pipe[0], &byte, 1) != 0) {  // EOF: stop
    }
    server->stop();
    ::_exit(0);
  }
  ::close(port_pipe[1]);
  ::close(control_pipe[0]);
  Child c;
  c.pid = pid;
  c.control = control_pipe[1];
  if (::read(port_pipe[0], &c.port, sizeof(c.port)) != sizeof(c.port) || c.port == 0) {
    std::fprintf(stderr, "the server child did not start\n");
    std::exit(1);
  }
  ::close(port_pipe[0]);
  return c;
}

void stop_server(Child& c) {
  ::close(c.control);
  for (int i = 0; i < 100; ++i) {  // 5 s to stop, then killed
    if (::waitpid(c.pid, nullptr, WNOHANG) == c.pid) return;
    std::this_thread::sleep_for(50ms);
  }
  ::kill(c.pid, SIGKILL);
  ::waitpid(c.pid, nullptr, 0);
}

struct Mem {
  long hwm_kib = 0;  // VmHWM: peak resident set
  long rss_kib = 0;  // VmRSS
};

Mem read_mem(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  Mem m;
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) m.hwm_kib = std::stol(line.substr(6));
    if (line.rfind("VmRSS:", 0) == 0) m.rss_kib = std::stol(line.substr(6));
  }
  return m;
}

// The child's user + system CPU time, in seconds (/proc/<pid>/stat fields 14 and 15).
double cpu_seconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 2));  // from field 3 (state) on
  std::string field;
  unsigned long long utime = 0;
  unsigned long long stime = 0;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// ---- raw sockets ---------------------------------------------------------------------------

const std::vector<uint8_t>& zeros() {  // filler: values, and empty keys (u32 size 0) for WAIT
  static const std::vector<uint8_t> z(kMiB, 0);
  return z;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// The first bytes of a frame of `length` (bytes after the length field): length, version,
// code, request id.
std::vector<uint8_t> frame_head(uint32_t length, Command code, uint32_t request_id) {
  std::vector<uint8_t> out;
  put_u32(out, length);
  out.push_back(tdist::store_wire::kVersion);
  out.push_back(static_cast<uint8_t>(code));
  put_u32(out, request_id);
  return out;
}

// Sends what the socket takes until `until`; returns the bytes sent (fewer on a closed
// connection or at the deadline).
size_t send_until(int fd, const uint8_t* data, size_t size, Clock::time_point until) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::send(fd, data + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long>(left.count(), 100)));
      continue;
    }
    break;  // the server closed it
  }
  return done;
}

size_t send_until(int fd, const std::vector<uint8_t>& bytes, Clock::time_point until) {
  return send_until(fd, bytes.data(), bytes.size(), until);
}

// Streams `size` filler bytes; returns how many went.
size_t send_filler(int fd, size_t size, Clock::time_point until) {
  size_t done = 0;
  while (done < size) {
    const size_t n = std::min(size - done, zeros().size());
    const size_t sent = send_until(fd, zeros().data(), n, until);
    done += sent;
    if (sent < n) break;
  }
  return done;
}

// Whether the server closed `fd` (within `wait`); drains what it sent.
bool closed_by_peer(int fd, std::chrono::milliseconds wait) {
  const auto until = Clock::now() + wait;
  uint8_t buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n > 0) continue;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

// Reads one reply frame; its header, and the payload when `payload` is given.
tdist::store_wire::FrameHeader read_reply(int fd, std::vector<uint8_t>* payload,
                                          std::chrono::milliseconds wait) {
  uint8_t header[tdist::store_wire::kHeaderBytes];
  tdist::net::read_full(fd, header, sizeof(header), Deadline::after(wait), "server");
  const auto h = tdist::store_wire::decode_header(header);
  if (payload != nullptr) {
    payload->resize(h.payload_size());
    tdist::net::read_full(fd, payload->data(), payload->size(), Deadline::after(wait), "server");
  }
  return h;
}

// "ok" or "error: <why>" for the next reply on `fd` (an error's text is read, a value not).
std::string next_reply_status(int fd) {
  try {
    uint8_t header[tdist::store_wire::kHeaderBytes];
    tdist::net::read_full(fd, header, sizeof(header), Deadline::after(2s), "server");
    const auto h = tdist::store_wire::decode_header(header);
    if (h.code == static_cast<uint8_t>(tdist::store_wire::Status::kOk)) return "ok";
    std::vector<uint8_t> payload(std::min<size_t>(h.payload_size(), 4096));
    tdist::net::read_full(fd, payload.data(), payload.size(), Deadline::after(2s), "server");
    std::string why(payload.begin() + std::min<size_t>(4, payload.size()), payload.end());
    return "error: " + why.substr(0, 90) + (why.size() > 90 ? "..." : "");
  } catch (const std::exception& e) {
    return std::string("no reply (") + e.what() + ")";
  }
}

// ---- one attack's run ----------------------------------------------------------------------

struct Settings {
  size_t budget = 0;
  size_t max_value = 0;
  size_t max_key = 0;
  size_t max_frame = 0;
  size_t max_connections = 0;
  size_t max_waits = 0;
  std::chrono::milliseconds frame_timeout{0};
};

struct Run {
  const Settings& s;
  Child child;
  std::string token;
  Mem baseline;
  std::unique_ptr<tdist::TCPStore> good;  // connected before the attack; set "before"
  std::string sent;                       // what was sent, in words
  uint64_t sent_bytes = 0;
  size_t stored = 0;       // bytes the attack put in the map
  size_t connections = 0;  // attacking connections
  bool serving = true;
  bool expectation_met = true;  // the attack-specific check (refusal, no spinning)
  bool capped = false;          // stopped escalating at the safety cap
  double check_ms = 0;          // slowest check
  std::vector<std::string> notes;

  explicit Run(const Settings& settings) : s(settings) {}

  std::unique_ptr<tdist::TCPStore> client(const std::optional<std::string>& auth) {
    tdist::TCPStoreOptions o;
    o.port = child.port;
    o.timeout = 10s;
    o.connect_timeout = 10s;
    o.auth_token = auth;
    return std::make_unique<tdist::TCPStore>("127.0.0.1", o);
  }
  std::unique_ptr<tdist::TCPStore> client() { return client(token); }

  tdist::net::Fd raw() {
    return tdist::net::connect_tcp("127.0.0.1", child.port, Deadline::after(5s));
  }

  long growth_kib() const { return read_mem(child.pid).hwm_kib - baseline.rss_kib; }
  // Whether the child holds over kSafetyKiB more than at the baseline now (not at its peak:
  // a transient peak does not stop the next step).
  bool over_safety() {
    if (read_mem(child.pid).rss_kib - baseline.rss_kib <= kSafetyKiB) return false;
    capped = true;
    return true;
  }

  // The good client sets and gets, and (with `fresh`) a new client does too, finding the key
  // set before the attack. Returns the milliseconds it took; a failure clears `serving`.
  double check(bool fresh, const std::string& when) {
    const auto start = Clock::now();
    try {
      good->set("probe", std::string_view("p"));
      if (tdist::to_string(good->get("before", Deadline::after(10s))) != "1") {
        throw std::runtime_error("the key set before the attack changed");
      }
      if (fresh) {
        auto c = client();
        c->set("fresh", std::string_view("f"));
        if (tdist::to_string(c->get("fresh", Deadline::after(10s))) != "f" ||
            tdist::to_string(c->get("before", Deadline::after(10s))) != "1") {
          throw std::runtime_error("a fresh client read wrong values");
        }
      }
    } catch (const std::exception& e) {
      serving = false;
      notes.push_back("check " + when + " failed: " + e.what());
    }
    const double ms = ms_since(start);
    check_ms = std::max(check_ms, ms);
    return ms;
  }

  // Waits until the child's RSS has not moved for 300 ms (at most `most`).
  void settle(std::chrono::milliseconds most) {
    const auto end = Clock::now() + most;
    long last = -1;
    int stable = 0;
    while (Clock::now() < end && stable < 3) {
      std::this_thread::sleep_for(100ms);
      const long rss = read_mem(child.pid).rss_kib;
      stable = std::labs(rss - last) < 1024 ? stable + 1 : 0;
      last = rss;
    }
  }
};

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / static_cast<double>(kMiB));
  return buf;
}

// ---- the attacks ---------------------------------------------------------------------------

void set_value(Run& r, const std::string& key, size_t size) {
  r.good->set(key, tdist::Bytes(size, 'm'));
  r.stored += size;
  r.sent_bytes += size;
}

// Connections each pipelining `per_conn` copies of `frames`, replies never read.
std::vector<tdist::net::Fd> pipeline(Run& r, int conns, const std::vector<uint8_t>& frames) {
  std::vector<tdist::net::Fd> fds;
  for (int i = 0; i < conns; ++i) {
    fds.push_back(r.raw());
    r.sent_bytes += send_until(fds.back().get(), frames, Clock::now() + 500ms);
  }
  r.connections += static_cast<size_t>(conns);
  return fds;
}

// 1: MULTI_GET naming a 1 MiB value `names` times, 32 pipelined on each of 8 connections.
void multi_get(Run& r, size_t names) {
  set_value(r, "mib", kMiB);
  const std::vector<std::string> keys(names, "mib");
  std::vector<uint8_t> frames;
  for (uint32_t id = 1; id <= 32; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(Command::kMultiGet), id).keys(keys).finish();
  }
  auto fds = pipeline(r, 8, frames);
  r.sent = "8 conns x 32 MULTI_GET of 'mib' (1 MiB) x" + std::to_string(names);
  r.settle(3s);
  r.check(true, "during");
  r.notes.push_back("conn 1's first reply: " + next_reply_status(fds[0].get()));
  r.notes.push_back("conn 8's first reply: " + next_reply_status(fds[7].get()));
}

void multi_get_x1000(Run& r) { multi_get(r, 1000); }

void multi_get_largest(Run& r) {
  // The most names whose reply fits both a frame and the budget: the largest reply built.
  const size_t room = std::min(r.s.max_frame, r.s.budget) - 64 * kKiB;
  multi_get(r, room / (kMiB + 4));
}

// 2: pipelined GETs of one value, replies never read.
void pipelined_gets(Run& r, size_t value, int conns, uint32_t gets) {
  set_value(r, "v", value);
  std::vector<uint8_t> frames;
  for (uint32_t id = 1; id <= gets; ++id) {
    FrameWriter(frames, static_cast<uint8_t>(Command::kGet), id)
        .bytes(std::string_view("v"))
        .finish();
  }
  std::vector<tdist::net::Fd> fds;
  for (int i = 0; i < conns && !r.over_safety(); ++i) {
    auto more = pipeline(r, 1, frames);
    fds.push_back(std::move(more[0]));
    if (i % 4 == 3) r.settle(1s);
  }
  r.sent =
      std::to_string(fds.size()) + " conns x " + std::to_string(gets) + " GETs of a " +
      (value >= kMiB ? mib(static_cast<double>(value)) : std::to_string(value / kKiB) + " KiB") +
      " value";
  r.settle(3s);
  r.check(true, "during");
  r.notes.push_back("conn 1's first reply: " + next_reply_status(fds.front().get()));
  r.notes.push_back("last conn's first reply: " + next_reply_status(fds.back().get()));
}

void pipelined_gets_1mib(Run& r) { pipelined_gets(r, kMiB, 16, 2000); }
// Replies of 60 KiB fit the always-fits allowance (64 KiB): only the read pause bounds them.
void pipelined_gets_60kib(Run& r) { pipelined_gets(r, 60 * kKiB, 24, 1200); }

// 3: WAITs over as many (empty, missing) keys as one frame holds, one after another.
void wait_max_keys(Run& r) {
  // The largest frame the budget admits (a larger one is refused at its header).
  const size_t frame = std::min(r.s.max_frame, r.s.budget - kMiB);  // after the length field
  const uint32_t keys = static_cast<uint32_t>((frame - 6 - 4) / 4);
  const uint32_t length = 6 + 4 + 4 * keys;
  auto fd = r.raw();
  r.connections = 1;
  int sent = 0;
  for (uint32_t k = 1; k <= 4 && !r.over_safety(); ++k) {
    std::vector<uint8_t> head = frame_head(length, Command::kWait, k);
    put_u32(head, keys);
    const auto until = Clock::now() + 20s;
    size_t n = send_until(fd.get(), head, until);
    n += send_filler(fd.get(), size_t{4} * keys, until);
    std::vector<uint8_t> ping;
    FrameWriter(ping, static_cast<uint8_t>(Command::kPing), 1000 + k).finish();
    n += send_until(fd.get(), ping, until);
    r.sent_bytes += n;
    if (n != tdist::store_wire::kLengthBytes + length + ping.size()) {
      r.notes.push_back("WAIT " + std::to_string(k) + " cut short: the server closed");
      break;
    }
    const double ms = r.check(true, "right after WAIT " + std::to_string(k));
    // Replies up to the PING's: a refused WAIT's error comes first; a parked one says nothing.
    std::string outcome = "parked";
    try {
      std::vector<uint8_t> payload;
      for (int i = 0; i < 2; ++i) {
        const auto h = read_reply(fd.get(), &payload, 60s);
        if (h.request_id == 1000 + k) break;
        std::string why(payload.begin() + std::min<size_t>(4, payload.size()), payload.end());
        outcome = "refused";
        if (k == 1) r.notes.push_back("WAIT 1 refused: " + why.substr(0, 160));
      }
    } catch (const std::exception& e) {
      r.notes.push_back(std::string("no PING reply: ") + e.what());
      break;
    }
    ++sent;
    r.notes.push_back("WAIT " + std::to_string(k) + " " + outcome + ", a check right after took " +
                      std::to_string(static_cast<int>(ms)) + " ms, peak growth " +
                      mib(static_cast<double>(r.growth_kib()) * kKiB));
  }
  r.sent = std::to_string(sent) + " WAIT(s) of " + std::to_string(keys) + " empty keys (" +
           mib(static_cast<double>(length) + 4) + " frames), one after another";
  r.settle(2s);
  r.check(true, "during");
}

// 4: SET frames announcing the largest value, half-sent, held open on 64 connections.
void half_sent_frames(Run& r) {
  constexpr int kConns = 64;
  const std::string key = "half";
  const uint32_t length = static_cast<uint32_t>(6 + 4 + key.size() + 4 + r.s.max_value);
  std::vector<uint8_t> head = frame_head(length, Command::kSet, 1);
  put_u32(head, static_cast<uint32_t>(key.size()));
  head.insert(head.end(), key.begin(), key.end());
  put_u32(head, static_cast<uint32_t>(r.s.max_value));
  const size_t target = (tdist::store_wire::kLengthBytes + length) / 2;
  std::vector<tdist::net::Fd> fds;
  std::vector<size_t> done(kConns, 0);
  for (int i = 0; i < kConns; ++i) {
    fds.push_back(r.raw());
    const auto until = Clock::now() + 200ms;
    done[i] = send_until(fds.back().get(), head, until);
    if (done[i] == head.size()) done[i] += send_filler(fds.back().get(), 64 * kKiB, until);
  }
  r.connections = kConns;
  std::this_thread::sleep_for(300ms);
  std::vector<bool> open(kConns);
  for (int i = 0; i < kConns; ++i) open[i] = !closed_by_peer(fds[i].get(), 0ms);
  // The survivors go on to half of their frame, a MiB at a time each in turn.
  const auto end = Clock::now() + 5s;
  bool progress = true;
  while (progress && Clock::now() < end && !r.over_safety()) {
    progress = false;
    for (int i = 0; i < kConns; ++i) {
      if (!open[i] || done[i] >= target) continue;
      const size_t want = std::min(kMiB, target - done[i]);
      const size_t n = send_filler(fds[i].get(), want, Clock::now() + 50ms);
      done[i] += n;
      if (n > 0) progress = true;
    }
  }
  int survivors = 0;
  size_t held = 0;
  for (int i = 0; i < kConns; ++i) {
    r.sent_bytes += done[i];
    if (open[i] && !closed_by_peer(fds[i].get(), 0ms)) {
      ++survivors;
      held += done[i];
    }
  }
  r.sent = "64 conns x SET header announcing " + mib(static_cast<double>(r.s.max_value)) +
           ", then up to half of it";
  r.settle(2s);
  r.check(true, "during");
  r.notes.push_back(std::to_string(survivors) + " of 64 held open with " +
                    mib(static_cast<double>(held)) + " sent; the rest closed at the header");
}

// 5: 64 connections x the per-connection maximum of parked GETs, then all closed at once.
void parked_waits_close(Run& r) {
  constexpr int kConns = 64;
  const uint32_t waits = static_cast<uint32_t>(std::min<size_t>(r.s.max_waits, 100000));
  std::vector<tdist::net::Fd> fds;
  for (int c = 0; c < kConns; ++c) {
    std::vector<uint8_t> frames;
    for (uint32_t id = 1; id <= waits; ++id) {
      FrameWriter(frames, static_cast<uint8_t>(Command::kGet), id)
          .bytes("never/" + std::to_string(c) + "/" + std::to_string(id))
          .finish();
    }
    FrameWriter(frames, static_cast<uint8_t>(Command::kPing), waits + 1).finish();
    fds.push_back(r.raw());
    r.sent_bytes += send_until(fds.back().get(), frames, Clock::now() + 5s);
  }
  r.connections = kConns;
  int parked = 0;
  for (auto& fd : fds) {
    try {
      std::vector<uint8_t> payload;
      if (read_reply(fd.get(), &payload, 10s).request_id == waits + 1) ++parked;
    } catch (const std::exception&) {
    }
  }
  r.sent = "64 conns x " + std::to_string(waits) + " GETs of missing keys, then all closed";
  r.check(true, "with the waits parked");
  const auto start = Clock::now();
  fds.clear();  // closes all 64
  r.check_ms = 0;
  r.check(true, "after closing");
  const double ms = ms_since(start);
  r.check_ms = ms;
  r.notes.push_back(std::to_string(parked) + " of 64 conns had all their GETs parked; " +
                    "close-all to fresh client served: " + std::to_string(static_cast<int>(ms)) +
                    " ms");
}

// 6: APPEND to one key, 16 MiB at a time, past TDIST_STORE_MAX_VALUE_BYTES.
void oversized_append(Run& r) {
  auto c = r.client();
  r.connections = 1;
  const tdist::Bytes chunk(16 * kMiB, 'a');
  const size_t most = r.s.max_value / chunk.size() + 2;
  size_t ok = 0;
  bool refused = false;
  for (size_t i = 0; i < most; ++i) {
    try {
      c->append("grow", chunk);
      ++ok;
      r.sent_bytes += chunk.size();
    } catch (const tdist::InvalidArgument& e) {
      r.sent_bytes += chunk.size();
      refused = true;
      std::string why = e.what();
      r.notes.push_back("append " + std::to_string(i + 1) + " refused: " + why.substr(0, 160));
      break;
    }
  }
  r.stored = ok * chunk.size();
  r.sent = std::to_string(ok + (refused ? 1 : 0)) + " APPENDs of 16 MiB to one key";
  if (!refused) {
    r.expectation_met = false;
    r.notes.push_back("no append was refused");
  }
  r.check(true, "during");
  try {  // the refused client's connection goes on
    c->set("after-refusal", std::string_view("x"));
  } catch (const std::exception& e) {
    r.notes.push_back(std::string("the refused client failed afterwards: ") + e.what());
  }
}

// 7: the child's RLIMIT_NOFILE at 1024, and 2000 connections opened and held, silent (7b:
// to a server with a token). The server closes the oldest silent ones to make room, so the
// existing client and new ones are served meanwhile.
void fd_exhaustion(Run& r) {
  constexpr int kConns = 2000;
  const double cpu_before = cpu_seconds(r.child.pid);
  const auto start = Clock::now();
  std::vector<tdist::net::Fd> fds;
  int failed = 0;
  for (int i = 0; i < kConns; ++i) {
    try {
      fds.push_back(r.raw());
    } catch (const std::exception&) {
      ++failed;
    }
  }
  r.connections = kConns;
  for (int i = 0; i < 4; ++i) {  // held 2 s, the existing client and a new one checked
    std::this_thread::sleep_for(500ms);
    r.check(true, "during (existing and new clients)");
  }
  const double cpu = cpu_seconds(r.child.pid) - cpu_before;
  const double wall = ms_since(start) / 1000;
  int dropped = 0;
  for (auto& fd : fds) dropped += closed_by_peer(fd.get(), 0ms) ? 1 : 0;
  r.sent = "2000 silent connections (server RLIMIT_NOFILE 1024)";
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "%d held, %d closed by the server, %d failed to connect; server CPU %.2f s "
                "over %.2f s",
                static_cast<int>(fds.size()) - dropped, dropped, failed, cpu, wall);
  r.notes.push_back(buf);
  if (cpu > 0.5 * wall) {
    r.expectation_met = false;
    r.notes.push_back("the server spins");
  }
  fds.clear();
  std::this_thread::sleep_for(200ms);
}

// 8: 1000 unauthenticated connections to a server with a token.
void auth_flood(Run& r) {
  constexpr int kConns = 1000;
  const std::string http = "GET / HTTP/1.1\r\nHost: store\r\n\r\n";
  const std::vector<uint8_t> garbage(http.begin(), http.end());
  const std::vector<uint8_t> large = frame_head(0x10000000, Command::kAuthHello, 1);
  std::vector<uint8_t> wrong;  // a small frame, but not AUTH_HELLO
  FrameWriter(wrong, static_cast<uint8_t>(Command::kSet), 1)
      .bytes(std::string_view("k"))
      .bytes(std::string_view("v"))
      .finish();
  std::vector<uint8_t> hello;  // a well-formed AUTH_HELLO, then never a proof
  FrameWriter(hello, static_cast<uint8_t>(Command::kAuthHello), 1)
      .bytes(std::span<const uint8_t>(zeros().data(), 16))
      .finish();
  const std::vector<uint8_t>* kinds[] = {&garbage, &large, &wrong, &hello, nullptr};
  const char* names[] = {"HTTP garbage", "256 MiB header", "SET unauthenticated", "hello, no proof",
                         "silent"};
  std::vector<tdist::net::Fd> fds;
  for (int i = 0; i < kConns; ++i) {
    fds.push_back(r.raw());
    const auto* bytes = kinds[i % 5];
    if (bytes != nullptr)
      r.sent_bytes += send_until(fds.back().get(), *bytes, Clock::now() + 100ms);
  }
  r.connections = kConns;
  r.sent = "1000 conns: HTTP garbage, 256 MiB headers, SET, AUTH_HELLO without proof, silence";
  r.settle(2s);
  r.check(true, "during (authenticated)");
  try {
    auto intruder = r.client(std::string(""));
    intruder->set("intruder", std::string_view("x"));
    r.expectation_met = false;
    r.notes.push_back("an unauthenticated client was served");
  } catch (const std::exception&) {
  }
  int closed[5] = {};
  for (int i = 0; i < kConns; ++i) closed[i % 5] += closed_by_peer(fds[i].get(), 0ms) ? 1 : 0;
  std::string line = "closed by the server within ~2 s:";
  for (int k = 0; k < 5; ++k) {
    line += std::string(k ? "," : "") + " " + names[k] + " " + std::to_string(closed[k]) + "/200";
  }
  r.notes.push_back(line + " (the last two wait for the frame timeout)");
}

// 9: connections in turn each SET a 64 MiB value and GET it back, then stay open, idle.
void retained_buffers(Run& r) {
  constexpr int kConns = 16;
  const tdist::Bytes value(64 * kMiB, 'r');
  std::vector<std::unique_ptr<tdist::TCPStore>> clients;
  for (int i = 0; i < kConns && !r.over_safety(); ++i) {
    clients.push_back(r.client());
    clients.back()->set("big", value);
    clients.back()->get("big", Deadline::after(10s));
    r.sent_bytes += value.size();
  }
  r.stored = value.size();
  r.connections = clients.size();
  r.sent = std::to_string(clients.size()) + " conns in turn: SET 64 MiB, GET it, stay idle";
  r.settle(2s);
  r.check(true, "during");
}

// A client of its own, connected before the attack, that gets a key in a loop on a thread
// while the attack runs: the longest round trip is the longest the server left it unserved.
class Prober {
 public:
  explicit Prober(Run& r) : run_(r), client_(r.client()) {
    client_->set("prober", std::string_view("1"));
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        const auto start = Clock::now();
        try {
          client_->get("prober", Deadline::after(10s));
        } catch (const std::exception& e) {
          error_ = e.what();
          return;
        }
        longest_ms_ = std::max(longest_ms_, ms_since(start));
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  ~Prober() { finish(); }
  // Stops the loop; the longest round trip in ms. A failure clears the run's `serving`.
  double finish() {
    if (thread_.joinable()) {
      stop_.store(true);
      thread_.join();
      if (!error_.empty()) {
        run_.serving = false;
        run_.notes.push_back("the prober failed: " + error_);
      }
    }
    return longest_ms_;
  }

 private:
  Run& run_;
  std::unique_ptr<tdist::TCPStore> client_;
  std::atomic<bool> stop_{false};
  double longest_ms_ = 0;
  std::string error_;
  std::thread thread_;
};

struct Attack {
  const char* name;
  void (*run)(Run&);
  ServerSpec spec;
};

const std::vector<Attack>& attacks() {
  static const std::vector<Attack> list = {
      {"1a multi_get_x1000", multi_get_x1000, {}},
      {"1b multi_get_largest_reply", multi_get_largest, {}},
      {"2a pipelined_get_1mib", pipelined_gets_1mib, {}},
      {"2b pipelined_get_60kib", pipelined_gets_60kib, {}},
      {"3 wait_max_keys", wait_max_keys, {}},
      {"4 half_sent_frames", half_sent_frames, {}},
      {"5 parked_waits_close", parked_waits_close, {}},
      {"6 oversized_append", oversized_append, {}},
      {"7 fd_exhaustion", fd_exhaustion, {"", 1024}},
      {"7b fd_exhaustion_token", fd_exhaustion, {kToken, 1024}},
      {"8 unauthenticated_flood", auth_flood, {kToken, 0}},
      {"9 retained_buffers", retained_buffers, {}},
  };
  return list;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  for (char& ch : out) {
    if (ch == '|' || ch == '\n') ch = ' ';
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  long budget_mib = 256;
  std::string only;
  std::string log_path = "/dev/null";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 < argc && flag == "--budget-mib") {
      budget_mib = std::atol(argv[++i]);
    } else if (i + 1 < argc && flag == "--only") {
      only = argv[++i];
    } else if (i + 1 < argc && flag == "--server-log") {
      log_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--budget-mib N] [--only NAME] [--server-log FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  if (budget_mib < 2) return 2;
  ::signal(SIGPIPE, SIG_IGN);
  rlimit rl{};  // the attacks hold a few thousand sockets
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ::setenv("TDIST_STORE_MAX_BUFFER_BYTES",
           std::to_string(static_cast<size_t>(budget_mib) * kMiB).c_str(), 1);
  Settings s;
  s.budget = static_cast<size_t>(tdist::setting_int("TDIST_STORE_MAX_BUFFER_BYTES"));
  s.max_value = static_cast<size_t>(tdist::setting_int("TDIST_STORE_MAX_VALUE_BYTES"));
  s.max_key = static_cast<size_t>(tdist::setting_int("TDIST_STORE_MAX_KEY_BYTES"));
  s.max_frame = tdist::store_wire::Limits::from_settings().max_frame_bytes();
  s.max_connections = static_cast<size_t>(tdist::setting_int("TDIST_STORE_MAX_CONNECTIONS"));
  s.max_waits = static_cast<size_t>(tdist::setting_int("TDIST_STORE_MAX_WAITS_PER_CONNECTION"));
  s.frame_timeout = tdist::setting_seconds("TDIST_STORE_FRAME_TIMEOUT");
  std::printf(
      "TCPStore server under attack: TDIST_STORE_MAX_BUFFER_BYTES=%zu (%ld MiB), "
      "TDIST_STORE_MAX_VALUE_BYTES=%zu (frame limit %zu), TDIST_STORE_MAX_KEY_BYTES=%zu, "
      "TDIST_STORE_MAX_CONNECTIONS=%zu, TDIST_STORE_MAX_WAITS_PER_CONNECTION=%zu, "
      "TDIST_STORE_FRAME_TIMEOUT=%.1f s\n\n",
      s.budget, budget_mib, s.max_value, s.max_frame, s.max_key, s.max_connections, s.max_waits,
      static_cast<double>(s.frame_timeout.count()) / 1000);
  std::printf(
      "| attack | sent | bytes sent | peak RSS - baseline (MiB) | budget (MiB) | limit (MiB) | "
      "still serving | check (ms) | longest stall (ms) | notes |\n"
      "|---|---|---:|---:|---:|---:|---|---:|---:|---|\n");
  std::fflush(stdout);
  bool all_ok = true;
  int ran = 0;
  for (const Attack& a : attacks()) {
    if (!only.empty() && std::string(a.name).find(only) == std::string::npos) continue;
    ++ran;
    Run r(s);
    r.child = spawn_server(a.spec, log_path);
    r.token = a.spec.token;
    try {
      r.good = r.client();
      r.good->set("before", std::string_view("1"));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: the good client failed before the attack: %s\n", a.name, e.what());
      stop_server(r.child);
      return 1;
    }
    std::this_thread::sleep_for(100ms);
    r.baseline = read_mem(r.child.pid);
    Prober prober(r);  // started after the fork: the parent forks with no threads
    try {
      a.run(r);
    } catch (const std::exception& e) {
      r.notes.push_back(std::string("attack aborted: ") + e.what());
    }
    const double stall_ms = prober.finish();
    const Mem peak = read_mem(r.child.pid);
    r.check(true, "after the attack");
    stop_server(r.child);
    const double growth_mib = static_cast<double>(peak.hwm_kib - r.baseline.rss_kib) / 1024;
    const size_t slack =
        32 * kMiB + std::min(s.budget, s.max_frame) + r.connections * 128 * kKiB + r.stored;
    const double limit_mib = static_cast<double>(s.budget + slack) / static_cast<double>(kMiB);
    const bool within = growth_mib <= limit_mib;
    if (r.capped) r.notes.push_back("stopped escalating at the 2 GiB safety cap");
    all_ok = all_ok && within && r.serving && r.expectation_met;
    std::printf("| %s | %s | %llu | %.0f%s | %ld | %.0f | %s | %.0f | %.0f | %s |\n", a.name,
                r.sent.c_str(), static_cast<unsigned long long>(r.sent_bytes), growth_mib,
                within ? "" : " (over)", budget_mib, limit_mib, r.serving ? "yes" : "no",
                r.check_ms, stall_ms, join(r.notes).c_str());
    std::fflush(stdout);
  }
  if (ran == 0) {
    std::fprintf(stderr, "no attack matches '%s'\n", only.c_str());
    return 2;
  }
  std::printf(
      "\nlimit = budget + 32 MiB + min(budget, frame limit) + 128 KiB per attacking connection + "
      "the data the attack stored; check = the slowest set/get of the good and a fresh client "
      "during the attack (5: from closing the connections to a fresh client served); longest stall "
      "= the slowest get of a client looping on its own thread through the attack\n");
  return all_ok ? 0 : 1;
}
