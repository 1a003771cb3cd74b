// The one registry of TDIST_* environment settings. Add new settings here, sorted.
#include "tdist/settings.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "tdist/error.h"

namespace tdist {
namespace {

constexpr int64_t kYear = 365 * 24 * 3600;  // longest duration setting, in seconds
constexpr int64_t kGiB = int64_t{1} << 30;
// A TCPStore frame's length is 32 bits and carries up to 1 MiB besides its value.
constexpr int64_t kMaxStoreValue = (int64_t{1} << 32) - (int64_t{1} << 21);

constexpr auto kSettings = std::to_array<Setting>({
    {"TDIST_AGENT_HEARTBEAT_TIMEOUT", "10",
     "seconds without a heartbeat after which tdistrun agents declare another node dead",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_AGENT_STORE", "",
     "host:port ([v6]:port) of the launcher's TCPStore, or etcd://host:port (an etcd the "
     "launcher's agents meet on); set by tdistrun, env:// then uses it instead of "
     "MASTER_ADDR/MASTER_PORT"},
    {"TDIST_AGENT_STORE_PREFIX", "",
     "key prefix of this round in TDIST_AGENT_STORE; empty = /worker/attempt_<restart count>"},
    {"TDIST_ALGO", "",
     "force collective algorithms: 'all_reduce=ring,broadcast=chain' or a bare all_reduce "
     "algorithm ('ring', 'halving_doubling', 'recursive_doubling', 'hierarchical'); empty = "
     "by size and topology"},
    {"TDIST_AUTH_TOKEN", "",
     "the job's secret: every store and transport connection proves it knows it (HMAC-SHA256 "
     "challenge-response) and refuses peers that do not; empty = no authentication (tdistrun "
     "makes one per job)"},
    {"TDIST_AUTH_TOKEN_FILE", "",
     "file whose first line is the job's secret (not readable by others), when TDIST_AUTH_TOKEN "
     "is unset"},
    {"TDIST_CHANNELS", "shm,tcp",
     "kinds of channel the auto backend may use, in order of preference: each peer gets the "
     "first that can reach it (shm: same host; tcp: any)"},
    {"TDIST_CHUNK_BYTES", "262144",
     "pipeline chunk of the ring, chain and halving-doubling collectives, in bytes (unset: "
     "groups on device memory use 32 MiB)",
     SettingType::kInt, 1, kGiB},
    {"TDIST_DEBUG", "off",
     "off, callsite or detail: callsite adds each collective's call site (file and line: C++'s "
     "SourceLocation, Python's calling frame) to the fingerprint its messages carry, so ranks "
     "that call from different lines get a DesyncError naming both; detail also compares each "
     "collective's fingerprint (operation, sequence number, dtype, count, root, reduce op, call "
     "site; the torch layer adds the tensors' shapes) across the group's ranks through its store "
     "before it runs, and a mismatch is a DesyncError quoting both sides (costs a few store "
     "round trips per collective)",
     SettingType::kText, 0, -1, "off|callsite|detail"},
    {"TDIST_ELASTIC_JOIN_WINDOW", "30",
     "seconds a new generation of an elastic job waits for members that have not arrived (a "
     "frozen rank, a replacement still starting) before it goes on without them",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_ELASTIC_SPARE", "",
     "set by tdistrun --elastic-spares for a spare worker: ElasticGroup::join waits until it "
     "is given a dead worker's slot"},
    {"TDIST_ENGINE", "auto",
     "engine of the Python torch.distributed backend \"tdist\" when its options name none: "
     "auto, tcp or shm",
     SettingType::kText, 0, -1, "auto|tcp|shm"},
    {"TDIST_FLIGHT_RECORDER_FILE", "/tmp/tdist_flight_rank_",
     "where flight records go: this prefix, the global rank and \".json\" (written on a group's "
     "first failure, on SIGUSR1 and on request; merge them with tools/tdist_flight.py)"},
    {"TDIST_FLIGHT_RECORDER_SIZE", "1024",
     "collectives each process group remembers for its flight record (0 = none)", SettingType::kInt,
     0, 1 << 24},
    {"TDIST_LAZY_CONNECT", "0",
     "1: a pair of ranks joined by TCP connects when it first exchanges something, not when the "
     "group is made (torch: TORCH_GLOO_LAZY_INIT); groups whose algorithms talk to few peers "
     "then connect only those, and an elastic reconfigure no full mesh (tdistrun --elastic "
     "sets 1 for its workers unless it is set)",
     SettingType::kBool},
    {"TDIST_LOCAL_RANK", "",
     "this process's rank on its host, for the CUDA device it uses (tdist::torch::local_device "
     "and the nccl backend: the rank modulo the visible devices); unset: LOCAL_RANK (torchrun's "
     "and tdistrun's)",
     SettingType::kInt, 0, 1 << 20},
    {"TDIST_LOG_LEVEL", "warn", "log level: trace, debug, info, warn, error or off",
     SettingType::kText, 0, -1, "trace|debug|info|warn|warning|error|off|none"},
    {"TDIST_NCCL_DEVICE", "-1",
     "CUDA device of the nccl backend's groups in this process; -1 = LOCAL_RANK (torchrun's) "
     "modulo the number of visible devices, or device 0 without LOCAL_RANK",
     SettingType::kInt, -1, 4095},
    {"TDIST_POLL_US", "1000",
     "longest a thread waiting on a transport polls before it sleeps, in microseconds (adaptive "
     "below it); polling happens only with a core per local rank; 0 = always sleep at once",
     SettingType::kInt, 0, 1000000},
    {"TDIST_REDUCE_ISA", "auto",
     "reduction kernels to use: auto (best the CPU has), avx512, avx2, sse4 or scalar",
     SettingType::kText, 0, -1, "auto|avx512|avx2|sse4|scalar"},
    {"TDIST_SHM_RING_BYTES", "1048576",
     "bytes of each shared-memory ring (one per ordered pair of ranks on a host)",
     SettingType::kInt, 4096, kGiB},
    {"TDIST_SHM_SINGLE_COPY_BYTES", "1048576",
     "shared-memory messages of at least this many bytes are copied straight from the sender's "
     "memory (process_vm_readv) where the kernel allows it; 0 = always through the rings; "
     "unset = 1 MiB where that copy runs at least 2/3 as fast as memcpy (measured once per "
     "process), else 0",
     SettingType::kInt, 0, int64_t{1} << 62},
    {"TDIST_SOCKET_BUFFER_BYTES", "4194304",
     "SO_SNDBUF/SO_RCVBUF of TCP transport sockets in bytes; 0 keeps the kernel's autotuning",
     SettingType::kInt, 0, std::numeric_limits<int>::max()},
    {"TDIST_SOCKET_IFNAME", "",
     "network interfaces for the TCP transport (NCCL syntax): prefixes 'eth0,eth1', '^lo,docker' "
     "excludes, '=eth0' exact; empty = the route to the store's host"},
    {"TDIST_SOCKET_NSOCKS_PERPEER", "2", "TCP connections per pair of ranks (the same on all)",
     SettingType::kInt, 1, 8},
    {"TDIST_STORE_AUTH_GRACE", "5",
     "seconds a client of a TCPStore that requires a token or TLS may take to prove itself "
     "(sshd's LoginGraceTime); a connection that has not is closed (0 = "
     "TDIST_STORE_FRAME_TIMEOUT's limit applies instead)",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_STORE_BIND", "",
     "address rank 0's store listens on ('0.0.0.0' or '::': every interface); empty = the "
     "address MASTER_ADDR resolves to when this host has it (loopback stays loopback), else "
     "every interface"},
    {"TDIST_STORE_CONNECT_TIMEOUT", "300",
     "seconds a store client keeps retrying to connect before it gives up", SettingType::kSeconds,
     0, kYear},
    {"TDIST_STORE_FRAME_TIMEOUT", "30",
     "seconds a TCPStore client may take to send one whole request; a connection holding a "
     "half-sent request longer is closed (0 = no limit)",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_STORE_MAX_BUFFER_BYTES", "1073741824",
     "bytes a TCPStore server buffers for all its clients together (requests arriving, "
     "replies unsent); a request or reply over 64 KiB that does not fit is refused (1 GiB)",
     SettingType::kInt, 1 << 20, int64_t{1} << 50},
    {"TDIST_STORE_MAX_CONNECTIONS", "65536",
     "most client connections a TCPStore server accepts at once", SettingType::kInt, 1, 1 << 24},
    {"TDIST_STORE_MAX_KEY_BYTES", "4096", "largest key a TCPStore server accepts, in bytes",
     SettingType::kInt, 1, 1 << 20},
    {"TDIST_STORE_MAX_VALUE_BYTES", "268435456",
     "largest value a TCPStore server accepts, in bytes (256 MiB; at most 4 GiB - 2 MiB)",
     SettingType::kInt, 0, kMaxStoreValue},
    {"TDIST_STORE_MAX_WAITS_PER_CONNECTION", "1024",
     "most get/wait/multi_get requests one client connection may have waiting for keys in a "
     "TCPStore server at once",
     SettingType::kInt, 1, 1 << 24},
    {"TDIST_STORE_TIMEOUT", "300", "default seconds a store get/wait blocks before TimeoutError",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_TERM_TIMEOUT", "30",
     "seconds tdistrun gives workers to exit after forwarding a terminating signal, before "
     "SIGKILL",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_TIMEOUT", "1800",
     "default seconds a process group's blocking operations wait (init_process_group's timeout)",
     SettingType::kSeconds, 0, kYear},
    {"TDIST_TLS_CA", "",
     "CA certificates (PEM file or hashed directory) that must have signed every peer's "
     "certificate; with TDIST_TLS_CERT and TDIST_TLS_KEY turns on mutual TLS for the store and "
     "the tcp transport"},
    {"TDIST_TLS_CERT", "", "this process's TLS certificate chain (PEM file); see TDIST_TLS_CA"},
    {"TDIST_TLS_KEY", "",
     "this process's TLS private key (PEM file, not readable by others); see TDIST_TLS_CA"},
    {"TDIST_TRACE", "",
     "folder for a Chrome/Perfetto timeline of every collective and DDP bucket: "
     "tdist_trace_rank<rank>.json per rank, merged by tdistrun into tdist_trace.json"},
    {"TDIST_USE_AGENT_STORE", "0",
     "1 when the launcher hosts the TCPStore at MASTER_ADDR:MASTER_PORT and rank 0 only connects "
     "(torch: TORCHELASTIC_USE_AGENT_STORE)",
     SettingType::kBool},
    {"TDIST_WAIT_WARNING", "60",
     "seconds a collective may wait before its rank asks the job which ranks have not arrived "
     "and logs them (they then also appear in the collective's timeout error; 0 = never)",
     SettingType::kSeconds, 0, kYear},
});

bool sorted_by_name() {
  return std::is_sorted(kSettings.begin(), kSettings.end(),
                        [](const Setting& a, const Setting& b) { return a.name < b.name; });
}

std::string value_of(const Setting& s) {
  std::string v = env_string(std::string(s.name).c_str());
  return v.empty() ? std::string(s.default_value) : v;
}

[[noreturn]] void bad_value(std::string_view name, const std::string& value,
                            const std::string& want) {
  TDIST_THROW(InvalidArgument, "environment setting ", name, "='", value, "' is not ", want);
}

}  // namespace

std::span<const Setting> all_settings() {
  static const bool ok = sorted_by_name();
  (void)ok;
  return kSettings;
}

const Setting& find_setting(std::string_view name) {
  for (const Setting& s : kSettings) {
    if (s.name == name) return s;
  }
  TDIST_THROW(InvalidArgument, "setting ", name, " is not declared in the settings registry");
}

bool setting_is_set(std::string_view name) {
  find_setting(name);  // declared names only
  return !env_string(std::string(name).c_str()).empty();
}

bool setting_is_present(std::string_view name) {
  find_setting(name);  // declared names only
  return std::getenv(std::string(name).c_str()) != nullptr;
}

std::string accepted_values(const Setting& setting) {
  std::string out;
  if (!setting.choices.empty()) {
    for (char c : setting.choices) out += c == '|' ? std::string(", ") : std::string(1, c);
  } else if (setting.ranged()) {
    out = std::to_string(setting.min) + ".." + std::to_string(setting.max);
  }
  return out;
}

std::string setting_string(std::string_view name) {
  const Setting& s = find_setting(name);
  std::string v = value_of(s);
  if (s.choices.empty()) return v;
  std::string lower;
  for (char c : v) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = s.choices;
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    if (rest.substr(0, bar) == lower) return v;
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  bad_value(name, v, "one of " + accepted_values(s));
}

int64_t setting_int(std::string_view name) {
  const Setting& s = find_setting(name);
  std::string v = value_of(s);
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0) bad_value(name, v, "an integer");
  if (s.ranged() && (n < s.min || n > s.max)) {
    bad_value(name, v, "within the accepted range " + accepted_values(s));
  }
  return n;
}

