// tdist-bench: nccl-tests' benchmark table for tdist's collectives.
//
//   tdist-bench --nproc 2 --coll all_reduce -b 8 -e 64M -f 4    spawns 2 local ranks
//   torchrun --nproc-per-node 4 tdist-bench -d bf16 -o max      one rank per process
//
// Flags are checked before anything starts (a bad one: a one-line error, the usage, exit
// status 2); then this process either spawns --nproc ranks (spawn.h) or is one rank of a
// job started by a launcher (bench.h). Exit status: 0 ok, 1 a rank failed or a result
// was wrong, 2 bad arguments.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli/cli.h"
#include "tdist/backend.h"
#include "tdist/reduce_op.h"
#include "tdist/settings.h"
#include "tdist_bench/bench.h"
#include "tdist_bench/coll_runner.h"
#include "tdist_bench/options.h"
#include "tdist_bench/spawn.h"

namespace {

using tdist_bench::Options;

// What the flags ask for that this build cannot run, found before any rank starts: an
// unknown backend, or an op/dtype pair a reducing collective cannot reduce.
std::string unsupported_combination(const Options& o) {
  if (!tdist::has_backend(o.backend)) {
    std::string names;
    for (const std::string& name : tdist::registered_backends()) {
      names += (names.empty() ? "" : ", ") + name;
    }
    return "--backend " + o.backend + " is not available; registered backends: " + names;
  }
  for (tdist_bench::Coll coll : o.colls) {
    if (tdist_bench::is_reduction(coll) && !tdist::is_supported(o.op, o.dtype)) {
      return "-o/--op " + std::string(tdist::reduce_op_name(o.op)) + " does not reduce -d " +
             std::string(tdist::dtype_name(o.dtype)) + " (needed by " +
             std::string(tdist_bench::coll_name(coll)) + ")";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured
  tdist_bench::ParseResult parsed = tdist_bench::parse_options(argc, argv);
  const std::string program = argc > 0 ? argv[0] : "tdist-bench";
  if (parsed.error.empty()) parsed.error = unsupported_combination(parsed.options);
  if (!parsed.error.empty()) {
    return tdist::cli::usage_error("tdist-bench", parsed.error, tdist_bench::usage(program));
  }
  const Options& options = parsed.options;
  if (options.help) return tdist::cli::print_help(stdout, tdist_bench::usage(program));
  try {
    if (options.nproc > 0) return tdist_bench::spawn_local(argc, argv, options);
    return tdist_bench::run_rank(options);
  } catch (const std::exception& e) {
    std::string rank = tdist::env_string("RANK");
    std::fprintf(stderr, "tdist-bench%s: %s\n", rank.empty() ? "" : (": rank " + rank).c_str(),
                 e.what());
    return 1;
  }
}
