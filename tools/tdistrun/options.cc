// tdistrun's command line (options.h): one table of flags declares CLI11's options (which
// split argv), the PET_ environment defaults and --help; values are then checked and
// turned into Options.
#include "tdistrun/options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string_view>
#include <system_error>

#include "cli/cli.h"
#include "tdist/settings.h"
#include "tdistrun/option_flags.h"

namespace tdist::launcher {
namespace {

using namespace flags;

// A flag's value and where it came from ("--nnodes" as typed, or "PET_NNODES").
struct Value {
  std::string text;
  std::string source;
};
using Values = std::map<std::string_view, Value>;

const Value* lookup(const Values& values, std::string_view name) {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

[[noreturn]] void usage(const std::string& message) { throw UsageError("tdistrun: " + message); }

[[noreturn]] void bad(const Value& v, std::string_view expected) {
  usage(v.source + " '" + v.text + "': " + std::string(expected));
}

std::string pet_name(std::string_view flag) {
  std::string out = "PET_";
  for (char c : flag) out += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return out;
}

// What help, help-env and version throw: they win over everything else before PROGRAM.
struct Stop {
  Action action;
};

// What argv says before PROGRAM, and PROGRAM with its arguments. Problems are held back
// until the end, so that --help anywhere before PROGRAM still wins.
struct Scan {
  Values values;
  std::vector<std::string> program;
  std::string problem;         // the first one: a switch given a value, a value missing
  size_t unknowns_before = 0;  // unrecognized options before it (CLI11's remaining)

  // One flag, as the parse meets it; `unknowns` is how many unrecognized options came first.
  void note(const Flag& f, const std::string& typed, const std::optional<std::string>& value,
            size_t unknowns) {
    std::string bad;
    if (f.kind == Kind::kHelp || f.kind == Kind::kHelpEnv || f.kind == Kind::kVersion) {
      throw Stop{f.kind == Kind::kHelp      ? Action::kHelp
                 : f.kind == Kind::kHelpEnv ? Action::kHelpEnv
                                            : Action::kVersion};
    } else if (f.kind == Kind::kSwitch) {
      if (value) bad = typed + " takes no value";
      values[f.name] = {"1", typed};
    } else if (value) {  // "-r=2" is "-r 2", as "--redirects=2"
      values[f.name] = {typed.size() == 2 && value->starts_with('=') ? value->substr(1) : *value,
                        typed};
    } else {
      bad = typed + " expects a value (" + std::string(f.metavar) + ")";
    }
    if (problem.empty() && !bad.empty()) {
      problem = bad;
      unknowns_before = unknowns;
    }
  }
};

// argv through CLI11: each spelling of each flag of the table (--dash-name, --under_name,
// -s), PROGRAM and the rest, then the PET_ defaults of the flags not given.
Scan scan(int argc, const char* const* argv) {
  CLI::App app;
  app.set_help_flag();  // -h/--help are the table's
  Scan out;
  std::vector<std::pair<const Flag*, cli::Spellings>> pet;
  for (const Flag& f : kFlags) {
    std::string dash(f.name), under(f.name);
    std::replace(under.begin(), under.end(), '-', '_');
    std::string names = "--" + dash + (under == dash ? "" : ",--" + under);
    if (f.short_name != 0) names += std::string(",-") + f.short_name;
    auto note = [&out, &app, &f](const std::string& typed, const std::optional<std::string>& v) {
      out.note(f, typed, v, app.remaining_size());
    };
    cli::Spellings spellings = f.kind == Kind::kValue
                                   ? cli::add_value(app, names, note, cli::Next::kNotAFlag)
                                   : cli::add_switch(app, names, note);
    if (f.pet) pet.emplace_back(&f, std::move(spellings));
  }
  cli::add_positionals(
      app, "PROGRAM", [&](const std::string& a) { out.program.push_back(a); }, true);
  auto unrecognized = [](const std::string& arg) {
    const std::string typed =
        arg.starts_with("--") ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    return "unrecognized option '" + typed + "' (see tdistrun --help)";
  };
  // The first "--" ends the flags: CLI11 sees what comes before it (it would take a "--"
  // right after a flag's value as ending that value), PROGRAM and its arguments the rest.
  const auto dashes = std::find(argv + 1, argv + argc, std::string_view("--")) - argv;
  const cli::Parsed parsed = cli::parse(app, static_cast<int>(dashes), argv, unrecognized);
  // CLI11 takes "-1", "---" or "-=" for PROGRAM: an option tdistrun does not know, after
  // which the scan goes on (where a --help still wins).
  const bool bad_program =
      !out.program.empty() && out.program[0].size() > 1 && out.program[0][0] == '-';
  if (dashes < argc) {
    out.program.insert(out.program.end(), argv + dashes + (out.program.empty() ? 1 : 0),
                       argv + argc);
  }
  if (bad_program) {
    std::vector<const char*> rest = {argv[0]};
    for (size_t i = 1; i < out.program.size(); ++i) rest.push_back(out.program[i].c_str());
    try {
      scan(static_cast<int>(rest.size()), rest.data());
    } catch (const UsageError&) {  // reported below, after the first error
    }
  }
  if (!out.problem.empty() && (parsed.error.empty() || out.unknowns_before == 0)) {
    usage(out.problem);
  }
  if (!parsed.error.empty()) usage(parsed.error);
  if (bad_program) usage(unrecognized(out.program[0]));
  for (const auto& [f, spellings] : pet) {
    const std::string name = pet_name(f->name);
    if (auto text = cli::env_fallback(spellings, name)) out.values[f->name] = {*text, name};
  }
  return out;
}

std::optional<long long> to_int(std::string_view s) {
  long long n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

int int_in(const Value& v, long long lo, long long hi, std::string_view expected) {
  std::optional<long long> n = to_int(v.text);
  if (!n || *n < lo || *n > hi) bad(v, expected);
  return static_cast<int>(*n);
}

std::optional<std::chrono::milliseconds> to_seconds(const std::string& s) {
  char* end = nullptr;
  double secs = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(secs) || secs <= 0 || secs > 1e9) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(secs * 1000.0)));
}

std::chrono::milliseconds seconds(const Value& v) {
  std::optional<std::chrono::milliseconds> ms = to_seconds(v.text);
  if (!ms) bad(v, "expected a positive number of seconds");
  return *ms;
}

bool switch_on(const Values& values, std::string_view name) {
  auto it = values.find(name);
  if (it == values.end()) return false;
  std::optional<long long> n = to_int(it->second.text);
  if (!n) bad(it->second, "expected 0 or 1");
  return *n != 0;
}

std::optional<bool> to_bool(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "t" || s == "yes" || s == "y") return true;
  if (s == "0" || s == "false" || s == "f" || s == "no" || s == "n") return false;
  return std::nullopt;
}