double setting_double(std::string_view name) {
  std::string v = value_of(find_setting(name));
  char* end = nullptr;
  errno = 0;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d)) bad_value(name, v, "a number");
  return d;
}

bool setting_bool(std::string_view name) {
  std::string v = value_of(find_setting(name));
  std::string s;
  for (char c : v) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  bad_value(name, v, "a boolean (1/0, true/false, yes/no, on/off)");
}

std::chrono::milliseconds setting_seconds(std::string_view name) {
  const Setting& s = find_setting(name);
  double secs = setting_double(name);
  if (secs < 0) bad_value(name, value_of(s), "a non-negative number of seconds");
  if (s.ranged() && (secs < static_cast<double>(s.min) || secs > static_cast<double>(s.max))) {
    bad_value(name, value_of(s), "within the accepted range " + accepted_values(s) + " seconds");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(secs * 1000.0)));
}

void check_settings() {
  for (const Setting& s : kSettings) {
    if (!setting_is_set(s.name)) continue;
    switch (s.type) {
      case SettingType::kText:
        setting_string(s.name);
        break;
      case SettingType::kInt:
        setting_int(s.name);
        break;
      case SettingType::kSeconds:
        setting_seconds(s.name);
        break;
      case SettingType::kBool:
        setting_bool(s.name);
        break;
    }
  }
}

std::string env_string(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace tdist
