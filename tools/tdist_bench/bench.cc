// tdist-bench driver: the per-rank benchmark loop and rank 0's report (see bench.h).
#include "tdist_bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/process_group.h"
#include "tdist_bench/coll_runner.h"
#include "tdist_bench/memory.h"

namespace tdist_bench {
namespace {

using tdist::DType;
using tdist::ProcessGroup;
using tdist::ReduceOpKind;

constexpr double kMiB = 1024.0 * 1024.0;

// Sums over the run, reported at the end.
struct Totals {
  int64_t wrong = 0;
  double busbw_sum = 0;
  int busbw_rows = 0;
  // This rank's memory, worst over the collectives (each measured from its own start).
  int64_t max_buffer_bytes = 0;
  int64_t max_peak_kib = 0;
  int64_t max_beyond_bytes = 0;  // peak RSS - RSS after init - its buffers
  int64_t rss_init_kib = 0;      // after init_process_group and the first collective
  bool peak_reset_ok = true;
};

double max_over_ranks(ProcessGroup& pg, double value) {
  pg.all_reduce(&value, 1, DType::kF64, ReduceOpKind::kMax)->wait();
  return value;
}

int64_t sum_over_ranks(ProcessGroup& pg, int64_t value) {
  pg.all_reduce(&value, 1, DType::kI64, ReduceOpKind::kSum)->wait();
  return value;
}

std::vector<int64_t> gather_to_all(ProcessGroup& pg, int64_t value) {
  std::vector<int64_t> all(static_cast<size_t>(pg.size()));
  pg.all_gather(&value, all.data(), 1, DType::kI64)->wait();
  return all;
}

// --csv: rank 0's copy of the table rows, one line per collective and size, flushed as
// each row is measured (a run cut short keeps the rows it finished).
class CsvFile {
 public:
  CsvFile() = default;
  CsvFile(const CsvFile&) = delete;
  CsvFile& operator=(const CsvFile&) = delete;
  ~CsvFile() { close(); }

  // Opens (truncates) `path` and writes the header; false with errno set on failure.
  bool open(const std::string& path) {
    file_ = std::fopen(path.c_str(), "w");
    if (file_ == nullptr) return false;
    std::fputs(
        "collective,backend,nranks,bytes,count,dtype,redop,root,inplace,iters,time_us,"
        "algbw_GBps,busbw_GBps,wrong\n",
        file_);
    return std::fflush(file_) == 0;
  }
  bool is_open() const { return file_ != nullptr; }
  void row(const std::string& text) {
    if (file_ == nullptr) return;
    std::fputs(text.c_str(), file_);
    std::fflush(file_);
  }
  // False when a write failed (a full disk): the caller reports it.
  bool close() {
    if (file_ == nullptr) return true;
    const bool ok = std::ferror(file_) == 0;
    return std::fclose(std::exchange(file_, nullptr)) == 0 && ok;
  }

 private:
  FILE* file_ = nullptr;
};

// One CSV field: quoted (with quotes doubled) only when it holds a comma, quote or newline.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

// nccl-tests' time column: fewer decimals as the number grows.
std::string format_time(double us) {
  char text[32];
  if (us >= 10000.0) {
    std::snprintf(text, sizeof text, "%7.0f", us);
  } else if (us >= 100.0) {
    std::snprintf(text, sizeof text, "%7.1f", us);
  } else {
    std::snprintf(text, sizeof text, "%7.2f", us);
  }
  return text;
}

void print_roster(ProcessGroup& pg) {
  constexpr size_t kRecord = 96;
  char mine[kRecord] = {};
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  std::snprintf(mine, sizeof mine, "Pid %6d on %s", static_cast<int>(::getpid()), host);
  std::vector<char> all(kRecord * static_cast<size_t>(pg.size()));
  pg.all_gather(mine, all.data(), kRecord, DType::kU8)->wait();
  if (pg.rank() != 0) return;
  std::printf("#\n# Using ranks\n");
  for (int r = 0; r < pg.size(); ++r) {
    const char* record = all.data() + kRecord * static_cast<size_t>(r);
    std::printf("#  Rank %2d %.*s\n", r, static_cast<int>(kRecord), record);
  }
}

void print_table_header(const ProcessGroup& pg, Coll coll, const Options& o) {
  const bool in_place = o.in_place && has_in_place(coll);
  std::printf("#\n# collective %s  backend %s  world %d  dtype %s  op %s  root %d  in-place %d\n",
              std::string(coll_name(coll)).c_str(), pg.backend_name().c_str(), pg.size(),
              std::string(tdist::dtype_name(o.dtype)).c_str(),
              is_reduction(coll) ? std::string(tdist::reduce_op_name(o.op)).c_str() : "none",
              is_rooted(coll) ? o.root : -1, in_place ? 1 : 0);
  std::printf("#\n");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "");
}

// Measures one size of one collective; rank 0 prints its row.
void bench_size(ProcessGroup& pg, CollRunner& runner, Coll coll, size_t bytes, const Options& o,
                Totals& totals, CsvFile& csv) {
  runner.set_size(bytes);
  runner.fill();
  for (int i = 0; i < o.warmup_iters; ++i) runner.run_once();
  pg.barrier()->wait();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i) runner.run_once();
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  const double seconds = max_over_ranks(pg, elapsed.count() / o.iters);

