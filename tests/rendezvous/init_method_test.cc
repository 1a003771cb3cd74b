// Parsing of init methods and the launcher environment, without contacting anything.
#include "rendezvous/init_method.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "rendezvous/test_util.h"
#include "support/expect_invalid.h"
#include "tdist/error.h"

namespace tdist::rendezvous_detail {
namespace {

using tdist::rdzv_test::ScopedEnv;

void set_master(ScopedEnv& env) {
  env.set("MASTER_ADDR", "10.1.2.3");
  env.set("MASTER_PORT", "29500");
}

TEST(RendezvousInitMethod, EnvReadsTorchrunVariables) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "2");
  env.set("WORLD_SIZE", "4");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.scheme, InitScheme::kEnv);
  EXPECT_EQ(spec.host, "10.1.2.3");
  EXPECT_EQ(spec.port, 29500);
  EXPECT_EQ(spec.rank, 2);
  EXPECT_EQ(spec.world_size, 4);
  EXPECT_FALSE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "");
}

TEST(RendezvousInitMethod, EnvFallsBackToOpenMpi) {
  ScopedEnv env;
  set_master(env);
  env.set("OMPI_COMM_WORLD_RANK", "1");
  env.set("OMPI_COMM_WORLD_SIZE", "3");
  env.set("PMI_RANK", "0");  // later in the chain: ignored
  env.set("PMI_SIZE", "9");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.world_size, 3);
}

TEST(RendezvousInitMethod, EnvFallsBackToPmi) {
  ScopedEnv env;
  set_master(env);
  env.set("PMI_RANK", "5");
  env.set("PMI_SIZE", "6");
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_NTASKS", "1");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.rank, 5);
  EXPECT_EQ(spec.world_size, 6);
}

TEST(RendezvousInitMethod, EnvFallsBackToSlurm) {
  ScopedEnv env;
  set_master(env);
  env.set("SLURM_PROCID", "7");
  env.set("SLURM_NTASKS", "8");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.rank, 7);
  EXPECT_EQ(spec.world_size, 8);
}

TEST(RendezvousInitMethod, EnvChainsAreIndependentAndEmptyMeansUnset) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "");  // empty counts as unset
  env.set("PMI_RANK", "3");
  env.set("WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_SIZE", "99");  // WORLD_SIZE comes first
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.rank, 3);
  EXPECT_EQ(spec.world_size, 4);
}

TEST(RendezvousInitMethod, TorchrunVariablesWinOverMpiOnes) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("OMPI_COMM_WORLD_RANK", "0");
  env.set("OMPI_COMM_WORLD_SIZE", "1");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.world_size, 2);
}

TEST(RendezvousInitMethod, ExplicitArgumentsWinOverEnvironment) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  InitSpec spec = parse_init_method("env://", 3, 5);
  EXPECT_EQ(spec.rank, 3);
  EXPECT_EQ(spec.world_size, 5);
  // An explicit world size with RANK from the environment.
  spec = parse_init_method("env://", -1, 5);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.world_size, 5);
}

TEST(RendezvousInitMethod, EnvQueryWinsOverEnvironment) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  InitSpec spec = parse_init_method("env://?rank=0&world_size=3", -1, -1);
  EXPECT_EQ(spec.rank, 0);
  EXPECT_EQ(spec.world_size, 3);
}

TEST(RendezvousInitMethod, EnvMissingVariablesNameWhatToSet) {
  ScopedEnv env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "MASTER_ADDR", "MASTER_ADDR=127.0.0.1");
  env.set("MASTER_ADDR", "127.0.0.1");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "MASTER_PORT", "MASTER_PORT=29500");
  env.set("MASTER_PORT", "29500");
  ::unsetenv("RANK");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "set RANK", "OMPI_COMM_WORLD_RANK",
                 "PMI_RANK", "SLURM_PROCID");
  env.set("RANK", "0");
  ::unsetenv("WORLD_SIZE");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "set WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
                 "PMI_SIZE", "SLURM_NTASKS");
}

