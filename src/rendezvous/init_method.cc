// Parsing of init methods and the launcher environment (init_method.h).
#include "rendezvous/init_method.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <span>
#include <string_view>

#include "rendezvous/store_agreement.h"
#include "tdist/error.h"
#include "tdist/settings.h"

namespace tdist::rendezvous_detail {
namespace {

constexpr std::array<const char*, 4> kRankVars = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                                  "SLURM_PROCID"};
constexpr std::array<const char*, 4> kWorldVars = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                   "SLURM_NTASKS"};

using Query = std::map<std::string, std::string>;

// A rank or world size and where it came from, for messages.
struct Resolved {
  int value = -1;
  std::string source;
};

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Parses a non-negative decimal integer; `what` names where the text came from.
int parse_count(const std::string& text, const std::string& what) {
  bool ok = !text.empty() && text.size() <= 9 &&
            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!ok) TDIST_THROW(InvalidArgument, what, "='", text, "' is not a non-negative integer");
  return std::stoi(text);
}

uint16_t parse_port(const std::string& text, const std::string& what) {
  bool ok = !text.empty() && text.size() <= 5 &&
            std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  int port = ok ? std::stoi(text) : 0;
  if (port < 1 || port > 65535) {
    TDIST_THROW(InvalidArgument, what, "='", text, "' is not a port number (1-65535)");
  }
  return static_cast<uint16_t>(port);
}

Query parse_query(std::string_view query, const std::string& url) {
  Query out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string key(item.substr(0, eq));
    if (eq == std::string_view::npos) {
      TDIST_THROW(InvalidArgument, "init_method '", url, "': query parameter '", key,
                  "' has no value (expected ", key, "=<value>)");
    }
    if (key != "rank" && key != "world_size") {
      TDIST_THROW(InvalidArgument, "init_method '", url, "': unknown query parameter '", key,
                  "' (accepted: rank, world_size)");
    }
    if (out.count(key) != 0) {
      TDIST_THROW(InvalidArgument, "init_method '", url, "': query parameter '", key,
                  "' is given twice");
    }
    out[key] = std::string(item.substr(eq + 1));
  }
  return out;
}

// The value of `name` ("rank" or "world_size"): the explicit argument, else the URL's
// query, else the first of `env_vars` that is set.
Resolved resolve(const char* name, int arg, const Query& query, const std::string& url,
                 std::span<const char* const> env_vars) {
  Resolved from_url;
  if (auto it = query.find(name); it != query.end()) {
    from_url = {parse_count(it->second, detail::str_cat("init_method '", url, "': ", name)),
                detail::str_cat(name, "= in the init_method URL")};
  }
  if (arg != -1) {
    if (arg < 0) {
      TDIST_THROW(InvalidArgument, "argument ", name, "=", arg,
                  " is negative; pass a value >= 0, or -1 to take it from the init_method "
                  "or the environment");
    }
    if (from_url.value != -1 && from_url.value != arg) {
      TDIST_THROW(InvalidArgument, "argument ", name, "=", arg, " contradicts ", name, "=",
                  from_url.value, " in init_method '", url, "'; give it in one place");
    }
    return {arg, detail::str_cat("argument ", name)};
  }
  if (from_url.value != -1) return from_url;
  for (const char* var : env_vars) {
    std::string text = env_string(var);
    if (!text.empty()) {
      return {parse_count(text, detail::str_cat("environment variable ", var)), var};
    }
  }
  return {};
}

std::string join_names(std::span<const char* const> names) {
  std::string out;
  for (size_t i = 1; i < names.size(); ++i) out += (i > 1 ? ", " : "") + std::string(names[i]);
  return out;
}