  int64_t wrong = 0;
  if (o.check) {
    runner.fill();
    runner.run_once();
    wrong = sum_over_ranks(pg, runner.count_wrong_elements());
    totals.wrong += wrong;
  }

  const Layout& l = runner.layout();
  const double algbw = seconds > 0 ? static_cast<double>(l.size_bytes) / 1e9 / seconds : 0.0;
  const double busbw = algbw * bus_factor(coll, pg.size());
  if (coll != Coll::kBarrier) {
    totals.busbw_sum += busbw;
    ++totals.busbw_rows;
  }
  if (pg.rank() != 0) return;
  const std::string redop = is_reduction(coll) ? std::string(tdist::reduce_op_name(o.op)) : "none";
  const std::string wrong_text = o.check ? std::to_string(wrong) : "N/A";
  std::printf("  %10zu  %12zu  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %6s\n", l.size_bytes, l.count,
              std::string(tdist::dtype_name(o.dtype)).c_str(), redop.c_str(),
              is_rooted(coll) ? o.root : -1, format_time(seconds * 1e6).c_str(), algbw, busbw,
              wrong_text.c_str());
  if (!csv.is_open()) return;
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, ",%d,%d,%d,%.3f,%.6g,%.6g,", is_rooted(coll) ? o.root : -1,
                o.in_place && has_in_place(coll) ? 1 : 0, o.iters, seconds * 1e6, algbw, busbw);
  csv.row(std::string(coll_name(coll)) + "," + csv_field(pg.backend_name()) + "," +
          std::to_string(pg.size()) + "," + std::to_string(l.size_bytes) + "," +
          std::to_string(l.count) + "," + std::string(tdist::dtype_name(o.dtype)) + "," + redop +
          numbers + wrong_text + "\n");
}

std::string per_rank_mib(const std::vector<int64_t>& values, double unit) {
  std::string out;
  char item[48];
  for (size_t r = 0; r < values.size(); ++r) {
    double mib = static_cast<double>(values[r]) * unit / kMiB;
    if (mib > -0.05 && mib < 0.05) mib = 0;  // no "-0.0"
    std::snprintf(item, sizeof item, "%sr%zu=%.1f", r == 0 ? "" : " ", r, mib);
    out += item;
  }
  return out;
}

// Rank 0 prints each rank's buffers, peak RSS, and what the peak holds beyond the RSS
// after init and the buffers themselves (the library's scratch and caches).
void print_memory(ProcessGroup& pg, int64_t buffer_bytes, int64_t peak_kib, int64_t beyond_bytes,
                  const char* buffers_what) {
  std::vector<int64_t> buffers = gather_to_all(pg, buffer_bytes);
  std::vector<int64_t> peak = gather_to_all(pg, peak_kib);
  std::vector<int64_t> beyond = gather_to_all(pg, beyond_bytes);
  if (pg.rank() != 0) return;
  std::printf("# benchmark buffers per rank (MiB, %s): %s\n", buffers_what,
              per_rank_mib(buffers, 1.0).c_str());
  std::printf("# peak RSS per rank (MiB): %s\n", per_rank_mib(peak, 1024.0).c_str());
  std::printf("# peak RSS - RSS after init - buffers (MiB): %s\n",
              per_rank_mib(beyond, 1.0).c_str());
}