TEST(RendezvousInitMethod, EnvBadValuesNameTheVariableAndValue) {
  ScopedEnv env;
  set_master(env);
  env.set("WORLD_SIZE", "4");
  env.set("RANK", "abc");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "RANK='abc'", "non-negative integer");
  env.set("RANK", "-1");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "RANK='-1'");
  env.set("RANK", "4");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "rank 4 (from RANK)",
                 "world_size 4 (from WORLD_SIZE)");
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "0");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "world_size 0 (from WORLD_SIZE)");
  env.set("WORLD_SIZE", "99999999999");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "WORLD_SIZE='99999999999'");
  env.set("WORLD_SIZE", "4");
  env.set("SLURM_PROCID", "x");  // not consulted: RANK is set
  EXPECT_EQ(parse_init_method("env://", -1, -1).rank, 0);
  ::unsetenv("RANK");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "SLURM_PROCID='x'");
  env.set("SLURM_PROCID", "1");
  env.set("MASTER_PORT", "http");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "MASTER_PORT='http'", "1-65535");
  env.set("MASTER_PORT", "0");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "MASTER_PORT='0'");
  env.set("MASTER_PORT", "65536");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "MASTER_PORT='65536'");
}

TEST(RendezvousInitMethod, BadArgumentsAreNamed) {
  ScopedEnv env;
  set_master(env);
  EXPECT_INVALID(parse_init_method("env://", -2, 4), "argument rank=-2", "negative");
  EXPECT_INVALID(parse_init_method("env://", 0, -7), "argument world_size=-7");
  EXPECT_INVALID(parse_init_method("env://", 0, 0), "world_size 0 (from argument world_size)");
  EXPECT_INVALID(parse_init_method("env://", 4, 4), "rank 4 (from argument rank)",
                 "world_size 4 (from argument world_size)");
}

TEST(RendezvousInitMethod, ArgumentContradictingUrlIsAnError) {
  ScopedEnv env;
  EXPECT_INVALID(parse_init_method("tcp://h:1?rank=1&world_size=4", 2, -1), "argument rank=2",
                 "contradicts rank=1");
  EXPECT_INVALID(parse_init_method("tcp://h:1?rank=1&world_size=4", -1, 3), "argument world_size=3",
                 "contradicts world_size=4");
  // Agreeing values are fine.
  InitSpec spec = parse_init_method("tcp://h:1?rank=1&world_size=4", 1, 4);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.world_size, 4);
}

TEST(RendezvousInitMethod, TcpUrl) {
  ScopedEnv env;
  InitSpec spec = parse_init_method("tcp://node-7.example:1234?rank=3&world_size=8", -1, -1);
  EXPECT_EQ(spec.scheme, InitScheme::kTcp);
  EXPECT_EQ(spec.host, "node-7.example");
  EXPECT_EQ(spec.port, 1234);
  EXPECT_EQ(spec.rank, 3);
  EXPECT_EQ(spec.world_size, 8);
  spec = parse_init_method("TCP://127.0.0.1:80/", 0, 1);
  EXPECT_EQ(spec.host, "127.0.0.1");
  EXPECT_EQ(spec.port, 80);
}

TEST(RendezvousInitMethod, TcpIpv6Url) {
  ScopedEnv env;
  InitSpec spec = parse_init_method("tcp://[::1]:29500?world_size=2", 1, -1);
  EXPECT_EQ(spec.host, "::1");
  EXPECT_EQ(spec.port, 29500);
  EXPECT_TRUE(is_ipv6_literal(spec.host));
  spec = parse_init_method("tcp://[fe80::1%eth0]:1?rank=0&world_size=1", -1, -1);
  EXPECT_EQ(spec.host, "fe80::1%eth0");
  EXPECT_INVALID(parse_init_method("tcp://::1:29500", 0, 1), "needs brackets");
  EXPECT_INVALID(parse_init_method("tcp://[::1]29500", 0, 1), "tcp://[ipv6-address]:port");
  EXPECT_INVALID(parse_init_method("tcp://[::1", 0, 1), "tcp://[ipv6-address]:port");
}