void resolve_rank_and_world(InitSpec& spec, const std::string& scheme, int rank, int world_size,
                            const Query& query, const std::string& url) {
  bool env = spec.scheme == InitScheme::kEnv;
  std::span<const char* const> rank_vars;
  std::span<const char* const> world_vars;
  if (env) {
    rank_vars = kRankVars;
    world_vars = kWorldVars;
  }
  Resolved r = resolve("rank", rank, query, url, rank_vars);
  Resolved w = resolve("world_size", world_size, query, url, world_vars);
  if (w.value == -1) {
    if (env) {
      TDIST_THROW(InvalidArgument, "env:// needs the world size: set WORLD_SIZE (or ",
                  join_names(kWorldVars), ") or pass world_size");
    }
    TDIST_THROW(InvalidArgument, scheme, ":// needs the world size: add ?world_size=W to '", url,
                "' or pass world_size");
  }
  if (r.value == -1) {
    if (env) {
      TDIST_THROW(InvalidArgument, "env:// needs the rank: set RANK (or ", join_names(kRankVars),
                  ") or pass rank");
    }
    TDIST_THROW(InvalidArgument, scheme, ":// needs the rank: add ?rank=R to '", url,
                "' or pass rank");
  }
  if (w.value == 0) {
    TDIST_THROW(InvalidArgument, "world_size 0 (from ", w.source,
                ") is invalid: a job has at least one rank");
  }
  if (r.value >= w.value) {
    TDIST_THROW(InvalidArgument, "rank ", r.value, " (from ", r.source,
                ") must be below world_size ", w.value, " (from ", w.source, ")");
  }
  spec.rank = r.value;
  spec.world_size = w.value;
}

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "host:port" or "[v6]:port". `what` names the text in messages ("init_method '...'" or
// "environment variable ...='...'"); `form` ("tcp://", "TDIST_AGENT_STORE=") prefixes the
// examples they give.
HostPort parse_authority(const std::string& authority, const std::string& what,
                         const std::string& form) {
  HostPort out;
  std::string port_text;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos || close + 1 >= authority.size() ||
        authority[close + 1] != ':') {
      TDIST_THROW(InvalidArgument, what, ": expected ", form, "[ipv6-address]:port");
    }
    out.host = authority.substr(1, close - 1);
    port_text = authority.substr(close + 2);
  } else {
    size_t colon = authority.find(':');
    if (colon == std::string::npos) {
      TDIST_THROW(InvalidArgument, what, " has no port: expected ", form, "host:port");
    }
    if (authority.find(':', colon + 1) != std::string::npos) {
      TDIST_THROW(InvalidArgument, what, ": an IPv6 address needs brackets, as in ", form,
                  "[::1]:29500");
    }
    out.host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) {
    TDIST_THROW(InvalidArgument, what, " has no host: expected ", form, "host:port");
  }
  out.port = parse_port(port_text, what + ": port");
  return out;
}

void parse_env_master(InitSpec& spec, const StoreAgreement* agreement) {
  std::string addr = env_string("MASTER_ADDR");
  // Under mpirun (say) with neither variable set, the launcher's own channel agrees on
  // the store; one variable alone is still an error.
  if (addr.empty() && env_string("MASTER_PORT").empty() && applies(agreement)) {
    spec.agreed_store = true;
    return;
  }
  if (addr.empty()) {
    TDIST_THROW(InvalidArgument,
                "env:// needs MASTER_ADDR, the address of rank 0 (or of the launcher's store), "
                "e.g. MASTER_ADDR=127.0.0.1");
  }
  if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') {
    addr = addr.substr(1, addr.size() - 2);
  }
  std::string port = env_string("MASTER_PORT");
  if (port.empty()) {
    TDIST_THROW(InvalidArgument,
                "env:// needs MASTER_PORT, the port of the store on MASTER_ADDR, e.g. "
                "MASTER_PORT=29500");
  }
  spec.host = addr;
  spec.port = parse_port(port, "environment variable MASTER_PORT");
}

// Torch's namespace of a launcher-hosted store: "/worker/attempt_<restart count>".
std::string attempt_prefix() {
  std::string count = env_string("TORCHELASTIC_RESTART_COUNT");
  int attempt =
      count.empty() ? 0 : parse_count(count, "environment variable TORCHELASTIC_RESTART_COUNT");
  return detail::str_cat("/worker/attempt_", attempt);
}

