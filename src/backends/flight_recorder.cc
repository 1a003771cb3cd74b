// FlightRecorder (flight_recorder.h): the ring, its JSON, the registry of live groups, the
// dump files and the SIGUSR1 trigger.
#include "backends/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "backends/error_context.h"
#include "core/json_string.h"
#include "tdist/logging.h"
#include "tdist/process_group.h"
#include "tdist/settings.h"

namespace tdist::backends {
namespace {

const char* state_of(bool started, bool finished, bool failed) {
  if (finished) return failed ? "failed" : "completed";
  return started ? "started" : "queued";
}

void append_fp(std::string& out, const core::OpFingerprint& fp) {
  out += "\"op\":\"";
  out += core::op_kind_name(fp.kind);
  out += "\"";
  if (fp.kind != core::OpKind::kBarrier) {
    out += ",\"dtype\":\"";
    out += dtype_name(fp.dtype);
    out += "\"";
    if (fp.count != core::OpFingerprint::kAnyCount) out += ",\"count\":" + std::to_string(fp.count);
  }
  if (fp.has_reduce) {
    out += ",\"reduce_op\":\"";
    out += reduce_op_name(fp.reduce);
    out += "\"";
  }
  if (fp.root != core::OpFingerprint::kNoRoot) out += ",\"root\":" + std::to_string(fp.root);
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

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity), ring_(capacity) {}

FlightRecorder::Record* FlightRecorder::find_locked(uint64_t seq) {
  if (capacity_ == 0) return nullptr;
  Record& r = ring_[seq % capacity_];
  return r.used && r.seq == seq ? &r : nullptr;
}

void FlightRecorder::enqueued(uint64_t seq, const core::OpFingerprint& fp) {
  if (capacity_ == 0) return;
  const int64_t now = steady_ns();
  MutexLock lock(mu_);
  ring_[seq % capacity_] = Record{seq, true, false, fp, now, 0, 0};
  if (seq + 1 > newest_) newest_ = seq + 1;
}

void FlightRecorder::started(uint64_t seq) {
  if (capacity_ == 0) return;
  const int64_t now = steady_ns();
  MutexLock lock(mu_);
  if (Record* r = find_locked(seq)) r->started_ns = now;
}

bool FlightRecorder::finished(uint64_t seq, const std::exception_ptr& error) {
  const int64_t now = steady_ns();
  MutexLock lock(mu_);
  if (Record* r = find_locked(seq)) {
    r->finished_ns = now;
    r->failed = error != nullptr;
  }
  if (error == nullptr || !first_error_.empty()) return false;
  first_error_ = what_of(error);
  return true;
}

std::string FlightRecorder::ops_json() const {
  MutexLock lock(mu_);
  std::string out = "{\"capacity\":" + std::to_string(capacity_) + ",\"first_error\":\"";
  detail::append_json_string(out, first_error_);
  out += "\",\"ops\":[";
  bool first = true;
  const uint64_t oldest = newest_ > capacity_ ? newest_ - capacity_ : 0;
  for (uint64_t seq = oldest; seq < newest_; ++seq) {
    const Record& r = ring_[seq % capacity_];
    if (!r.used || r.seq != seq) continue;
    if (!first) out += ",";
    first = false;
    out += "{\"seq\":" + std::to_string(seq) + ",";
    append_fp(out, r.fp);
    out += ",\"state\":\"";
    out += state_of(r.started_ns != 0, r.finished_ns != 0, r.failed);
    out += "\",\"enqueued_ns\":" + std::to_string(r.enqueued_ns);
    if (r.started_ns != 0) out += ",\"started_ns\":" + std::to_string(r.started_ns);
    if (r.finished_ns != 0) out += ",\"finished_ns\":" + std::to_string(r.finished_ns);
    out += "}";
  }
  out += "]}";
  return out;
}

FlightRecorder::Summary FlightRecorder::summary() const {
  Summary s;
  MutexLock lock(mu_);
  const uint64_t oldest = newest_ > capacity_ ? newest_ - capacity_ : 0;
  for (uint64_t seq = oldest; seq < newest_; ++seq) {
    const Record& r = ring_[seq % capacity_];
    if (!r.used || r.seq != seq) continue;
    if (r.finished_ns != 0) {
      s.has_last = true;
      s.last_seq = seq;
      s.last = r.fp;
    } else if (!s.has_current) {
      s.has_current = true;
      s.current_seq = seq;
      s.current = r.fp;
      s.current_started = r.started_ns != 0;
      s.current_since_ns = r.started_ns != 0 ? r.started_ns : r.enqueued_ns;
    }
  }
  return s;
}

std::optional<FlightRecorder::Entry> FlightRecorder::find(uint64_t seq) const {
  if (capacity_ == 0) return std::nullopt;
  MutexLock lock(mu_);
  const Record& r = ring_[seq % capacity_];
  if (!r.used || r.seq != seq) return std::nullopt;
  return Entry{r.fp, r.enqueued_ns, r.started_ns, r.finished_ns, r.failed};
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
  std::map<int, std::string> by_rank;
  for (const auto& g : groups) {
    std::string& body = by_rank[g->global_rank(g->rank())];
    if (!body.empty()) body += ",";
    body += g->flight_record();
  }
  char host[256] = {};
  (void)::gethostname(host, sizeof(host) - 1);
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  std::vector<std::string> paths;
  const std::string prefix = setting_string("TDIST_FLIGHT_RECORDER_FILE");
  for (const auto& [rank, body] : by_rank) {
    std::string out = "{\"version\":1,\"rank\":" + std::to_string(rank) +
                      ",\"pid\":" + std::to_string(::getpid()) + ",\"host\":\"";
    detail::append_json_string(out, host);
    out += "\",\"reason\":\"";
    detail::append_json_string(out, reason);
    out += "\",\"wall_ns\":" + std::to_string(wall) +
           ",\"steady_ns\":" + std::to_string(steady_ns()) + ",\"groups\":[" + body + "]}\n";
    const std::string path = prefix + std::to_string(rank) + ".json";
    if (write_file(path, out)) {
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

}  // namespace tdist::backends
