// tdist-bench options: the command line, parsed and checked before anything starts.
//
// nccl-tests' flags keep their meanings (-b -e -f -i -n -w -c -d -o -r); tdist adds
// --coll, --backend, --nproc, --timeout, --inplace and --csv. parse_options() never exits: it
// returns the options or an error message (one line), and the caller prints the usage.
// Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist_bench {

// The collectives the tool measures, in the order `--coll all` runs them.
enum class Coll {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kGather,
  kScatter,
  kReduceScatter,
  kAllToAll,
  kSendRecv,
  kBarrier,
};

inline constexpr Coll kAllColls[] = {
    Coll::kAllReduce, Coll::kBroadcast,     Coll::kReduce,   Coll::kAllGather, Coll::kGather,
    Coll::kScatter,   Coll::kReduceScatter, Coll::kAllToAll, Coll::kSendRecv,  Coll::kBarrier};

std::string_view coll_name(Coll c);
std::optional<Coll> parse_coll(std::string_view name);

struct Options {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  size_t step_factor = 2;  // used when step_bytes is 0
  size_t step_bytes = 0;   // -i: add this many bytes per step instead of multiplying
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  bool in_place = false;
  tdist::DType dtype = tdist::DType::kF32;
  tdist::ReduceOpKind op = tdist::ReduceOpKind::kSum;
  int root = 0;
  std::vector<Coll> colls = {Coll::kAllReduce};
  std::string backend = "tcp";
  int nproc = 0;      // 0: run as one rank under a launcher (env://)
  bool bind = false;  // --nproc: pin rank r to the r-th CPU (--bind core), as mpirun does
  std::chrono::milliseconds timeout{600'000};
  std::string csv_path;  // --csv: rank 0 also writes the rows here (bench.h); "" = none
  bool help = false;
};

struct ParseResult {
  Options options;
  std::string error;  // empty on success
};

// Parses argv (argv[0] is skipped). Accepts "-b 8", "-b8", "--minbytes 8" and
// "--minbytes=8".
ParseResult parse_options(int argc, const char* const* argv);

// "8", "1K", "64M", "2G" (powers of 1024; a trailing "B" or "iB" is allowed). nullopt
// when malformed or out of range.
std::optional<size_t> parse_size(std::string_view text);

// The usage text, every flag explained.
std::string usage(std::string_view program);

// The sizes a run steps through, from min_bytes to max_bytes inclusive.
std::vector<size_t> size_steps(const Options& o);

}  // namespace tdist_bench