TEST(RendezvousInitMethod, TcpDoesNotReadTheEnvironment) {
  ScopedEnv env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  EXPECT_INVALID(parse_init_method("tcp://h:1", -1, -1), "tcp:// needs the world size",
                 "?world_size=W");
  EXPECT_INVALID(parse_init_method("tcp://h:1?world_size=2", -1, -1), "tcp:// needs the rank",
                 "?rank=R");
}

TEST(RendezvousInitMethod, BadTcpUrls) {
  ScopedEnv env;
  EXPECT_INVALID(parse_init_method("tcp://host", 0, 1), "has no port");
  EXPECT_INVALID(parse_init_method("tcp://:29500", 0, 1), "has no host");
  EXPECT_INVALID(parse_init_method("tcp://host:", 0, 1), "port=''");
  EXPECT_INVALID(parse_init_method("tcp://host:99999", 0, 1), "port='99999'", "1-65535");
  EXPECT_INVALID(parse_init_method("tcp://host:12ab", 0, 1), "port='12ab'");
  EXPECT_INVALID(parse_init_method("tcp://host:1/some/path", 0, 1), "has a path");
  EXPECT_INVALID(parse_init_method("tcp://host:1?rank=x&world_size=2", -1, -1), "rank='x'");
  EXPECT_INVALID(parse_init_method("tcp://host:1?rank=0&world_size=", -1, -1), "world_size=''");
  EXPECT_INVALID(parse_init_method("tcp://host:1?worldsize=2", 0, -1),
                 "unknown query parameter 'worldsize'", "accepted: rank, world_size");
  EXPECT_INVALID(parse_init_method("tcp://host:1?rank", 0, 1), "'rank' has no value");
  EXPECT_INVALID(parse_init_method("tcp://host:1?rank=0&rank=0&world_size=1", -1, -1),
                 "given twice");
  EXPECT_INVALID(parse_init_method("tcp://host:1?rank=2&world_size=2", -1, -1),
                 "rank 2 (from rank= in the init_method URL)");
}

TEST(RendezvousInitMethod, FileUrl) {
  ScopedEnv env;
  InitSpec spec = parse_init_method("file:///tmp/some dir/store?world_size=3", 2, -1);
  EXPECT_EQ(spec.scheme, InitScheme::kFile);
  EXPECT_EQ(spec.path, "/tmp/some dir/store");
  EXPECT_EQ(spec.rank, 2);
  EXPECT_EQ(spec.world_size, 3);
  EXPECT_FALSE(spec.agent_store);
  spec = parse_init_method("file://localhost/tmp/x?rank=0&world_size=1", -1, -1);
  EXPECT_EQ(spec.path, "/tmp/x");
  EXPECT_INVALID(parse_init_method("file://relative/path", 0, 1), "no absolute file path");
  EXPECT_INVALID(parse_init_method("file://", 0, 1), "no absolute file path");
  EXPECT_INVALID(parse_init_method("file:///tmp/x", 0, -1), "file:// needs the world size");
  EXPECT_INVALID(parse_init_method("file:///tmp/x?world_size=2", -1, -1), "file:// needs the rank");
}

TEST(RendezvousInitMethod, BadUrlsAndUnknownSchemes) {
  ScopedEnv env;
  EXPECT_INVALID(parse_init_method("", 0, 1), "init_method ''", "is not a URL");
  EXPECT_INVALID(parse_init_method("127.0.0.1:29500", 0, 1), "is not a URL", "env://");
  EXPECT_INVALID(parse_init_method("://x", 0, 1), "is not a URL");
  EXPECT_INVALID(parse_init_method("mpi://", 0, 1), "unknown scheme 'mpi://'", "tcp://host:port");
  EXPECT_INVALID(parse_init_method("env://somehost:1", 0, 1), "env:// takes no host");
}

