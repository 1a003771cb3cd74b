// FlightRecorder (flight_recorder.h): the ring, its JSON, the registry of live groups, the
// dump files and the SIGUSR1 trigger.
#include "diag/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/coarse_clock.h"
#include "diag/error_context.h"
#include "diag/trace.h"
#include "tdist/logging.h"
#include "tdist/process_group.h"
#include "tdist/settings.h"

namespace tdist::diag {
namespace {

using nlohmann::ordered_json;

// Compact, one line; invalid UTF-8 (an error message may hold any bytes) becomes U+FFFD.
std::string dump_record(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

const char* state_of(bool started, bool finished, bool failed) {
  if (finished) return failed ? "failed" : "completed";
  return started ? "started" : "queued";
}

// The fingerprint's fields, in tools/tdist_flight.py's order: op, dtype, count, reduce_op, root.
void add_fingerprint(ordered_json& op, const core::OpFingerprint& fp) {
  op["op"] = core::op_kind_name(fp.kind);
  if (fp.kind != core::OpKind::kBarrier) {
    op["dtype"] = dtype_name(fp.dtype);
    if (fp.count != core::OpFingerprint::kAnyCount) op["count"] = fp.count;
  }
  if (fp.has_reduce) op["reduce_op"] = reduce_op_name(fp.reduce);
  if (fp.root != core::OpFingerprint::kNoRoot) op["root"] = fp.root;
}

struct Registry {
  Mutex mu;
  std::vector<std::weak_ptr<ProcessGroup>> groups TDIST_GUARDED_BY(mu);
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: groups may outlive statics
  return *r;
}

bool write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int g_signal_pipe[2] = {-1, -1};

void on_sigusr1(int) {
  const int saved = errno;
  const char byte = 1;
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t recorder_ns() {
  static const bool fine = trace_enabled();
  if (fine) return steady_ns();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(core::coarse_now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity), ring_(capacity > 0 ? new Record[capacity] : nullptr) {}

void FlightRecorder::enqueued(uint64_t seq, const core::OpFingerprint& fp) {
  if (capacity_ == 0) return;
  Record& r = ring_[seq % capacity_];
  const core::OpFingerprint::Words words = fp.encode();
  r.tag.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  r.w0.store(words.w0, std::memory_order_relaxed);
  r.w1.store(words.w1, std::memory_order_relaxed);
  r.enqueued_ns.store(recorder_ns(), std::memory_order_relaxed);
  r.started_ns.store(0, std::memory_order_relaxed);
  r.finished_ns.store(0, std::memory_order_relaxed);
  r.failed.store(false, std::memory_order_relaxed);
  r.tag.store(seq + 1, std::memory_order_release);
  if (seq + 1 > newest_.load(std::memory_order_relaxed)) {
    newest_.store(seq + 1, std::memory_order_release);
  }
}

void FlightRecorder::started(uint64_t seq) {
  if (capacity_ == 0) return;
  Record& r = ring_[seq % capacity_];
  if (r.tag.load(std::memory_order_acquire) == seq + 1) {
    r.started_ns.store(recorder_ns(), std::memory_order_release);
  }
}

bool FlightRecorder::finished(uint64_t seq, const std::exception_ptr& error) {
  if (capacity_ > 0) {
    Record& r = ring_[seq % capacity_];
    if (r.tag.load(std::memory_order_acquire) == seq + 1) {
      r.failed.store(error != nullptr, std::memory_order_relaxed);
      r.finished_ns.store(recorder_ns(), std::memory_order_release);
    }
  }
  if (error == nullptr) return false;
  MutexLock lock(mu_);
  if (!first_error_.empty()) return false;
  first_error_ = what_of(error);
  return true;
}

std::optional<FlightRecorder::Entry> FlightRecorder::read(uint64_t seq) const {
  const Record& r = ring_[seq % capacity_];
  if (r.tag.load(std::memory_order_acquire) != seq + 1) return std::nullopt;
  Entry e;
  e.fp = core::OpFingerprint::decode(
      {r.w0.load(std::memory_order_relaxed), r.w1.load(std::memory_order_relaxed)});
  e.enqueued_ns = r.enqueued_ns.load(std::memory_order_relaxed);
  e.finished_ns = r.finished_ns.load(std::memory_order_acquire);
  e.failed = r.failed.load(std::memory_order_relaxed);
  e.started_ns = r.started_ns.load(std::memory_order_acquire);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (r.tag.load(std::memory_order_relaxed) != seq + 1) return std::nullopt;  // reused meanwhile
  return e;
}

std::string FlightRecorder::record_json(const ProcessGroup& group, uint64_t next_seq) const {
  ordered_json ops = ordered_json::array();
  const uint64_t newest = newest_.load(std::memory_order_acquire);
  const uint64_t oldest = newest > capacity_ ? newest - capacity_ : 0;
  for (uint64_t seq = oldest; seq < newest; ++seq) {
    const std::optional<Entry> e = read(seq);
    if (!e) continue;
    ordered_json op = {{"seq", seq}};
    add_fingerprint(op, e->fp);
    op["state"] = state_of(e->started_ns != 0, e->finished_ns != 0, e->failed);
    op["enqueued_ns"] = e->enqueued_ns;
    if (e->started_ns != 0) op["started_ns"] = e->started_ns;
    if (e->finished_ns != 0) op["finished_ns"] = e->finished_ns;
    ops.push_back(std::move(op));
  }
  ordered_json record = {{"capacity", capacity_}};
  {
    MutexLock lock(mu_);
    record["first_error"] = first_error_;
  }
  record["ops"] = std::move(ops);
  ordered_json out = {
      {"name", group.name()},       {"backend", group.backend_name()},      {"rank", group.rank()},
      {"size", group.size()},       {"global_ranks", group.global_ranks()}, {"next_seq", next_seq},
      {"record", std::move(record)}};
  return dump_record(out);
}

FlightRecorder::Summary FlightRecorder::summary() const {
  Summary s;
  const uint64_t newest = newest_.load(std::memory_order_acquire);
  const uint64_t oldest = newest > capacity_ ? newest - capacity_ : 0;
  for (uint64_t seq = oldest; seq < newest; ++seq) {
    const std::optional<Entry> e = read(seq);
    if (!e) continue;
    if (e->finished_ns != 0) {
      s.has_last = true;
      s.last_seq = seq;
      s.last = e->fp;
    } else if (!s.has_current) {
      s.has_current = true;
      s.current_seq = seq;
      s.current = e->fp;
      s.current_started = e->started_ns != 0;
      s.current_since_ns = e->started_ns != 0 ? e->started_ns : e->enqueued_ns;
    }
  }
  return s;
}

std::optional<FlightRecorder::Entry> FlightRecorder::find(uint64_t seq) const {
  if (capacity_ == 0) return std::nullopt;
  return read(seq);
}

void register_group(const std::weak_ptr<ProcessGroup>& group) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  std::erase_if(r.groups, [](const std::weak_ptr<ProcessGroup>& g) { return g.expired(); });
  r.groups.push_back(group);
}

std::vector<std::shared_ptr<ProcessGroup>> live_groups() {
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  Registry& r = registry();
  MutexLock lock(r.mu);
  for (const auto& weak : r.groups) {
    if (auto g = weak.lock()) groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<std::string> dump_flight_records(const std::string& reason) {
  const std::vector<std::shared_ptr<ProcessGroup>> groups = live_groups();
  // One file per global rank (ranks as threads in one process each get theirs).
  std::map<int, ordered_json> by_rank;
  for (const auto& g : groups) {
    ordered_json& records =
        by_rank.try_emplace(g->global_rank(g->rank()), ordered_json::array()).first->second;
    records.push_back(ordered_json::parse(g->flight_record()));
  }
  char host[256] = {};
  (void)::gethostname(host, sizeof(host) - 1);
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  std::vector<std::string> paths;
  const std::string prefix = setting_string("TDIST_FLIGHT_RECORDER_FILE");
  for (auto& [rank, records] : by_rank) {
    const ordered_json out = {{"version", 1},
                              {"rank", rank},
                              {"pid", ::getpid()},
                              {"host", host},
                              {"reason", reason},
                              {"wall_ns", wall},
                              {"steady_ns", steady_ns()},
                              {"groups", std::move(records)}};
    const std::string path = prefix + std::to_string(rank) + ".json";
    if (write_file(path, dump_record(out) + "\n")) {
      TDIST_LOG(kWarn) << "flight record (" << reason << ") written to " << path;
      paths.push_back(path);
    } else {
      TDIST_LOG(kWarn) << "flight record (" << reason << "): cannot write " << path;
    }
  }
  return paths;
}

void install_dump_signal() {
  static const bool installed = [] {
    struct sigaction current {};
    if (::sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO) != 0) {
      return false;  // the program handles SIGUSR1 itself
    }
    if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) return false;
    std::thread([] {
      char byte = 0;
      while (true) {
        const ssize_t n = ::read(g_signal_pipe[0], &byte, 1);
        if (n == 1) {
          dump_flight_records("SIGUSR1");
        } else if (n == 0 || errno != EINTR) {
          return;
        }
      }
    }).detach();
    struct sigaction action {};
    action.sa_handler = &on_sigusr1;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    return ::sigaction(SIGUSR1, &action, nullptr) == 0;
  }();
  (void)installed;
}

}  // namespace tdist::diag
