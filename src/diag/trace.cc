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
#include <nlohmann/json.hpp>
#include <utility>
#include <variant>

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

using nlohmann::ordered_json;

constexpr size_t kFlushEvents = 10000;
constexpr int64_t kFlushIntervalNs = 1000000000;
constexpr std::string_view kTrailer = "\n]}\n";

// Nanoseconds as microseconds: whole microseconds (exact in a double up to 2^53 us, 285
// years) plus the fraction, rounded once.
double us_of(int64_t ns) {
  return static_cast<double>(ns / 1000) + static_cast<double>(ns % 1000) / 1000.0;
}

// One event or header: compact, one line; invalid UTF-8 in texts becomes U+FFFD.
std::string dump_event(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
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
    r.pending.push_back(metadata(rank, tid, "thread_name", {{"name", name}}));
    r.pending.push_back(metadata(rank, tid, "thread_sort_index", {{"sort_index", tid}}));
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
  double ts(int64_t steady) const { return us_of(steady - anchor_steady_ + anchor_wall_); }

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
  // A metadata event ("ph":"M") of track `tid` (0: the rank itself).
  static std::string metadata(int rank, int tid, std::string_view name, ordered_json args) {
    return dump_event({{"ph", "M"}, {"name", name}, {"pid", rank}, {"tid", tid}, {"args", args}});
  }

  RankEvents& rank_locked(int rank) TDIST_REQUIRES(mu_) {
    if (owner_ != ::getpid()) forget_inherited_locked();
    auto it = ranks_.find(rank);
    if (it != ranks_.end()) return it->second;
    RankEvents& r = ranks_[rank];
    r.pending.push_back(
        metadata(rank, 0, "process_name", {{"name", "rank " + std::to_string(rank)}}));
    r.pending.push_back(metadata(rank, 0, "process_sort_index", {{"sort_index", rank}}));
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
      text = header(rank);
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

  // The file's start, up to the opening "[" of traceEvents and a newline: the events go
  // after it, the trailer "\n]}\n" closes them.
  std::string header(int rank) const {
    char host[256] = {};
    (void)::gethostname(host, sizeof(host) - 1);
    // ts = (steady clock - steady_ns + wall_ns) / 1000: wall-clock microseconds.
    const ordered_json other = {{"tdist_trace", 1},
                                {"rank", rank},
                                {"host", host},
                                {"process_id", ::getpid()},
                                {"ts_base", "unix_epoch_us"},
                                {"wall_ns", anchor_wall_},
                                {"steady_ns", anchor_steady_}};
    std::string text = dump_event(
        {{"displayTimeUnit", "ms"}, {"otherData", other}, {"traceEvents", ordered_json::array()}});
    text.resize(text.size() - 2);  // "]}"
    return text + "\n";
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

TraceArgs& TraceArgs::add_int(std::string_view key, int64_t value) {
  fields_.emplace_back(key, value);
  return *this;
}

TraceArgs& TraceArgs::add_uint(std::string_view key, uint64_t value) {
  fields_.emplace_back(key, value);
  return *this;
}

TraceArgs& TraceArgs::add_us(std::string_view key, int64_t ns) {
  fields_.emplace_back(key, us_of(ns));
  return *this;
}

TraceArgs& TraceArgs::add_text(std::string_view key, std::string_view value) {
  fields_.emplace_back(key, std::string(value));
  return *this;
}

namespace {

// The event's args object, fields in the order they were added.
ordered_json args_json(const TraceArgs& args) {
  ordered_json out = ordered_json::object();
  for (const auto& field : args.fields()) {
    const std::string& key = field.first;  // a named variable: clang 14 captures no bindings
    std::visit([&out, &key](const auto& v) { out[key] = v; }, field.second);
  }
  return out;
}

}  // namespace

int64_t trace_now_ns() { return steady_ns(); }

int trace_track(int rank, std::string_view name) {
  Tracer* t = tracer();
  return t != nullptr ? t->track(rank, name) : 0;
}

void trace_complete(int rank, int track, std::string_view name, std::string_view category,
                    int64_t start_ns, int64_t end_ns, const TraceArgs& args) {
  Tracer* t = tracer();
  if (t == nullptr) return;
  const ordered_json e = {{"ph", "X"},
                          {"name", name},
                          {"cat", category},
                          {"pid", rank},
                          {"tid", track},
                          {"ts", t->ts(start_ns)},
                          {"dur", us_of(end_ns > start_ns ? end_ns - start_ns : 0)},
                          {"args", args_json(args)}};
  t->add(rank, dump_event(e), end_ns);
}

void trace_instant(int rank, int track, std::string_view name, std::string_view category,
                   int64_t at_ns, const TraceArgs& args) {
  Tracer* t = tracer();
  if (t == nullptr) return;
  const ordered_json e = {
      {"ph", "i"},   {"s", "t"},     {"name", name},       {"cat", category},
      {"pid", rank}, {"tid", track}, {"ts", t->ts(at_ns)}, {"args", args_json(args)}};
  t->add(rank, dump_event(e), at_ns);
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