TEST(RendezvousInitMethod, AgentStoreSettings) {
  ScopedEnv env;
  set_master(env);
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("TDIST_USE_AGENT_STORE", "1");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_TRUE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "/worker/attempt_0");
  env.set("TORCHELASTIC_RESTART_COUNT", "3");
  EXPECT_EQ(parse_init_method("env://", -1, -1).key_prefix, "/worker/attempt_3");
  EXPECT_TRUE(parse_init_method("tcp://h:1", 0, 1).agent_store);
  EXPECT_FALSE(parse_init_method("file:///tmp/x", 0, 1).agent_store);
  // TDIST_USE_AGENT_STORE decides when set, even against torch's variable.
  env.set("TDIST_USE_AGENT_STORE", "0");
  env.set("TORCHELASTIC_USE_AGENT_STORE", "True");
  EXPECT_FALSE(parse_init_method("env://", -1, -1).agent_store);
  ::unsetenv("TDIST_USE_AGENT_STORE");
  EXPECT_TRUE(parse_init_method("env://", -1, -1).agent_store);
  env.set("TORCHELASTIC_USE_AGENT_STORE", "False");
  EXPECT_FALSE(parse_init_method("env://", -1, -1).agent_store);
  env.set("TORCHELASTIC_USE_AGENT_STORE", "maybe");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "TORCHELASTIC_USE_AGENT_STORE='maybe'");
  env.set("TDIST_USE_AGENT_STORE", "perhaps");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "TDIST_USE_AGENT_STORE='perhaps'");
  env.set("TDIST_USE_AGENT_STORE", "yes");
  env.set("TORCHELASTIC_RESTART_COUNT", "one");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "TORCHELASTIC_RESTART_COUNT='one'");
}

TEST(RendezvousInitMethod, Ipv6MasterAddr) {
  ScopedEnv env;
  env.set("MASTER_ADDR", "[::1]");
  env.set("MASTER_PORT", "1");
  EXPECT_EQ(parse_init_method("env://", 0, 1).host, "::1");
  env.set("MASTER_ADDR", "::1");
  EXPECT_EQ(parse_init_method("env://", 0, 1).host, "::1");
}

// Clears tdistrun's store variables for a test's lifetime (ScopedEnv restores the rest).
class LauncherStoreEnv {
 public:
  LauncherStoreEnv() {
    for (auto& [name, saved] : saved_) {
      if (const char* v = std::getenv(name)) saved = v;
      ::unsetenv(name);
    }
  }
  ~LauncherStoreEnv() {
    for (const auto& [name, saved] : saved_) {
      if (saved) {
        ::setenv(name, saved->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  LauncherStoreEnv(const LauncherStoreEnv&) = delete;
  LauncherStoreEnv& operator=(const LauncherStoreEnv&) = delete;

 private:
  std::pair<const char*, std::optional<std::string>> saved_[2] = {
      {"TDIST_AGENT_STORE", std::nullopt}, {"TDIST_AGENT_STORE_PREFIX", std::nullopt}};
};

TEST(RendezvousInitMethod, LauncherStoreReplacesMasterAddr) {
  ScopedEnv env;
  LauncherStoreEnv launcher;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("TDIST_AGENT_STORE", "10.0.0.5:4000");  // no MASTER_ADDR/MASTER_PORT needed
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.host, "10.0.0.5");
  EXPECT_EQ(spec.port, 4000);
  EXPECT_TRUE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "/worker/attempt_0");
  env.set("TORCHELASTIC_RESTART_COUNT", "2");
  EXPECT_EQ(parse_init_method("env://", -1, -1).key_prefix, "/worker/attempt_2");
  env.set("TDIST_AGENT_STORE_PREFIX", "/tdistrun/job7/round_3/");
  EXPECT_EQ(parse_init_method("env://", -1, -1).key_prefix, "/tdistrun/job7/round_3/");

  // tdistrun also points MASTER_* at rank 0's store for Python workers and turns torch's
  // agent store off; tdist workers still use the launcher's store.
  set_master(env);
  env.set("TORCHELASTIC_USE_AGENT_STORE", "False");
  spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.host, "10.0.0.5");
  EXPECT_EQ(spec.port, 4000);
  EXPECT_TRUE(spec.agent_store);
  EXPECT_EQ(spec.rank, 1);
  EXPECT_EQ(spec.world_size, 2);

  env.set("TDIST_AGENT_STORE", "[fd00::7]:29400");
  spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.host, "fd00::7");
  EXPECT_EQ(spec.port, 29400);

