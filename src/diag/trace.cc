// The timeline writer (trace.h): one process-wide buffer of serialised events, per-rank
// files that stay complete JSON after every write, and the collective events.
#include "diag/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "core/json_string.h"
#include "core/op_fingerprint.h"
#include "diag/error_context.h"
#include "diag/flight_recorder.h"
#include "tdist/dtype.h"
#include "tdist/logging.h"
#include "tdist/reduce_op.h"
#include "tdist/settings.h"
#include "tdist/thread_annotations.h"

namespace tdist::diag {
namespace {

constexpr size_t kFlushEvents = 10000;
constexpr int64_t kFlushIntervalNs = 1000000000;
constexpr std::string_view kTrailer = "\n]}\n";

// "123.456": nanoseconds as microseconds, exactly (no floating point on the way).
void append_us(std::string& out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  out += std::to_string(ns / 1000);
  const auto frac = static_cast<int>(ns % 1000);
  out += '.';
  out += static_cast<char>('0' + frac / 100);
  out += static_cast<char>('0' + frac / 10 % 10);
  out += static_cast<char>('0' + frac % 10);
}

void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  detail::append_json_string(out, text);
  out += '"';
}

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool write_all_at(int fd, std::string_view data, off_t offset) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return true;
}

// One rank's events waiting to be written, and its tracks.
struct RankEvents {
  std::vector<std::string> pending;
  std::map<std::string, int, std::less<>> tracks;
};

// One rank's file: where the closing "]}" starts (the next events go there).
struct RankFile {
  int fd = -1;
  off_t tail = 0;
  bool has_events = false;
};

class Tracer {
 public:
  explicit Tracer(std::string dir)
      : dir_(std::move(dir)), anchor_steady_(steady_ns()), anchor_wall_(wall_ns()) {}

  int track(int rank, std::string_view name) TDIST_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    RankEvents& r = rank_locked(rank);
    auto it = r.tracks.find(name);
    if (it != r.tracks.end()) return it->second;
    const int tid = static_cast<int>(r.tracks.size()) + 1;
    r.tracks.emplace(std::string(name), tid);
    std::string e = R"({"ph":"M","name":"thread_name","pid":)" + std::to_string(rank) +
                    ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":";
    append_quoted(e, name);
    e += "}}";
    r.pending.push_back(std::move(e));
    r.pending.push_back(R"({"ph":"M","name":"thread_sort_index","pid":)" + std::to_string(rank) +
                        ",\"tid\":" + std::to_string(tid) +
                        ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
    count_ += 2;
    return tid;
  }

  // One serialised event of `rank`; at_ns (its time) also decides whether a write is due.
  void add(int rank, std::string event, int64_t at_ns) TDIST_EXCLUDES(mu_) {
    bool due = false;
    {
      MutexLock lock(mu_);
      rank_locked(rank).pending.push_back(std::move(event));
      ++count_;
      due = count_ >= kFlushEvents || at_ns - last_flush_ns_ >= kFlushIntervalNs;
      if (due) last_flush_ns_ = at_ns;  // one flush per interval, whoever gets here first
    }
    if (due) flush();
  }

  // Wall-clock microseconds of a steady-clock time.
  void append_ts(std::string& out, int64_t steady) const {
    append_us(out, steady - anchor_steady_ + anchor_wall_);
  }

  std::vector<std::string> flush() TDIST_EXCLUDES(io_mu_, mu_) {
    MutexLock io(io_mu_);
    std::map<int, std::vector<std::string>> batch;
    {
      MutexLock lock(mu_);
      if (owner_ != ::getpid()) forget_inherited_locked();
      for (auto& [rank, r] : ranks_) {
        if (!r.pending.empty()) batch[rank] = std::exchange(r.pending, {});
      }
      count_ = 0;
      last_flush_ns_ = steady_ns();
    }
    std::vector<std::string> paths;
    for (auto& [rank, events] : batch) {
      if (write_locked(rank, events)) paths.push_back(trace_file(dir_, rank));
    }
    return paths;
  }