// env:// under tdistrun: the launcher's store from TDIST_AGENT_STORE (host:port of a TCPStore,
// or etcd://host:port). False when unset.
bool parse_env_agent_store(InitSpec& spec) {
  std::string text = setting_string("TDIST_AGENT_STORE");
  if (text.empty()) return false;
  constexpr std::string_view kEtcd = "etcd://";
  std::string authority = text;
  if (lower(text.substr(0, kEtcd.size())) == kEtcd) {
    spec.etcd = true;
    authority = text.substr(kEtcd.size());
    if (!authority.empty() && authority.back() == '/') authority.pop_back();
  }
  HostPort hp = parse_authority(
      authority, detail::str_cat("environment variable TDIST_AGENT_STORE='", text, "'"),
      spec.etcd ? "TDIST_AGENT_STORE=etcd://" : "TDIST_AGENT_STORE=");
  spec.host = hp.host;
  spec.port = hp.port;
  spec.agent_store = true;
  spec.key_prefix = setting_string("TDIST_AGENT_STORE_PREFIX");
  if (spec.key_prefix.empty()) spec.key_prefix = attempt_prefix();
  return true;
}

}  // namespace

bool is_ipv6_literal(const std::string& host) { return host.find(':') != std::string::npos; }

bool use_agent_store() {
  if (!env_string("TDIST_USE_AGENT_STORE").empty()) return setting_bool("TDIST_USE_AGENT_STORE");
  std::string text = env_string("TORCHELASTIC_USE_AGENT_STORE");
  std::string v = lower(text);
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  TDIST_THROW(InvalidArgument, "environment variable TORCHELASTIC_USE_AGENT_STORE='", text,
              "' is not a boolean (True/False, 1/0)");
}

InitSpec parse_init_method(const std::string& init_method, int rank, int world_size,
                           const StoreAgreement* agreement) {
  const std::string& url = init_method;
  size_t sep = url.find("://");
  if (sep == std::string::npos || sep == 0) {
    TDIST_THROW(InvalidArgument, "init_method '", url,
                "' is not a URL; use env://, tcp://host:port or file:///path");
  }
  std::string scheme = lower(url.substr(0, sep));
  std::string rest = url.substr(sep + 3);
  size_t question = rest.find('?');
  std::string location = rest.substr(0, question);
  Query query =
      parse_query(question == std::string::npos ? std::string_view()
                                                : std::string_view(rest).substr(question + 1),
                  url);

  InitSpec spec;
  if (scheme == "env") {
    spec.scheme = InitScheme::kEnv;
    if (!location.empty() && location != "/") {
      TDIST_THROW(InvalidArgument, "init_method '", url,
                  "': env:// takes no host or path (they come from MASTER_ADDR and MASTER_PORT)");
    }
  } else if (scheme == "tcp") {
    spec.scheme = InitScheme::kTcp;
    if (!location.empty() && location.back() == '/') location.pop_back();
    if (location.find('/') != std::string::npos) {
      TDIST_THROW(InvalidArgument, "init_method '", url,
                  "' has a path; expected tcp://host:port?rank=R&world_size=W");
    }
  } else if (scheme == "file") {
    spec.scheme = InitScheme::kFile;
    if (location.rfind("localhost/", 0) == 0) location = location.substr(9);
    if (location.empty() || location[0] != '/' || location == "/") {
      TDIST_THROW(InvalidArgument, "init_method '", url,
                  "' has no absolute file path; expected file:///path/to/file");
    }
    spec.path = location;
  } else {
    TDIST_THROW(InvalidArgument, "init_method '", url, "' has unknown scheme '", scheme,
                "://'; use env://, tcp://host:port or file:///path");
  }

  // Everything is validated before anything is contacted; the order follows the URL.
  if (spec.scheme == InitScheme::kTcp) {
    HostPort hp = parse_authority(location, detail::str_cat("init_method '", url, "'"), "tcp://");
    spec.host = hp.host;
    spec.port = hp.port;
  }
  resolve_rank_and_world(spec, scheme, rank, world_size, query, url);
  // tdistrun sets both TDIST_AGENT_STORE (its own store, for tdist workers) and
  // MASTER_ADDR/MASTER_PORT (a store on rank 0, for Python torch workers); ours wins.
  if (spec.scheme == InitScheme::kEnv && parse_env_agent_store(spec)) return spec;
  if (spec.scheme == InitScheme::kEnv) parse_env_master(spec, agreement);
  if (spec.scheme != InitScheme::kFile && !spec.agreed_store && use_agent_store()) {
    spec.agent_store = true;
    spec.key_prefix = attempt_prefix();
  }
  return spec;
}

}  // namespace tdist::rendezvous_detail
