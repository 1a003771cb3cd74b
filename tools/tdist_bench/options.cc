// tdist-bench options: parsing and checking the command line (see options.h).
#include "tdist_bench/options.h"

#include <cctype>
#include <charconv>
#include <limits>
#include <sstream>
#include <type_traits>

namespace tdist_bench {
namespace {

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

// One flag of the table: short and long spelling, and whether it takes a value.
struct Flag {
  char short_name;  // 0: long only
  std::string_view long_name;
  bool takes_value;
};

constexpr Flag kFlags[] = {
    {'b', "minbytes", true},  {'e', "maxbytes", true}, {'f', "stepfactor", true},
    {'i', "stepbytes", true}, {'n', "iters", true},    {'w', "warmup_iters", true},
    {'c', "check", true},     {'d', "datatype", true}, {'o', "op", true},
    {'r', "root", true},      {0, "coll", true},       {0, "backend", true},
    {0, "nproc", true},       {0, "bind", true},       {0, "timeout", true},
    {0, "inplace", true},     {0, "csv", true},        {'h', "help", false},
};

// Applies one flag's value to `o`; returns an error message or "".
std::string apply(const Flag& flag, std::string_view value, Options& o) {
  auto bad = [&](std::string_view what) {
    return "--" + std::string(flag.long_name) + ": " + std::string(what) + ", got '" +
           std::string(value) + "'";
  };
  auto int_in = [&](int64_t lo, int64_t hi, auto& out) -> std::string {
    auto v = parse_int(value);
    if (!v || *v < lo || *v > hi) {
      return bad("expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
    return "";
  };
  const std::string_view n = flag.long_name;
  if (n == "minbytes" || n == "maxbytes" || n == "stepbytes") {
    auto size = parse_size(value);
    if (!size) return bad("expected a size such as 8, 1K, 64M or 1G");
    if (n == "minbytes") o.min_bytes = *size;
    if (n == "maxbytes") o.max_bytes = *size;
    if (n == "stepbytes") {
      if (*size == 0) return bad("the step must be at least 1 byte");
      o.step_bytes = *size;
    }
    return "";
  }
  if (n == "stepfactor") {
    o.step_bytes = 0;  // the last of -f / -i wins
    return int_in(2, 1 << 20, o.step_factor);
  }
  if (n == "iters") return int_in(1, 1'000'000'000, o.iters);
  if (n == "warmup_iters") return int_in(0, 1'000'000'000, o.warmup_iters);
  if (n == "check" || n == "inplace") {
    int v = 0;
    std::string err = int_in(0, 1, v);
    (n == "check" ? o.check : o.in_place) = v != 0;
    return err;
  }
  if (n == "root") return int_in(0, 1 << 24, o.root);
  if (n == "nproc") return int_in(1, 1024, o.nproc);
  if (n == "bind") {
    if (value != "core" && value != "none")
      return "--bind must be core or none, not '" + std::string(value) + "'";
    o.bind = value == "core";
    return {};
  }
  if (n == "timeout") {
    int seconds = 0;
    std::string err = int_in(1, 86'400 * 7, seconds);
    o.timeout = std::chrono::seconds(seconds);
    return err;
  }
  if (n == "datatype") {
    auto d = tdist::parse_dtype(value);
    if (!d)
      return bad("unknown dtype (f32 float half f16 bfloat16 bf16 f64 double i8 u8 i32 i64 bool)");
    o.dtype = *d;
    return "";
  }
  if (n == "op") {
    auto op = tdist::parse_reduce_op(value);
    if (!op) return bad("unknown op (sum prod min max avg band bor bxor premul_sum)");
    o.op = *op;
    return "";
  }
  if (n == "coll") {
    if (value == "all") {
      o.colls.assign(std::begin(kAllColls), std::end(kAllColls));
      return "";
    }
    auto c = parse_coll(value);
    if (!c) return bad("unknown collective (see --help)");
    o.colls = {*c};
    return "";
  }
  if (n == "csv") {
    if (value.empty()) return bad("expected a file name");
    o.csv_path = std::string(value);
    return "";
  }
  if (n == "backend") {
    if (value.empty()) return bad("expected a backend name");
    o.backend = std::string(value);
    return "";
  }
  return bad("unhandled flag");  // unreachable: every table entry is handled above
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
  Options& o = result.options;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const Flag* flag = nullptr;
    std::optional<std::string_view> value;
    if (arg.starts_with("--")) {
      std::string_view name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string_view::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      for (const auto& f : kFlags) {
        if (f.long_name == name) flag = &f;
      }
    } else if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
      for (const auto& f : kFlags) {
        if (f.short_name == arg[1]) flag = &f;
      }
      if (flag != nullptr && arg.size() > 2) value = arg.substr(2);
    } else {
      result.error = "unexpected argument '" + std::string(arg) + "'";
      return result;
    }
    if (flag == nullptr) {
      result.error = "unknown flag '" + std::string(arg) + "'";
      return result;
    }
    if (!flag->takes_value) {
      if (value) {
        result.error = "flag '" + std::string(arg) + "' takes no value";
        return result;
      }
      o.help = true;
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) {
        result.error = "flag '" + std::string(arg) + "' needs a value";
        return result;
      }
      value = argv[++i];
    }
    result.error = apply(*flag, *value, o);
    if (!result.error.empty()) return result;
  }
  if (!o.help) result.error = check_consistency(o);
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