int online_cores() { return static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

int parse_nproc(const Value& v) {
  if (v.text == "auto" || v.text == "cpu") return online_cores();
  if (v.text == "gpu")
    bad(v, "tdist runs CPU workers and uses no GPUs; give a number, auto or cpu");
  return int_in(v, 1, 1 << 20, "expected a positive number, auto or cpu");
}

void parse_nnodes(const Value& v, Options& o) {
  constexpr std::string_view kExpected = "expected N or MIN:MAX with 1 <= MIN <= MAX";
  std::vector<std::string_view> parts = split(v.text, ':');
  if (parts.size() > 2) bad(v, kExpected);
  std::optional<long long> lo = to_int(parts.front());
  std::optional<long long> hi = to_int(parts.back());
  if (!lo || !hi || *lo < 1 || *hi > 1 << 20) bad(v, kExpected);
  if (*lo > *hi) bad(v, "MIN must be <= MAX");
  o.min_nodes = static_cast<int>(*lo);
  o.max_nodes = static_cast<int>(*hi);
}

Streams to_streams(std::string_view s) {
  return s.size() == 1 && s[0] >= '0' && s[0] <= '3' ? static_cast<Streams>(s[0] - '0')
                                                     : static_cast<Streams>(0xff);
}

StreamSpec parse_streams(const Value& v) {
  constexpr std::string_view kExpected =
      "expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or LOCAL_RANK:0-3,... as in 0:1,1:2";
  StreamSpec spec;
  if (v.text.find(':') == std::string::npos) {
    spec.all = to_streams(v.text);
    if (spec.all > Streams::kBoth) bad(v, kExpected);
    return spec;
  }
  for (std::string_view item : split(v.text, ',')) {
    size_t colon = item.find(':');
    std::optional<long long> rank = to_int(item.substr(0, colon));
    Streams streams = to_streams(colon == std::string_view::npos ? "" : item.substr(colon + 1));
    if (!rank || *rank < 0 || *rank > 1 << 20 || streams > Streams::kBoth) bad(v, kExpected);
    if (!spec.per_rank.emplace(static_cast<int>(*rank), streams).second) {
      bad(v, "local rank " + std::to_string(*rank) + " is given twice");
    }
  }
  return spec;
}

std::vector<int> parse_ranks_filter(const Value& v, int nproc) {
  std::vector<int> ranks;
  for (std::string_view item : split(v.text, ',')) {
    std::optional<long long> r = to_int(item);
    if (!r || *r < 0) bad(v, "expected local ranks separated by commas, as in 0,2");
    if (*r >= nproc) {
      bad(v, "local rank " + std::to_string(*r) + " does not exist with --nproc-per-node " +
                 std::to_string(nproc));
    }
    ranks.push_back(static_cast<int>(*r));
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

void apply_rdzv_conf(const Value& v, Options& o) {
  for (std::string_view item : split(v.text, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) bad(v, "expected KEY=VALUE,...");
    std::string key(item.substr(0, eq));
    std::string text(item.substr(eq + 1));
    std::optional<std::chrono::milliseconds> secs = to_seconds(text);
    std::optional<bool> flag = to_bool(text);
    if (key == "join_timeout" || key == "last_call_timeout" || key == "close_timeout") {
      if (!secs) bad(v, key + " '" + text + "' is not a positive number of seconds");
      std::chrono::milliseconds* field = key == "join_timeout"        ? &o.join_timeout
                                         : key == "last_call_timeout" ? &o.last_call_timeout
                                                                      : &o.close_timeout;
      *field = *secs;
    } else if (key == "is_host") {
      if (!flag) bad(v, "is_host '" + text + "' is not true or false");
      o.is_host = flag;
    } else {
      bad(v, "unknown key '" + key +
                 "' (accepted: join_timeout, last_call_timeout, close_timeout, is_host)");
    }
  }
}

// HOST[:PORT] or [V6][:PORT], brackets removed.
void parse_endpoint(const Value& v, int default_port, std::string& host, int& port) {
  constexpr std::string_view kExpected = "expected HOST[:PORT], an IPv6 address as [::1]:29400";
  std::string_view s = v.text;
  std::optional<std::string_view> port_text;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) bad(v, kExpected);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty() && rest[0] != ':') bad(v, kExpected);
    if (!rest.empty()) port_text = rest.substr(1);
    s = s.substr(1, close - 1);
  } else if (size_t colon = s.find(':'); colon != std::string_view::npos) {
    if (s.find(':', colon + 1) != std::string_view::npos) bad(v, kExpected);
    port_text = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  if (s.empty()) bad(v, kExpected);
  host = std::string(s);
  port = default_port;
  if (port_text) {
    std::optional<long long> n = to_int(*port_text);
    if (!n || *n < 0 || *n > 65535) bad(v, "expected a port number 0-65535 after HOST:");
    port = static_cast<int>(*n);
  }
}

std::string random_id() {
  std::random_device device;
  std::string id;
  for (int word = 0; word < 4; ++word) {
    uint32_t bits = device();
    for (int i = 0; i < 8; ++i, bits >>= 4) id += "0123456789abcdef"[bits & 15];
  }
  return id;
}

void check_python_flags(const Options& o) {
  if (o.module && o.no_python) {
    usage("don't use both --module (-m) and --no-python: a module needs the Python interpreter");
  }
}

// Where and how the node agents meet.
void resolve_rendezvous(const Values& values, Options& o) {
  auto get = [&](std::string_view name) { return lookup(values, name); };
  const Value* nnodes = get("nnodes");
  if (const Value* v = get("node-rank")) {
    o.node_rank = int_in(
        *v, 0, o.max_nodes - 1,
        "expected a node rank below the number of nodes (" + std::to_string(o.max_nodes) + ")");
  }
  if (o.standalone) {
    if (o.max_nodes != 1) bad(*nnodes, "--standalone runs exactly one node");
    o.rdzv_backend = "c10d";
    o.rdzv_host = "127.0.0.1";
    o.rdzv_port = 0;
    o.rdzv_id = random_id();
    return;
  }
  const Value* backend = get("rdzv-backend");
  if (const Value* v = backend) {
    o.rdzv_backend = v->text == "etcd" ? "etcd-v2" : v->text;  // torchrun's older name
    if (o.rdzv_backend != "c10d" && o.rdzv_backend != "static" && o.rdzv_backend != "etcd-v2") {
      bad(*v, "only c10d, static and etcd-v2 (or etcd) are supported");
    }
  } else if (o.node_rank >= 0) {
    o.rdzv_backend = "static";
  }
  if (o.rdzv_backend == "static" && o.max_nodes > 1) {
    if (o.min_nodes != o.max_nodes) bad(*nnodes, "the static rendezvous needs a fixed node count");
    if (o.node_rank < 0) usage("the static rendezvous with several nodes needs --node-rank");
  }
  const Value* endpoint = get("rdzv-endpoint");
  const Value* addr = get("master-addr");
  const Value* port = get("master-port");
  const bool etcd = o.rdzv_backend == "etcd-v2";
  if (etcd && endpoint == nullptr) {
    bad(*backend, "etcd-v2 needs --rdzv-endpoint HOST[:PORT], etcd's client address");
  }
  if (endpoint != nullptr) {
    parse_endpoint(*endpoint, etcd ? 2379 : 29400, o.rdzv_host, o.rdzv_port);
    if (etcd && o.rdzv_port == 0) bad(*endpoint, "etcd-v2 needs etcd's client port");
  } else {
    o.rdzv_host = "127.0.0.1";
    if (addr != nullptr) {
      const std::string& a = addr->text;
      bool bracketed = a.size() > 2 && a.front() == '[' && a.back() == ']';
      o.rdzv_host = bracketed ? a.substr(1, a.size() - 2) : a;
      if (o.rdzv_host.empty()) bad(*addr, "expected a host name or address");
    }
    if (port != nullptr) {
      o.rdzv_port = int_in(*port, 0, 65535, "expected a port number 0-65535");
    } else {
      o.rdzv_port = o.max_nodes == 1 ? 0 : 29500;
    }
  }
  if (o.max_nodes > 1) {
    if (endpoint == nullptr && addr == nullptr) {
      bad(*nnodes, "several nodes need --rdzv-endpoint HOST[:PORT] or --master-addr HOST");
    }
    if (o.rdzv_port == 0) {
      bad(endpoint != nullptr ? *endpoint : *port, "port 0 (a free port) works only for one node");
    }
  }
  if (const Value* v = get("rdzv-id")) {
    if (v->text.empty()) bad(*v, "expected a non-empty job id");
    o.rdzv_id = v->text;
  } else if (o.max_nodes == 1 && endpoint == nullptr && port == nullptr) {
    o.rdzv_id = random_id();
  }
}

Options build(const Values& values) {
  auto get = [&](std::string_view name) { return lookup(values, name); };
  Options o;
  if (const Value* v = get("nproc-per-node")) o.nproc_per_node = parse_nproc(*v);
  if (const Value* v = get("nnodes")) parse_nnodes(*v, o);
  o.standalone = switch_on(values, "standalone");
  o.module = switch_on(values, "module");
  o.no_python = switch_on(values, "no-python");
  o.run_path = switch_on(values, "run-path");
  o.elastic = switch_on(values, "elastic");
  check_python_flags(o);
  if (const Value* v = get("rdzv-conf")) apply_rdzv_conf(*v, o);
  if (const Value* v = get("rdzv-timeout")) o.join_timeout = seconds(*v);
  resolve_rendezvous(values, o);
  if (const Value* v = get("max-restarts")) {
    o.max_restarts = int_in(*v, 0, 1 << 30, "expected a number >= 0");
  }
  if (const Value* v = get("elastic-spares")) {
    o.elastic_spares = int_in(*v, 0, 1024, "expected a number >= 0");
    if (!o.elastic && o.elastic_spares > 0) bad(*v, "spares need --elastic");
  }
  if (const Value* v = get("monitor-interval")) o.monitor_interval = seconds(*v);
  o.term_timeout = seconds(get("term-timeout") != nullptr
                               ? *get("term-timeout")
                               : Value{setting_string("TDIST_TERM_TIMEOUT"), "TDIST_TERM_TIMEOUT"});
  if (const Value* v = get("redirects")) o.redirects = parse_streams(*v);
  if (const Value* v = get("tee")) o.tee = parse_streams(*v);
  if (const Value* v = get("log-dir")) o.log_dir = v->text;
  if (const Value* v = get("local-ranks-filter"); v != nullptr && !v->text.empty()) {
    o.local_ranks_filter = parse_ranks_filter(*v, o.nproc_per_node);
  }
  if (const Value* v = get("role")) {
    if (v->text.empty()) bad(*v, "expected a non-empty role name");
    o.role = v->text;
  }
  if (const Value* v = get("start-method")) {
    if (v->text != "spawn" && v->text != "fork" && v->text != "forkserver") {
      bad(*v, "expected spawn, fork or forkserver");
    }
    o.start_method = v->text;
  }
  if (const Value* v = get("local-addr")) o.local_addr = v->text;
  return o;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` as execvp would find it: a path with '/' as it is, else the first executable
// PATH entry, made absolute. `what` names it in the error ("program", "python interpreter").
std::string resolve_executable(const std::string& name, const std::string& what) {
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    std::error_code ec;
    if (!std::filesystem::exists(name, ec)) usage(what + " '" + name + "' not found");
    usage(what + " '" + name + "' is not an executable file");
  }
  std::string path = env_string("PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  for (std::string_view dir : split(path, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    if (is_executable_file(candidate)) {
      return std::filesystem::absolute(candidate).lexically_normal().string();
    }
  }
  usage(what + " '" + name + "' not found on PATH");
}

}  // namespace

Streams StreamSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? Streams::kNone : it->second;
}

ParseResult parse_args(int argc, const char* const* argv) {
  ParseResult result;
  Scan scanned;
  try {
    scanned = scan(argc, argv);
  } catch (const Stop& stop) {
    result.action = stop.action;
    return result;
  }
  if (scanned.program.empty()) usage("missing PROGRAM (see tdistrun --help)");
  result.options = build(scanned.values);
  result.options.program = scanned.program.front();
  result.options.program_args.assign(scanned.program.begin() + 1, scanned.program.end());
  return result;
}

std::vector<std::string> worker_command(const Options& options) {
  check_python_flags(options);
  if (options.program.empty()) usage("missing PROGRAM (see tdistrun --help)");
  bool script = options.program.ends_with(".py") && !options.no_python;
  std::vector<std::string> argv;
  if (options.module || options.run_path || script) {
    std::string python = env_string("PYTHON");
    argv = {resolve_executable(python.empty() ? "python3" : python, "python interpreter"), "-u"};
    if (options.module) {
      argv.push_back("-m");
    } else if (std::error_code ec; !std::filesystem::is_regular_file(options.program, ec)) {
      usage("program '" + options.program + "' not found");
    }
    argv.push_back(options.program);
  } else {
    argv.push_back(resolve_executable(options.program, "program"));
  }
  argv.insert(argv.end(), options.program_args.begin(), options.program_args.end());
  return argv;
}

}  // namespace tdist::launcher