  // Empty means unset: back to MASTER_ADDR/MASTER_PORT and no agent store.
  env.set("TDIST_AGENT_STORE", "");
  spec = parse_init_method("env://", -1, -1);
  EXPECT_EQ(spec.host, "10.1.2.3");
  EXPECT_FALSE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "");
}

TEST(RendezvousInitMethod, LauncherStoreOnEtcd) {
  ScopedEnv env;
  LauncherStoreEnv launcher;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("TDIST_AGENT_STORE", "etcd://10.0.0.9:2379");
  env.set("TDIST_AGENT_STORE_PREFIX", "/tdist/job7/tdistrun/job7/r/0/w");
  InitSpec spec = parse_init_method("env://", -1, -1);
  EXPECT_TRUE(spec.etcd);
  EXPECT_TRUE(spec.agent_store);
  EXPECT_EQ(spec.host, "10.0.0.9");
  EXPECT_EQ(spec.port, 2379);
  EXPECT_EQ(spec.key_prefix, "/tdist/job7/tdistrun/job7/r/0/w");
  env.set("TDIST_AGENT_STORE", "ETCD://[fd00::7]:2379/");
  spec = parse_init_method("env://", -1, -1);
  EXPECT_TRUE(spec.etcd);
  EXPECT_EQ(spec.host, "fd00::7");
  env.set("TDIST_AGENT_STORE", "10.0.0.9:2379");
  EXPECT_FALSE(parse_init_method("env://", -1, -1).etcd);
  env.set("TDIST_AGENT_STORE", "etcd://10.0.0.9");
  EXPECT_INVALID(parse_init_method("env://", -1, -1), "TDIST_AGENT_STORE='etcd://10.0.0.9'",
                 "has no port");
}

TEST(RendezvousInitMethod, LauncherStoreIsOnlyForEnv) {
  ScopedEnv env;
  LauncherStoreEnv launcher;
  env.set("TDIST_AGENT_STORE", "10.0.0.5:4000");
  env.set("TDIST_AGENT_STORE_PREFIX", "/p/");
  InitSpec spec = parse_init_method("tcp://h:1", 0, 1);
  EXPECT_EQ(spec.host, "h");
  EXPECT_EQ(spec.port, 1);
  EXPECT_FALSE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "");
  spec = parse_init_method("file:///tmp/x", 0, 1);
  EXPECT_FALSE(spec.agent_store);
  EXPECT_EQ(spec.key_prefix, "");
  // Even a malformed value is not read by tcp://.
  env.set("TDIST_AGENT_STORE", "garbage");
  EXPECT_EQ(parse_init_method("tcp://h:1", 0, 1).host, "h");
}

TEST(RendezvousInitMethod, BadLauncherStoreNamesTheVariable) {
  ScopedEnv env;
  LauncherStoreEnv launcher;
  set_master(env);  // a bad TDIST_AGENT_STORE must not fall back to these
  env.set("TDIST_AGENT_STORE", "localhost");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TDIST_AGENT_STORE='localhost'", "has no port");
  env.set("TDIST_AGENT_STORE", ":4000");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TDIST_AGENT_STORE=':4000'", "has no host");
  env.set("TDIST_AGENT_STORE", "::1:4000");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TDIST_AGENT_STORE='::1:4000'",
                 "needs brackets", "TDIST_AGENT_STORE=[::1]:29500");
  env.set("TDIST_AGENT_STORE", "[::1]");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TDIST_AGENT_STORE='[::1]'",
                 "[ipv6-address]:port");
  env.set("TDIST_AGENT_STORE", "h:0");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TDIST_AGENT_STORE='h:0'", "port='0'",
                 "1-65535");
  env.set("TDIST_AGENT_STORE", "h:12ab");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "port='12ab'");
  env.set("TDIST_AGENT_STORE", "h:1");
  env.set("TORCHELASTIC_RESTART_COUNT", "x");
  EXPECT_INVALID(parse_init_method("env://", 0, 1), "TORCHELASTIC_RESTART_COUNT='x'");
}

}  // namespace
}  // namespace tdist::rendezvous_detail