void bench_coll(ProcessGroup& pg, Coll coll, const Options& o, Totals& totals, CsvFile& csv) {
  if (pg.rank() == 0) print_table_header(pg, coll, o);
  // A barrier moves no data: one row.
  std::vector<size_t> sizes = coll == Coll::kBarrier ? std::vector<size_t>{0} : size_steps(o);
  const size_t max_bytes = coll == Coll::kBarrier ? 0 : sizes.back();

  totals.peak_reset_ok = reset_peak_rss() && totals.peak_reset_ok;
  auto runner = std::make_unique<CollRunner>(pg, coll, o, max_bytes);
  const auto buffer_bytes = static_cast<int64_t>(runner->buffer_bytes());
  const Totals before = totals;
  for (size_t bytes : sizes) bench_size(pg, *runner, coll, bytes, o, totals, csv);
  const int64_t peak_kib = proc_status_kib("VmHWM");
  runner.reset();  // free the buffers before the next collective maps its own
  // Measured from the RSS after init, not the RSS before this collective: memory the
  // library kept from an earlier collective is its memory too.
  const int64_t beyond_bytes = (peak_kib - totals.rss_init_kib) * 1024 - buffer_bytes;
  totals.max_buffer_bytes = std::max(totals.max_buffer_bytes, buffer_bytes);
  totals.max_peak_kib = std::max(totals.max_peak_kib, peak_kib);
  totals.max_beyond_bytes = std::max(totals.max_beyond_bytes, beyond_bytes);

  if (o.colls.size() == 1) return;  // the summary says the same
  const int rows = totals.busbw_rows - before.busbw_rows;
  if (pg.rank() == 0 && rows > 0) {
    std::printf("# Avg bus bandwidth    : %g\n", (totals.busbw_sum - before.busbw_sum) / rows);
  }
  print_memory(pg, buffer_bytes, peak_kib, beyond_bytes, "largest size");
}

void print_summary(ProcessGroup& pg, const Options& o, const Totals& totals) {
  if (pg.rank() == 0) {
    std::printf("#\n");
    if (o.check) {
      std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(totals.wrong),
                  totals.wrong == 0 ? "OK" : "FAILED");
    }
    if (totals.busbw_rows > 0) {
      std::printf("# Avg bus bandwidth    : %g\n", totals.busbw_sum / totals.busbw_rows);
    }
    std::printf("#\n");
    if (!totals.peak_reset_ok) {
      std::printf("# (VmHWM could not be reset: peaks count from the process start)\n");
    }
  }
  std::vector<int64_t> init = gather_to_all(pg, totals.rss_init_kib);
  if (pg.rank() == 0) {
    std::printf("# RSS after init per rank (MiB): %s\n", per_rank_mib(init, 1024.0).c_str());
  }
  print_memory(pg, totals.max_buffer_bytes, totals.max_peak_kib, totals.max_beyond_bytes,
               o.colls.size() == 1 ? "largest size" : "largest of any collective");
  if (pg.rank() == 0) {
    if (o.check) {
      std::printf("# wrong total: %lld\n", static_cast<long long>(totals.wrong));
    } else {
      std::printf("# wrong total: not checked (-c 0)\n");
    }
  }
  std::fflush(stdout);
}

}  // namespace

int run_rank(const Options& o) {
  tdist::init_process_group(o.backend, "env://", -1, -1, o.timeout);
  std::shared_ptr<ProcessGroup> pg = tdist::get_default_group();
  if (o.root >= pg->size()) {
    if (pg->rank() == 0) {
      std::fprintf(stderr, "tdist-bench: -r/--root %d is not a rank of a world of %d\n", o.root,
                   pg->size());
    }
    pg.reset();
    tdist::destroy_process_group();
    return 2;
  }
  // --csv: rank 0 opens the file before anything is measured; every rank learns whether
  // it could, so that all stop together when it could not.
  CsvFile csv;
  int64_t csv_failed = 0;
  if (pg->rank() == 0 && !o.csv_path.empty() && !csv.open(o.csv_path)) {
    std::fprintf(stderr, "tdist-bench: --csv: cannot write '%s': %s\n", o.csv_path.c_str(),
                 std::strerror(errno));
    csv_failed = 1;
  }
  if (!o.csv_path.empty() && sum_over_ranks(*pg, csv_failed) != 0) {
    pg.reset();
    tdist::destroy_process_group();
    return 2;
  }
  if (pg->rank() == 0) {
    std::printf(
        "# tdist-bench  backend: %s  world: %d  minBytes %zu maxBytes %zu step: %zu%s "
        "warmup iters: %d iters: %d validation: %d\n",
        pg->backend_name().c_str(), pg->size(), o.min_bytes, o.max_bytes,
        o.step_bytes > 0 ? o.step_bytes : o.step_factor, o.step_bytes > 0 ? "(bytes)" : "(factor)",
        o.warmup_iters, o.iters, o.check ? 1 : 0);
  }
  print_roster(*pg);

  Totals totals;
  reset_peak_rss();
  totals.rss_init_kib = proc_status_kib("VmRSS");
  for (Coll coll : o.colls) bench_coll(*pg, coll, o, totals, csv);
  print_summary(*pg, o, totals);
  int status = totals.wrong == 0 ? 0 : 1;
  if (!csv.close()) {
    std::fprintf(stderr, "tdist-bench: --csv: writing '%s' failed\n", o.csv_path.c_str());
    status = 1;
  }

  pg.reset();
  tdist::destroy_process_group();
  return status;
}

}  // namespace tdist_bench