 private:
  RankEvents& rank_locked(int rank) TDIST_REQUIRES(mu_) {
    if (owner_ != ::getpid()) forget_inherited_locked();
    auto it = ranks_.find(rank);
    if (it != ranks_.end()) return it->second;
    RankEvents& r = ranks_[rank];
    const std::string pid = std::to_string(rank);
    r.pending.push_back(R"({"ph":"M","name":"process_name","pid":)" + pid +
                        R"(,"tid":0,"args":{"name":"rank )" + pid + "\"}}");
    r.pending.push_back(R"({"ph":"M","name":"process_sort_index","pid":)" + pid +
                        R"(,"tid":0,"args":{"sort_index":)" + pid + "}}");
    count_ += 2;
    return r;
  }

  // A forked child: the parent's ranks, events and files are not its own.
  void forget_inherited_locked() TDIST_REQUIRES(mu_) {
    ranks_.clear();
    count_ = 0;
    owner_ = ::getpid();
    forget_files_ = true;  // the files' state is io_mu_'s: dropped at the next write
  }

  bool write_locked(int rank, const std::vector<std::string>& events) TDIST_REQUIRES(io_mu_) {
    if (forget_files_.exchange(false)) {
      for (auto& [r, f] : files_) {
        if (f.fd >= 0) ::close(f.fd);
      }
      files_.clear();
    }
    RankFile& f = files_[rank];
    std::string text;
    if (f.fd < 0) {
      if (failed_) return false;
      const std::string path = trace_file(dir_, rank);
      std::error_code ec;
      std::filesystem::create_directories(dir_, ec);
      f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (f.fd < 0) {
        failed_ = true;  // said once; later events are dropped
        TDIST_LOG(kWarn) << "TDIST_TRACE: cannot write " << path << ": " << std::strerror(errno)
                         << "; no timeline is written";
        return false;
      }
      char host[256] = {};
      (void)::gethostname(host, sizeof(host) - 1);
      text = R"({"displayTimeUnit":"ms","otherData":{"tdist_trace":1,"rank":)" +
             std::to_string(rank) + R"(,"host":)";
      append_quoted(text, host);
      // ts = (steady clock - steady_ns + wall_ns) / 1000: wall-clock microseconds.
      text += ",\"process_id\":" + std::to_string(::getpid()) +
              R"(,"ts_base":"unix_epoch_us","wall_ns":)" + std::to_string(anchor_wall_) +
              ",\"steady_ns\":" + std::to_string(anchor_steady_) + "},\"traceEvents\":[\n";
      TDIST_LOG(kDebug) << "TDIST_TRACE: rank " << rank << " writes its timeline to " << path;
    }
    for (const std::string& e : events) {
      if (f.has_events) text += ",\n";
      text += e;
      f.has_events = true;
    }
    const off_t tail = f.tail + static_cast<off_t>(text.size());
    text += kTrailer;
    if (!write_all_at(f.fd, text, f.tail)) {
      TDIST_LOG(kWarn) << "TDIST_TRACE: writing " << trace_file(dir_, rank)
                       << " failed: " << std::strerror(errno);
      return false;
    }
    f.tail = tail;
    return true;
  }

  const std::string dir_;
  const int64_t anchor_steady_;
  const int64_t anchor_wall_;

  Mutex mu_;
  pid_t owner_ TDIST_GUARDED_BY(mu_) = ::getpid();
  std::map<int, RankEvents> ranks_ TDIST_GUARDED_BY(mu_);
  size_t count_ TDIST_GUARDED_BY(mu_) = 0;
  int64_t last_flush_ns_ TDIST_GUARDED_BY(mu_) = steady_ns();
  std::atomic<bool> forget_files_{false};

  Mutex io_mu_;  // taken before mu_
  std::map<int, RankFile> files_ TDIST_GUARDED_BY(io_mu_);
  bool failed_ TDIST_GUARDED_BY(io_mu_) = false;
};

Tracer* make_tracer() {
  const std::string dir = setting_string("TDIST_TRACE");
  if (dir.empty()) return nullptr;
  // Never destroyed: groups and their threads may outlive static destructors.
  auto* tracer = new Tracer(dir);
  std::atexit([] { (void)flush_trace(); });
  return tracer;
}

Tracer* tracer() {
  static Tracer* const t = make_tracer();
  return t;
}

}  // namespace

