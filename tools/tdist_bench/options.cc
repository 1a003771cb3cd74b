// tdist-bench options: parsing and checking the command line (see options.h).
#include "tdist_bench/options.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <functional>
#include <limits>
#include <sstream>

#include "cli/cli.h"

namespace tdist_bench {
namespace {

namespace cli = tdist::cli;

struct NameOf {
  Coll coll;
  std::string_view name;
};

constexpr NameOf kCollNames[] = {
    {Coll::kAllReduce, "all_reduce"},
    {Coll::kBroadcast, "broadcast"},
    {Coll::kReduce, "reduce"},
    {Coll::kAllGather, "all_gather"},
    {Coll::kGather, "gather"},
    {Coll::kScatter, "scatter"},
    {Coll::kReduceScatter, "reduce_scatter"},
    {Coll::kAllToAll, "all_to_all"},
    {Coll::kSendRecv, "sendrecv"},
    {Coll::kBarrier, "barrier"},
};

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// What a flag's value does: it sets the flag's field and returns "", or returns what was
// expected instead ("expected a file name"). declare() gives each its CLI11 spellings.
using Apply = std::function<std::string(std::string_view)>;

template <typename T>
Apply int_in(int64_t lo, int64_t hi, T& out) {
  return [lo, hi, &out](std::string_view value) -> std::string {
    auto v = parse_int(value);
    if (!v || *v < lo || *v > hi) {
      return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    }
    out = static_cast<T>(*v);
    return "";
  };
}

Apply size_in(size_t& out, bool nonzero = false) {
  return [&out, nonzero](std::string_view value) -> std::string {
    auto size = parse_size(value);
    if (!size) return "expected a size such as 8, 1K, 64M or 1G";
    if (nonzero && *size == 0) return "the step must be at least 1 byte";
    out = *size;
    return "";
  };
}

Apply switch_in(bool& out) {
  return [&out](std::string_view value) {
    int v = 0;
    std::string err = int_in(0, 1, v)(value);
    out = v != 0;
    return err;
  };
}

// The flags taking a value, each failing with "--LONG: what was expected, got 'VALUE'".
void declare(CLI::App& app, Options& o) {
  auto flag = [&app](const std::string& names, Apply apply) {
    const std::string name = names.substr(names.find("--"));
    cli::add_value(app, names, [name, apply](const std::string& typed, const auto& value) {
      if (!value) throw cli::UsageError("flag '" + typed + "' needs a value");
      const std::string what = apply(*value);
      if (!what.empty()) throw cli::UsageError(name + ": " + what + ", got '" + *value + "'");
    });
  };
  flag("-b,--minbytes", size_in(o.min_bytes));
  flag("-e,--maxbytes", size_in(o.max_bytes));
  flag("-f,--stepfactor", [&o](std::string_view v) {
    o.step_bytes = 0;  // the last of -f / -i wins
    return int_in(2, 1 << 20, o.step_factor)(v);
  });
  flag("-i,--stepbytes", size_in(o.step_bytes, true));
  flag("-n,--iters", int_in(1, 1'000'000'000, o.iters));
  flag("-w,--warmup_iters", int_in(0, 1'000'000'000, o.warmup_iters));
  flag("-c,--check", switch_in(o.check));
  flag("-d,--datatype", [&o](std::string_view v) -> std::string {
    auto d = tdist::parse_dtype(v);
    if (!d) return "unknown dtype (f32 float half f16 bfloat16 bf16 f64 double i8 u8 i32 i64 bool)";
    o.dtype = *d;
    return "";
  });
  flag("-o,--op", [&o](std::string_view v) -> std::string {
    auto op = tdist::parse_reduce_op(v);
    if (!op) return "unknown op (sum prod min max avg band bor bxor premul_sum)";
    o.op = *op;
    return "";
  });
  flag("-r,--root", int_in(0, 1 << 24, o.root));
  flag("--coll", [&o](std::string_view v) -> std::string {
    if (v == "all") {
      o.colls.assign(std::begin(kAllColls), std::end(kAllColls));
    } else if (auto c = parse_coll(v)) {
      o.colls = {*c};
    } else {
      return "unknown collective (see --help)";
    }
    return "";
  });
  flag("--backend", [&o](std::string_view v) {
    o.backend = std::string(v);
    return v.empty() ? "expected a backend name" : "";
  });
  flag("--nproc", int_in(1, 1024, o.nproc));
  flag("--bind", [&o](std::string_view v) {
    if (v != "core" && v != "none") {
      throw cli::UsageError("--bind must be core or none, not '" + std::string(v) + "'");
    }
    o.bind = v == "core";
    return "";
  });
  flag("--timeout", [&o](std::string_view v) {
    int seconds = 0;
    std::string err = int_in(1, 86'400 * 7, seconds)(v);
    o.timeout = std::chrono::seconds(seconds);
    return err;
  });
  flag("--inplace", switch_in(o.in_place));
  flag("--csv", [&o](std::string_view v) {
    o.csv_path = std::string(v);
    return v.empty() ? "expected a file name" : "";
  });
}

std::string check_consistency(const Options& o) {
  if (o.min_bytes > o.max_bytes) {
    return "-b/--minbytes (" + std::to_string(o.min_bytes) + ") exceeds -e/--maxbytes (" +
           std::to_string(o.max_bytes) + ")";
  }
  if (o.min_bytes == 0 && o.step_bytes == 0) {
    return "-b 0 needs -i/--stepbytes: multiplying by -f never grows 0";
  }
  if (o.nproc > 0 && o.root >= o.nproc) {
    return "-r/--root " + std::to_string(o.root) + " is not a rank of --nproc " +
           std::to_string(o.nproc) + " processes";
  }
  return "";
}

}  // namespace

std::string_view coll_name(Coll c) {
  for (const auto& entry : kCollNames) {
    if (entry.coll == c) return entry.name;
  }
  return "?";
}

std::optional<Coll> parse_coll(std::string_view name) {
  std::string lower;
  for (char ch : name) {
    lower += ch == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  // nccl-tests' binary names without "_perf" and the "alltoall"/"allreduce" spellings.
  if (lower == "allreduce") lower = "all_reduce";
  if (lower == "allgather") lower = "all_gather";
  if (lower == "reducescatter") lower = "reduce_scatter";
  if (lower == "alltoall") lower = "all_to_all";
  for (const auto& entry : kCollNames) {
    if (entry.name == lower) return entry.coll;
  }
  return std::nullopt;
}

std::optional<size_t> parse_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return std::nullopt;
  auto number = parse_int(text.substr(0, digits));
  if (!number) return std::nullopt;
  std::string suffix;
  for (char ch : text.substr(digits)) {
    suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  if (suffix.ends_with("IB"))
    suffix.resize(suffix.size() - 2);
  else if (suffix.ends_with("B"))
    suffix.resize(suffix.size() - 1);
  int shift = 0;
  if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else if (!suffix.empty())
    return std::nullopt;
  auto value = static_cast<uint64_t>(*number);
  if (value > (std::numeric_limits<uint64_t>::max() >> shift)) return std::nullopt;
  return static_cast<size_t>(value << shift);
}

ParseResult parse_options(int argc, const char* const* argv) {
  ParseResult result;
  CLI::App app;
  app.set_help_flag();  // a plain switch: a bad flag anywhere wins over it
  cli::add_switch(app, "-h,--help", [&result](const std::string& typed, const auto& value) {
    if (value) throw cli::UsageError("flag '" + typed + "=" + *value + "' takes no value");
    result.options.help = true;
  });
  declare(app, result.options);
  const cli::Parsed parsed = cli::parse(app, argc, argv, [](const std::string& arg) {
    return (arg.size() > 1 && arg[0] == '-' ? "unknown flag '" : "unexpected argument '") + arg +
           "'";
  });
  result.error = parsed.error;
  if (result.error.empty() && !result.options.help)
    result.error = check_consistency(result.options);
  return result;
}

std::vector<size_t> size_steps(const Options& o) {
  std::vector<size_t> sizes;
  size_t size = o.min_bytes;
  while (size <= o.max_bytes) {
    sizes.push_back(size);
    size_t next = o.step_bytes > 0 ? size + o.step_bytes : size * o.step_factor;
    if (next <= size) break;  // overflow
    size = next;
  }
  return sizes;
}

std::string usage(std::string_view program) {
  std::ostringstream out;
  out << "usage: " << program << " [flags]\n"
      << "Measures tdist collectives and prints nccl-tests' table (rank 0 prints).\n"
      << "Runs as one rank under a launcher (torchrun, tdistrun, mpirun: env://), or spawns\n"
      << "its own ranks on this host with --nproc.\n\n"
      << "  -b, --minbytes SIZE      smallest size (default 8); K/M/G suffixes (powers of 1024)\n"
      << "  -e, --maxbytes SIZE      largest size (default 64M)\n"
      << "  -f, --stepfactor N       multiply the size by N each step (default 2)\n"
      << "  -i, --stepbytes SIZE     add SIZE each step instead (the last of -f/-i wins)\n"
      << "  -n, --iters N            timed iterations per size (default 20)\n"
      << "  -w, --warmup_iters N     untimed iterations before them, per size (default 5)\n"
      << "  -c, --check 0|1          verify results and count wrong elements (default 1)\n"
      << "  -d, --datatype T         f32 (default), f64, f16, bf16, i8, u8, i32, i64, bool;\n"
      << "                           torch names too: float, double, half, bfloat16, int, long\n"
      << "  -o, --op OP              sum (default), prod, min, max, avg, band, bor, bxor,\n"
      << "                           premul_sum (with scale 0.5)\n"
      << "  -r, --root R             root rank of broadcast, reduce, gather, scatter (default 0)\n"
      << "      --coll NAME          all_reduce (default), broadcast, reduce, all_gather,\n"
      << "                           gather, scatter, reduce_scatter, all_to_all, sendrecv\n"
      << "                           (ring exchange with isend/irecv), barrier, or all (each\n"
      << "                           in turn)\n"
      << "      --inplace 0|1        in-place form where torch defines one: all_reduce,\n"
      << "                           reduce, all_gather (default 0)\n"
      << "      --backend NAME       process-group backend (default tcp)\n"
      << "      --nproc N            spawn N local ranks (the parent hosts the store)\n"
      << "      --bind core|none     with --nproc: pin rank r to the r-th CPU of the affinity\n"
      << "                           mask when there are enough, as mpirun does (default none)\n"
      << "      --timeout SECONDS    the group's timeout, and with --nproc the deadline of the\n"
      << "                           whole run (default 600)\n"
      << "      --csv FILE           rank 0 also writes the rows to FILE as CSV (a header, then\n"
      << "                           one row per collective and size: collective, backend,\n"
      << "                           nranks, bytes, count, dtype, redop, root, inplace, iters,\n"
      << "                           time_us, algbw_GBps, busbw_GBps, wrong); the table is\n"
      << "                           still printed\n"
      << "  -h, --help               this text\n\n"
      << "Sizes are nccl-tests' (the larger per-rank buffer): count is the elements each rank\n"
      << "contributes. time is the mean over iterations of the slowest rank's time; algbw =\n"
      << "size / time; busbw = algbw * factor (all_reduce 2(n-1)/n; all_gather,\n"
      << "reduce_scatter, all_to_all, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1).\n"
      << "Exit status: 0 when every rank finished with no wrong element, 1 on failure, 2 on\n"
      << "bad flags.\n";
  return out.str();
}

}  // namespace tdist_bench
