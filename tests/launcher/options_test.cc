// tdistrun's command line: every flag in every spelling, PET_ environment defaults, the
// one-line usage errors, stream specs, the worker's argv and the help texts.
#include "tdistrun/options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/scoped_env.h"
#include "tdist/settings.h"

extern char** environ;

namespace tdist::launcher {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Args = std::vector<std::string>;

// Clears PET_*, PYTHON and TDIST_TERM_TIMEOUT for the test's lifetime; set() changes any
// variable; everything is restored afterwards.
class ScopedEnv : public test_support::ScopedEnv {
 public:
  ScopedEnv() {
    std::vector<std::string> names = {"PYTHON", "TDIST_TERM_TIMEOUT"};
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (entry.starts_with("PET_")) names.push_back(entry.substr(0, entry.find('=')));
    }
    for (const std::string& name : names) unset(name);
  }
};

ParseResult parse(const Args& args) {
  std::vector<const char*> argv = {"tdistrun"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

Options options(const Args& args) {
  ParseResult r = parse(args);
  EXPECT_EQ(r.action, Action::kRun);
  return r.options;
}

// The UsageError `fn` throws; a test failure when it throws nothing or something else.
std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    EXPECT_TRUE(msg.starts_with("tdistrun: ")) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected UsageError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected UsageError, nothing was thrown";
  return "";
}

void expect_usage(const Args& args, std::initializer_list<std::string> parts) {
  std::string msg = usage_error([&] { parse(args); });
  for (const std::string& part : parts) {
    EXPECT_NE(msg.find(part), std::string::npos) << "message lacks \"" << part << "\": " << msg
                                                 << "\n  for: " << ::testing::PrintToString(args);
  }
}

bool is_random_id(const std::string& id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(LauncherOptions, Defaults) {
  ScopedEnv env;
  Options o = options({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.min_nodes, 1);
  EXPECT_EQ(o.max_nodes, 1);
  EXPECT_EQ(o.node_rank, -1);
  EXPECT_EQ(o.rdzv_backend, "c10d");
  EXPECT_EQ(o.rdzv_host, "127.0.0.1");
  EXPECT_EQ(o.rdzv_port, 0);  // one node: a free port, like --standalone
  EXPECT_TRUE(is_random_id(o.rdzv_id)) << o.rdzv_id;
  EXPECT_EQ(o.join_timeout, milliseconds(900000));
  EXPECT_EQ(o.last_call_timeout, milliseconds(30000));
  EXPECT_EQ(o.close_timeout, milliseconds(60000));
  EXPECT_FALSE(o.is_host.has_value());
  EXPECT_FALSE(o.standalone);
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_EQ(o.monitor_interval, milliseconds(100));
  EXPECT_EQ(o.term_timeout, milliseconds(30000));
  EXPECT_EQ(o.redirects.for_rank(0), Streams::kNone);
  EXPECT_EQ(o.tee.for_rank(0), Streams::kNone);
  EXPECT_EQ(o.log_dir, "");
  EXPECT_TRUE(o.local_ranks_filter.empty());
  EXPECT_EQ(o.role, "default");
  EXPECT_FALSE(o.module || o.no_python || o.run_path);
  EXPECT_EQ(o.start_method, "spawn");
  EXPECT_EQ(o.local_addr, "");
  EXPECT_EQ(o.program, "prog");
  EXPECT_TRUE(o.program_args.empty());
}

struct FlagCase {
  std::string flag;  // dash spelling without "--"
  std::string value;
  Args context;  // other flags the case needs
  std::function<void(const Options&)> check;
};

// Each value flag as --dash-name V, --under_score V, --dash-name=V and --under_score=V.
TEST(LauncherOptions, EveryValueFlagInEverySpelling) {
  ScopedEnv env;
  const std::vector<FlagCase> cases = {
      {"nproc-per-node", "4", {}, [](const Options& o) { EXPECT_EQ(o.nproc_per_node, 4); }},
      {"nnodes",
       "2:4",
       {"--rdzv-endpoint", "h:1"},
       [](const Options& o) {
         EXPECT_EQ(o.min_nodes, 2);
         EXPECT_EQ(o.max_nodes, 4);
       }},
      {"node-rank",
       "1",
       {"--nnodes", "2", "--master-addr", "10.0.0.1"},
       [](const Options& o) {
         EXPECT_EQ(o.node_rank, 1);
         EXPECT_EQ(o.rdzv_backend, "static");
         EXPECT_EQ(o.rdzv_host, "10.0.0.1");
         EXPECT_EQ(o.rdzv_port, 29500);
         EXPECT_EQ(o.rdzv_id, "none");
       }},
      {"rdzv-backend", "static", {}, [](const Options& o) { EXPECT_EQ(o.rdzv_backend, "static"); }},
      {"rdzv-endpoint",
       "node1:1234",
       {},
       [](const Options& o) {
         EXPECT_EQ(o.rdzv_host, "node1");
         EXPECT_EQ(o.rdzv_port, 1234);
         EXPECT_EQ(o.rdzv_id, "none");
       }},
      {"rdzv-id", "job7", {}, [](const Options& o) { EXPECT_EQ(o.rdzv_id, "job7"); }},
      {"rdzv-conf",
       "join_timeout=5,last_call_timeout=1.5,close_timeout=2,is_host=false",
       {},
       [](const Options& o) {
         EXPECT_EQ(o.join_timeout, milliseconds(5000));
         EXPECT_EQ(o.last_call_timeout, milliseconds(1500));
         EXPECT_EQ(o.close_timeout, milliseconds(2000));
         EXPECT_EQ(o.is_host, std::optional<bool>(false));
       }},
      {"rdzv-timeout",
       "12",
       {},
       [](const Options& o) { EXPECT_EQ(o.join_timeout.count(), 12000); }},
      {"max-restarts", "3", {}, [](const Options& o) { EXPECT_EQ(o.max_restarts, 3); }},
      {"monitor-interval",
       "0.25",
       {},
       [](const Options& o) { EXPECT_EQ(o.monitor_interval, milliseconds(250)); }},
      {"term-timeout",
       "2.5",
       {},
       [](const Options& o) { EXPECT_EQ(o.term_timeout, milliseconds(2500)); }},
      {"role", "trainer", {}, [](const Options& o) { EXPECT_EQ(o.role, "trainer"); }},
      {"start-method", "fork", {}, [](const Options& o) { EXPECT_EQ(o.start_method, "fork"); }},
      {"log-dir", "/tmp/logs", {}, [](const Options& o) { EXPECT_EQ(o.log_dir, "/tmp/logs"); }},
      {"redirects", "3", {}, [](const Options& o) { EXPECT_EQ(o.redirects.all, Streams::kBoth); }},
      {"tee",
       "0:1,1:2",
       {},
       [](const Options& o) {
         EXPECT_EQ(o.tee.for_rank(0), Streams::kOut);
         EXPECT_EQ(o.tee.for_rank(1), Streams::kErr);
       }},
      {"local-ranks-filter",
       "2,0,2",
       {"--nproc-per-node", "3"},
       [](const Options& o) {
         EXPECT_EQ(o.local_ranks_filter, (std::vector<int>{0, 2}));
       }},
      {"master-addr",
       "10.1.1.1",
       {},
       [](const Options& o) {
         EXPECT_EQ(o.rdzv_host, "10.1.1.1");
         EXPECT_EQ(o.rdzv_port, 0);
       }},
      {"master-port",
       "1234",
       {},
       [](const Options& o) {
         EXPECT_EQ(o.rdzv_port, 1234);
         EXPECT_EQ(o.rdzv_id, "none");
       }},
      {"local-addr", "10.0.0.5", {}, [](const Options& o) { EXPECT_EQ(o.local_addr, "10.0.0.5"); }},
  };
  for (const FlagCase& c : cases) {
    std::string under = c.flag;
    std::replace(under.begin(), under.end(), '-', '_');
    for (const std::string& name : {c.flag, under}) {
      for (bool joined : {false, true}) {
        Args args = c.context;
        if (joined) {
          args.push_back("--" + name + "=" + c.value);
        } else {
          args.insert(args.end(), {"--" + name, c.value});
        }
        args.insert(args.end(), {"prog", "x"});
        SCOPED_TRACE(::testing::PrintToString(args));
        Options o = options(args);
        c.check(o);
        EXPECT_EQ(o.program, "prog");
        EXPECT_EQ(o.program_args, Args{"x"});
      }
    }
  }
}

TEST(LauncherOptions, SwitchesAndShortForms) {
  ScopedEnv env;
  EXPECT_TRUE(options({"--standalone", "p"}).standalone);
  EXPECT_TRUE(options({"-m", "pkg.mod"}).module);
  EXPECT_TRUE(options({"--module", "pkg.mod"}).module);
  EXPECT_TRUE(options({"--no-python", "p"}).no_python);
  EXPECT_TRUE(options({"--no_python", "p"}).no_python);
  EXPECT_TRUE(options({"--run-path", "p"}).run_path);
  EXPECT_TRUE(options({"--run_path", "p"}).run_path);
  for (const Args& args : {Args{"-r", "2", "p"}, Args{"-r2", "p"}, Args{"-r=2", "p"}}) {
    EXPECT_EQ(options(args).redirects.all, Streams::kErr) << ::testing::PrintToString(args);
  }
  EXPECT_EQ(options({"-t", "1", "p"}).tee.all, Streams::kOut);
  EXPECT_EQ(options({"-t0:3", "p"}).tee.for_rank(0), Streams::kBoth);
}

TEST(LauncherOptions, EverythingFromProgramOnBelongsToIt) {
  ScopedEnv env;
  Options o = options({"--nproc-per-node", "2", "train", "--nproc-per-node", "5", "-m", "--help"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_FALSE(o.module);
  EXPECT_EQ(o.program, "train");
  EXPECT_EQ(o.program_args, (Args{"--nproc-per-node", "5", "-m", "--help"}));

  o = options({"--", "--weird-name", "-x"});
  EXPECT_EQ(o.program, "--weird-name");
  EXPECT_EQ(o.program_args, Args{"-x"});
  EXPECT_EQ(options({"-", "a"}).program, "-");
}

TEST(LauncherOptions, LastOccurrenceWins) {
  ScopedEnv env;
  EXPECT_EQ(options({"--nproc-per-node", "2", "--nproc_per_node=3", "p"}).nproc_per_node, 3);
}

TEST(LauncherOptions, HelpVersionAnywhereBeforeProgram) {
  ScopedEnv env;
  EXPECT_EQ(parse({"--help"}).action, Action::kHelp);
  EXPECT_EQ(parse({"-h"}).action, Action::kHelp);
  EXPECT_EQ(parse({"--nproc-per-node", "2", "--help", "prog"}).action, Action::kHelp);
  EXPECT_EQ(parse({"--bogus", "--nnodes", "9:1", "-h"}).action, Action::kHelp);
  EXPECT_EQ(parse({"--help-env"}).action, Action::kHelpEnv);
  EXPECT_EQ(parse({"--help_env", "prog"}).action, Action::kHelpEnv);
  EXPECT_EQ(parse({"--version"}).action, Action::kVersion);
  ParseResult r = parse({"prog", "--help"});
  EXPECT_EQ(r.action, Action::kRun);
  EXPECT_EQ(r.options.program_args, Args{"--help"});
}

TEST(LauncherOptions, ProgramArgumentsStayAsTyped) {
  ScopedEnv env;
  // CLI11 would split "[1,2]" into a list's items and read "--x=" as "--x"; a worker gets
  // its arguments as typed.
  Options o = options({"prog", "[1,2]", "{}", "", "--x=", "-r=2", "--", "-h"});
  EXPECT_EQ(o.program_args, (Args{"[1,2]", "{}", "", "--x=", "-r=2", "--", "-h"}));
  o = options({"--nproc_per_node=2", "--", "--x=", "[a]"});
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.program, "--x=");
  EXPECT_EQ(o.program_args, Args{"[a]"});
  EXPECT_EQ(options({"--rdzv-endpoint", "h:5", "--max-restarts=1", "p"}).max_restarts, 1);
  // "--" after a flag's value still ends the flags (CLI11 would take it as ending the value).
  o = options({"--nnodes", "1", "--", "--weird-name", "-x"});
  EXPECT_EQ(o.program, "--weird-name");
  EXPECT_EQ(o.program_args, Args{"-x"});
  o = options({"-r", "1", "--", "-", "--"});
  EXPECT_EQ(o.program, "-");
  EXPECT_EQ(o.program_args, Args{"--"});
}

TEST(LauncherOptions, FirstHelpOrFirstErrorWins) {
  ScopedEnv env;
  // Help, help-env and version: the first one, even after a flag that lacks its value.
  EXPECT_EQ(parse({"--log-dir", "--help"}).action, Action::kHelp);
  EXPECT_EQ(parse({"--standalone=1", "-h", "prog"}).action, Action::kHelp);
  EXPECT_EQ(parse({"-h", "--version"}).action, Action::kHelp);
  EXPECT_EQ(parse({"--version", "--help-env"}).action, Action::kVersion);
  EXPECT_EQ(parse({"--help=1"}).action, Action::kHelp);
  EXPECT_EQ(parse({"-1", "---", "--version"}).action, Action::kVersion);
  EXPECT_EQ(usage_error([] {
              parse({"--nproc-per-node", "2", "-1", "prog"});
            }),
            "tdistrun: unrecognized option '-1' (see tdistrun --help)");
  EXPECT_EQ(usage_error([] {
              parse({"---", "prog"});
            }),
            "tdistrun: unrecognized option '---' (see tdistrun --help)");
  // Errors: the first in argv order.
  EXPECT_EQ(usage_error([] {
              parse({"--foo", "--log-dir"});
            }),
            "tdistrun: unrecognized option '--foo' (see tdistrun --help)");
  EXPECT_EQ(usage_error([] {
              parse({"--log-dir", "--foo", "prog"});
            }),
            "tdistrun: --log-dir expects a value (DIR)");
  EXPECT_EQ(usage_error([] {
              parse({"--standalone=", "-x", "prog"});
            }),
            "tdistrun: --standalone takes no value");
  EXPECT_EQ(usage_error([] {
              parse({"-xy", "--standalone=1", "prog"});
            }),
            "tdistrun: unrecognized option '-x' (see tdistrun --help)");
  EXPECT_EQ(usage_error([] {
              parse({"--log-dir", "--", "prog"});
            }),
            "tdistrun: --log-dir expects a value (DIR)");
  EXPECT_EQ(usage_error([] {
              parse({"-r=", "prog"});
            }),
            "tdistrun: -r '': expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or "
            "LOCAL_RANK:0-3,... as in 0:1,1:2");
  EXPECT_EQ(usage_error([] {
              parse({"--nproc-per-node=", "prog"});
            }),
            "tdistrun: --nproc-per-node '': expected a positive number, auto or cpu");
}

TEST(LauncherOptions, CommandLineErrorsAreOneLine) {
  ScopedEnv env;
  EXPECT_EQ(usage_error([] {
              parse({"--foo", "prog"});
            }),
            "tdistrun: unrecognized option '--foo' (see tdistrun --help)");
  EXPECT_EQ(usage_error([] { parse({}); }), "tdistrun: missing PROGRAM (see tdistrun --help)");
  EXPECT_EQ(usage_error([] {
              parse({"--nnodes", "3:2", "prog"});
            }),
            "tdistrun: --nnodes '3:2': MIN must be <= MAX");
  expect_usage({"--foo=3", "prog"}, {"unrecognized option '--foo'"});
  expect_usage({"-x", "prog"}, {"unrecognized option '-x'"});
  expect_usage({"--nproc-per-node", "2"}, {"missing PROGRAM"});
  expect_usage(
      {
          "--",
      },
      {"missing PROGRAM"});
  expect_usage({"--nproc-per-node"}, {"--nproc-per-node expects a value"});
  expect_usage({"--log-dir", "--standalone", "prog"}, {"--log-dir expects a value"});
  expect_usage({"--standalone=1", "prog"}, {"--standalone takes no value"});
}

TEST(LauncherOptions, BadValuesNameFlagAndValue) {
  ScopedEnv env;
  const std::vector<std::pair<Args, std::vector<std::string>>> cases = {
      {{"--nnodes", "0"}, {"--nnodes '0'", "1 <= MIN <= MAX"}},
      {{"--nnodes", "x"}, {"--nnodes 'x'", "N or MIN:MAX"}},
      {{"--nnodes", "1:2:3"}, {"'1:2:3'", "N or MIN:MAX"}},
      {{"--nnodes", ":2"}, {"':2'", "N or MIN:MAX"}},
      {{"--nnodes=2:"}, {"'2:'", "N or MIN:MAX"}},
      {{"--nproc-per-node", "0"}, {"--nproc-per-node '0'", "positive number, auto or cpu"}},
      {{"--nproc_per_node", "-1"}, {"--nproc_per_node '-1'", "positive number"}},
      {{"--nproc-per-node", "four"}, {"'four'", "positive number"}},
      {{"--nproc-per-node", "gpu"}, {"'gpu'", "no GPUs"}},
      {{"--node-rank", "1"}, {"--node-rank '1'", "below the number of nodes (1)"}},
      {{"--nnodes", "2", "--master-addr", "h", "--node-rank", "2"}, {"'2'", "nodes (2)"}},
      {{"--rdzv-backend", "zookeeper"}, {"--rdzv-backend 'zookeeper'", "only c10d, static"}},
      {{"--rdzv-backend", "etcd-v2"}, {"'etcd-v2'", "needs --rdzv-endpoint"}},
      {{"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:0"}, {"'h:0'", "etcd's client port"}},
      {{"--rdzv-backend", "static", "--nnodes", "2", "--master-addr", "h"}, {"--node-rank"}},
      {{"--node-rank", "0", "--nnodes", "1:2", "--master-addr", "h"},
       {"--nnodes '1:2'", "fixed node count"}},
      {{"--nnodes", "2"}, {"--nnodes '2'", "--rdzv-endpoint", "--master-addr"}},
      {{"--nnodes", "1:3", "--master-port", "29555"}, {"--nnodes '1:3'", "--rdzv-endpoint"}},
      {{"--nnodes", "2", "--rdzv-endpoint", "h:0"}, {"--rdzv-endpoint 'h:0'", "port 0"}},
      {{"--nnodes", "2", "--master-addr", "h", "--master-port", "0"}, {"--master-port '0'"}},
      {{"--rdzv-endpoint", "::1:5"}, {"'::1:5'", "[::1]:29400"}},
      {{"--rdzv-endpoint", "[::1"}, {"'[::1'", "HOST[:PORT]"}},
      {{"--rdzv-endpoint", "[::1]x"}, {"'[::1]x'", "HOST[:PORT]"}},
      {{"--rdzv-endpoint="}, {"--rdzv-endpoint ''", "HOST[:PORT]"}},
      {{"--rdzv-endpoint", ":5"}, {"':5'", "HOST[:PORT]"}},
      {{"--rdzv-endpoint", "h:99999"}, {"'h:99999'", "0-65535"}},
      {{"--rdzv-endpoint", "h:x"}, {"'h:x'", "0-65535"}},
      {{"--master-port", "70000"}, {"--master-port '70000'", "0-65535"}},
      {{"--master_port", "p"}, {"--master_port 'p'", "0-65535"}},
      {{"--master-addr="}, {"--master-addr ''", "host"}},
      {{"--standalone", "--nnodes", "2"}, {"--nnodes '2'", "--standalone runs exactly one node"}},
      {{"--rdzv-conf", "foo=1"}, {"--rdzv-conf 'foo=1'", "unknown key 'foo'", "join_timeout"}},
      {{"--rdzv-conf", "join_timeout=0"}, {"join_timeout '0'", "positive number of seconds"}},
      {{"--rdzv-conf", "is_host=maybe"}, {"is_host 'maybe'", "true or false"}},
      {{"--rdzv-conf", "join_timeout"}, {"'join_timeout'", "KEY=VALUE"}},
      {{"--rdzv-conf", "=3"}, {"'=3'", "KEY=VALUE"}},
      {{"--rdzv-timeout", "0"}, {"--rdzv-timeout '0'", "positive number of seconds"}},
      {{"--rdzv-timeout", "-5"}, {"'-5'", "positive number of seconds"}},
      {{"--rdzv-timeout", "soon"}, {"'soon'", "positive number of seconds"}},
      {{"--rdzv-timeout", "nan"}, {"'nan'", "positive number of seconds"}},
      {{"--monitor-interval", "0"}, {"--monitor-interval '0'", "positive number of seconds"}},
      {{"--term-timeout", "x"}, {"--term-timeout 'x'", "positive number of seconds"}},
      {{"--max-restarts", "-1"}, {"--max-restarts '-1'", ">= 0"}},
      {{"--max-restarts", "1.5"}, {"'1.5'", ">= 0"}},
      {{"--rdzv-id="}, {"--rdzv-id ''", "non-empty"}},
      {{"--role="}, {"--role ''", "non-empty"}},
      {{"--start-method", "thread"}, {"--start-method 'thread'", "spawn, fork or forkserver"}},
      {{"-r", "4"}, {"-r '4'", "0-3"}},
      {{"--redirects", "a"}, {"--redirects 'a'", "0-3"}},
      {{"--redirects", "0:4"}, {"'0:4'", "0:1,1:2"}},
      {{"--tee", "0:1,"}, {"--tee '0:1,'", "0:1,1:2"}},
      {{"--tee", "x:1"}, {"'x:1'", "0:1,1:2"}},
      {{"--tee", "0:1,0:2"}, {"'0:1,0:2'", "local rank 0 is given twice"}},
      {{"--nproc-per-node", "2", "--local-ranks-filter", "0,5"},
       {"--local-ranks-filter '0,5'", "local rank 5", "--nproc-per-node 2"}},
      {{"--local-ranks-filter", "a,b"}, {"'a,b'", "separated by commas"}},
      {{"--local-ranks-filter", "0,,1"}, {"'0,,1'", "separated by commas"}},
      {{"-m", "--no-python"}, {"--module", "--no-python"}},
  };
  for (const auto& [args, parts] : cases) {
    Args full = args;
    full.push_back("prog");
    std::string msg = usage_error([&] { parse(full); });
    for (const std::string& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "message lacks \"" << part << "\": " << msg
                                                   << "\n  for " << ::testing::PrintToString(full);
    }
  }
}

TEST(LauncherOptions, RendezvousEndpoints) {
  ScopedEnv env;
  Options o = options({"--rdzv-endpoint", "host.example", "p"});
  EXPECT_EQ(o.rdzv_host, "host.example");
  EXPECT_EQ(o.rdzv_port, 29400);
  o = options({"--rdzv-endpoint", "[::1]:5", "p"});
  EXPECT_EQ(o.rdzv_host, "::1");
  EXPECT_EQ(o.rdzv_port, 5);
  o = options({"--rdzv-endpoint", "[fe80::1]", "p"});
  EXPECT_EQ(o.rdzv_host, "fe80::1");
  EXPECT_EQ(o.rdzv_port, 29400);
  EXPECT_EQ(options({"--rdzv-endpoint", "10.0.0.1:0", "p"}).rdzv_port, 0);  // one node
  EXPECT_EQ(options({"--master-addr", "[::1]", "p"}).rdzv_host, "::1");

  // Several nodes without a port meet at torchrun's defaults.
  o = options({"--nnodes", "2", "--master-addr", "10.0.0.1", "p"});
  EXPECT_EQ(o.rdzv_port, 29500);
  EXPECT_EQ(o.rdzv_id, "none");
  EXPECT_EQ(o.rdzv_backend, "c10d");
  EXPECT_EQ(o.node_rank, -1);
  o = options({"--nnodes", "1:3", "--rdzv-endpoint", "10.0.0.1", "--rdzv-id", "j", "p"});
  EXPECT_EQ(o.rdzv_port, 29400);
  EXPECT_EQ(o.rdzv_id, "j");
  o = options(
      {"--nnodes", "2", "--rdzv-backend", "static", "--node-rank", "0", "--master-addr", "h", "p"});
  EXPECT_EQ(o.rdzv_backend, "static");
  EXPECT_EQ(o.node_rank, 0);
  // An explicit c10d keeps c10d even with a node rank.
  EXPECT_EQ(options({"--rdzv-backend", "c10d", "--node-rank", "0", "p"}).rdzv_backend, "c10d");
  // etcd (torchrun's older name) is etcd-v2; etcd's client port is the default.
  o = options({"--nnodes", "1:2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e1", "--rdzv-id",
               "j", "p"});
  EXPECT_EQ(o.rdzv_backend, "etcd-v2");
  EXPECT_EQ(o.rdzv_host, "e1");
  EXPECT_EQ(o.rdzv_port, 2379);
  EXPECT_EQ(options({"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e1:23790", "p"}).rdzv_port,
            23790);
}

TEST(LauncherOptions, StandaloneIgnoresRendezvousFlagsAndPicksFreshIds) {
  ScopedEnv env;
  Options a = options({"--standalone", "--rdzv-backend", "static", "--rdzv-endpoint", "h:7",
                       "--rdzv-id", "mine", "--nnodes", "1:1", "p"});
  EXPECT_TRUE(a.standalone);
  EXPECT_EQ(a.rdzv_backend, "c10d");
  EXPECT_EQ(a.rdzv_host, "127.0.0.1");
  EXPECT_EQ(a.rdzv_port, 0);
  EXPECT_TRUE(is_random_id(a.rdzv_id)) << a.rdzv_id;
  Options b = options({"--standalone", "p"});
  EXPECT_TRUE(is_random_id(b.rdzv_id));
  EXPECT_NE(a.rdzv_id, b.rdzv_id);
  // One node without a port behaves the same way: two jobs never share a port or an id.
  EXPECT_NE(options({"p"}).rdzv_id, options({"p"}).rdzv_id);
}

TEST(LauncherOptions, RdzvTimeoutWinsOverRdzvConf) {
  ScopedEnv env;
  for (const Args& args : {Args{"--rdzv-timeout", "3", "--rdzv-conf", "join_timeout=9", "p"},
                           Args{"--rdzv-conf", "join_timeout=9", "--rdzv-timeout", "3", "p"}}) {
    EXPECT_EQ(options(args).join_timeout, milliseconds(3000));
  }
  Options o = options({"--rdzv-conf", "is_host=YES,,last_call_timeout=0.001", "p"});
  EXPECT_EQ(o.is_host, std::optional<bool>(true));
  EXPECT_EQ(o.last_call_timeout, milliseconds(1));
}

TEST(LauncherOptions, NprocAutoAndCpuAreOnlineCores) {
  ScopedEnv env;
  int cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(options({"--nproc-per-node", "auto", "p"}).nproc_per_node, cores);
  EXPECT_EQ(options({"--nproc-per-node=cpu", "p"}).nproc_per_node, cores);
}

TEST(LauncherOptions, TermTimeoutDefaultsToTheSetting) {
  ScopedEnv env;
  env.set("TDIST_TERM_TIMEOUT", "7");
  EXPECT_EQ(options({"p"}).term_timeout, milliseconds(7000));
  EXPECT_EQ(options({"--term-timeout", "1", "p"}).term_timeout, milliseconds(1000));
  env.set("TDIST_TERM_TIMEOUT", "abc");
  expect_usage({"p"}, {"TDIST_TERM_TIMEOUT 'abc'", "positive number of seconds"});
}

TEST(LauncherOptions, PetEnvironmentDefaults) {
  ScopedEnv env;
  env.set("PET_NPROC_PER_NODE", "3");
  env.set("PET_MAX_RESTARTS", "2");
  env.set("PET_RDZV_ENDPOINT", "node9:1000");
  env.set("PET_NNODES", "1:2");
  env.set("PET_MODULE", "1");
  Options o = options({"pkg"});
  EXPECT_EQ(o.nproc_per_node, 3);
  EXPECT_EQ(o.max_restarts, 2);
  EXPECT_EQ(o.rdzv_host, "node9");
  EXPECT_EQ(o.rdzv_port, 1000);
  EXPECT_EQ(o.max_nodes, 2);
  EXPECT_TRUE(o.module);

  // The command line wins.
  o = options({"--nproc-per-node", "5", "--nnodes", "1", "pkg"});
  EXPECT_EQ(o.nproc_per_node, 5);
  EXPECT_EQ(o.max_nodes, 1);

  env.set("PET_MODULE", "0");
  EXPECT_FALSE(options({"pkg"}).module);
  env.set("PET_STANDALONE", "yes");
  expect_usage({"pkg"}, {"PET_STANDALONE 'yes'", "0 or 1"});
  env.set("PET_STANDALONE", "1");
  env.set("PET_NNODES", "3:2");
  EXPECT_EQ(usage_error([] { parse({"pkg"}); }), "tdistrun: PET_NNODES '3:2': MIN must be <= MAX");
  env.set("PET_NNODES", "");  // empty = unset
  EXPECT_TRUE(options({"pkg"}).standalone);
}

TEST(LauncherOptions, StreamSpecForRank) {
  StreamSpec all{Streams::kBoth, {}};
  EXPECT_EQ(all.for_rank(0), Streams::kBoth);
  EXPECT_EQ(all.for_rank(7), Streams::kBoth);
  StreamSpec per{Streams::kNone, {{0, Streams::kOut}, {2, Streams::kErr}}};
  EXPECT_EQ(per.for_rank(0), Streams::kOut);
  EXPECT_EQ(per.for_rank(1), Streams::kNone);
  EXPECT_EQ(per.for_rank(2), Streams::kErr);
}

// A temporary directory with programs for worker_command, removed afterwards.
class WorkerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tdist_options_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    make("fakepy", true);
    make("python3", true);
    make("tool", true);
    make("tool.py", true);
    make("script.py", false);
    make("plain", false);
    fs::create_directory(dir_ / "subdir");
    fs::create_directory(dir_ / "other");
    make("other/tool", false);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void make(const std::string& name, bool executable) {
    std::ofstream(dir_ / name) << "#!/bin/sh\nexit 0\n";
    fs::permissions(dir_ / name, executable ? fs::perms(0755) : fs::perms(0644));
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static Options with(std::string program, Args args = {}) {
    Options o;
    o.program = std::move(program);
    o.program_args = std::move(args);
    return o;
  }

  ScopedEnv env_;
  fs::path dir_;
};

TEST_F(WorkerCommandTest, PythonScriptRunsWithPythonEnv) {
  env_.set("PYTHON", path("fakepy"));
  EXPECT_EQ(worker_command(with(path("script.py"), {"--lr", "1"})),
            (Args{path("fakepy"), "-u", path("script.py"), "--lr", "1"}));
}

TEST_F(WorkerCommandTest, PythonDefaultsToPython3OnPath) {
  env_.set("PATH", dir_.string());
  EXPECT_EQ(worker_command(with(path("script.py"))),
            (Args{path("python3"), "-u", path("script.py")}));
}

TEST_F(WorkerCommandTest, ModuleAndRunPath) {
  env_.set("PYTHON", path("fakepy"));
  Options o = with("pkg.train", {"a"});
  o.module = true;
  EXPECT_EQ(worker_command(o), (Args{path("fakepy"), "-u", "-m", "pkg.train", "a"}));
  o = with(path("tool"));
  o.run_path = true;
  o.no_python = true;  // --run-path wins, as in torchrun
  EXPECT_EQ(worker_command(o), (Args{path("fakepy"), "-u", path("tool")}));
}

TEST_F(WorkerCommandTest, NoPythonAndOtherProgramsRunDirectly) {
  env_.set("PYTHON", path("fakepy"));
  Options o = with(path("tool.py"), {"x"});
  o.no_python = true;
  EXPECT_EQ(worker_command(o), (Args{path("tool.py"), "x"}));
  EXPECT_EQ(worker_command(with(path("tool"), {"y"})), (Args{path("tool"), "y"}));
}

TEST_F(WorkerCommandTest, ProgramWithoutSlashIsFoundOnPath) {
  // other/tool is not executable, so the lookup goes on to the next entry.
  env_.set("PATH", "/nonexistent-dir:" + path("other") + ":" + dir_.string());
  EXPECT_EQ(worker_command(with("tool", {"z"})), (Args{path("tool"), "z"}));
  EXPECT_EQ(usage_error([] { worker_command(with("tdist-no-such-program")); }),
            "tdistrun: program 'tdist-no-such-program' not found on PATH");
}

TEST_F(WorkerCommandTest, MissingProgramsAreUsageErrors) {
  env_.set("PYTHON", path("fakepy"));
  std::string missing = path("missing");
  EXPECT_EQ(usage_error([&] { worker_command(with(missing)); }),
            "tdistrun: program '" + missing + "' not found");
  EXPECT_NE(usage_error([&] { worker_command(with(path("plain"))); }).find("not an executable"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { worker_command(with(path("subdir"))); }).find("not an executable"),
            std::string::npos);
  EXPECT_EQ(usage_error([&] { worker_command(with(path("missing.py"))); }),
            "tdistrun: program '" + path("missing.py") + "' not found");
  EXPECT_NE(usage_error([] { worker_command(with("")); }).find("missing PROGRAM"),
            std::string::npos);
  env_.set("PYTHON", "/nonexistent/python");
  EXPECT_EQ(usage_error([&] { worker_command(with(path("script.py"))); }),
            "tdistrun: python interpreter '/nonexistent/python' not found");
  Options o = with("pkg");
  o.module = true;
  o.no_python = true;
  EXPECT_NE(usage_error([&] { worker_command(o); }).find("--no-python"), std::string::npos);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(LauncherOptions, HelpExplainsEveryFlagWithin100Columns) {
  std::string help = help_text();
  EXPECT_TRUE(help.starts_with("usage: tdistrun [options] PROGRAM [ARGS...]\n")) << help;
  for (const char* flag : {"--nproc-per-node",
                           "--nnodes",
                           "--node-rank",
                           "--master-addr",
                           "--master-port",
                           "--rdzv-backend",
                           "--rdzv-endpoint",
                           "--rdzv-id",
                           "--rdzv-conf",
                           "--rdzv-timeout",
                           "--standalone",
                           "--max-restarts",
                           "--monitor-interval",
                           "--term-timeout",
                           "-r, --redirects",
                           "-t, --tee",
                           "--log-dir",
                           "--local-ranks-filter",
                           "--role",
                           "-m, --module",
                           "--no-python",
                           "--run-path",
                           "--start-method",
                           "--local-addr",
                           "-h, --help",
                           "--help-env",
                           "--version",
                           "PET_",
                           "LOCAL_WORLD_SIZE",
                           "TORCHELASTIC_RESTART_COUNT",
                           "free port"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
  for (const std::string& line : lines_of(help)) EXPECT_LE(line.size(), 100u) << line;
}

TEST(LauncherOptions, HelpEnvListsEverySetting) {
  std::string text = help_env_text();
  for (const Setting& s : all_settings()) {
    std::string name(s.name);
    size_t at = text.find("\n  " + name + " ");
    ASSERT_NE(at, std::string::npos) << name;
    std::string line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    if (!s.default_value.empty()) {
      EXPECT_NE(line.find(" " + std::string(s.default_value)), std::string::npos) << line;
    }
  }
  EXPECT_NE(text.find("TDIST_TERM_TIMEOUT"), std::string::npos);
  for (const char* other : {"PET_", "PYTHON", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                            "SLURM_PROCID", "TORCHELASTIC_"}) {
    EXPECT_NE(text.find(other), std::string::npos) << other;
  }
  for (const std::string& line : lines_of(text)) EXPECT_LE(line.size(), 100u) << line;
}

}  // namespace
}  // namespace tdist::launcher