bool trace_enabled() {
  static const bool enabled = tracer() != nullptr;
  return enabled;
}

void TraceArgs::key(std::string_view key) {
  if (!body_.empty()) body_ += ',';
  append_quoted(body_, key);
  body_ += ':';
}

TraceArgs& TraceArgs::add_int(std::string_view k, int64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

TraceArgs& TraceArgs::add_uint(std::string_view k, uint64_t value) {
  key(k);
  body_ += std::to_string(value);
  return *this;
}

TraceArgs& TraceArgs::add_us(std::string_view k, int64_t ns) {
  key(k);
  append_us(body_, ns);
  return *this;
}

TraceArgs& TraceArgs::add_text(std::string_view k, std::string_view value) {
  key(k);
  append_quoted(body_, value);
  return *this;
}

int64_t trace_now_ns() { return steady_ns(); }

int trace_track(int rank, std::string_view name) {
  Tracer* t = tracer();
  return t != nullptr ? t->track(rank, name) : 0;
}

void trace_complete(int rank, int track, std::string_view name, std::string_view category,
                    int64_t start_ns, int64_t end_ns, const TraceArgs& args) {
  Tracer* t = tracer();
  if (t == nullptr) return;
  std::string e = R"({"ph":"X","name":)";
  append_quoted(e, name);
  e += ",\"cat\":";
  append_quoted(e, category);
  e += ",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(track) + ",\"ts\":";
  t->append_ts(e, start_ns);
  e += ",\"dur\":";
  append_us(e, end_ns > start_ns ? end_ns - start_ns : 0);
  e += ",\"args\":" + args.json() + "}";
  t->add(rank, std::move(e), end_ns);
}

void trace_instant(int rank, int track, std::string_view name, std::string_view category,
                   int64_t at_ns, const TraceArgs& args) {
  Tracer* t = tracer();
  if (t == nullptr) return;
  std::string e = R"({"ph":"i","s":"t","name":)";
  append_quoted(e, name);
  e += ",\"cat\":";
  append_quoted(e, category);
  e += ",\"pid\":" + std::to_string(rank) + ",\"tid\":" + std::to_string(track) + ",\"ts\":";
  t->append_ts(e, at_ns);
  e += ",\"args\":" + args.json() + "}";
  t->add(rank, std::move(e), at_ns);
}

void trace_collective(int rank, int track, std::string_view group, uint64_t seq,
                      const FlightRecorder& recorder, const std::exception_ptr& error,
                      std::string_view algorithm) {
  const int64_t now = steady_ns();
  TraceArgs args;
  args.add_text("group", group).add_uint("seq", seq);
  const std::optional<FlightRecorder::Entry> op = recorder.find(seq);
  std::string_view name = "collective";
  int64_t start = now;
  int64_t end = now;
  if (op) {
    const core::OpFingerprint& fp = op->fp;
    name = core::op_kind_name(fp.kind);
    if (fp.kind != core::OpKind::kBarrier) {
      args.add_text("dtype", dtype_name(fp.dtype));
      if (fp.count != core::OpFingerprint::kAnyCount) {
        args.add_uint("count", fp.count).add_uint("bytes", fp.count * dtype_size(fp.dtype));
      }
    }
    if (fp.has_reduce) args.add_text("reduce_op", reduce_op_name(fp.reduce));
    if (fp.root != core::OpFingerprint::kNoRoot) args.add_int("root", fp.root);
    if (op->finished_ns != 0) end = op->finished_ns;
    start = op->started_ns != 0 ? op->started_ns : end;  // failed before it started: no length
    if (op->started_ns != 0) args.add_us("queued_us", op->started_ns - op->enqueued_ns);
  }
  if (!algorithm.empty()) args.add_text("algorithm", algorithm);
  if (error != nullptr) args.add_text("error", what_of(error));
  trace_complete(rank, track, name, "collective", start, end, args);
}

std::vector<std::string> flush_trace() {
  Tracer* t = tracer();
  return t != nullptr ? t->flush() : std::vector<std::string>{};
}

std::string trace_file(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("tdist_trace_rank" + std::to_string(rank) + ".json"))
      .string();
}

}  // namespace tdist::diag
