// Status (status.h): the responder thread, the answers, asking a job, and who is missing.
#include "diag/status.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <deque>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "diag/flight_recorder.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"
#include "tdist/tcp_store.h"
#include "tdist/thread_annotations.h"

namespace tdist::diag {
namespace {

using nlohmann::ordered_json;

constexpr char kCurrentKey[] = "tdist/status/current";
// How long the responder waits for a request before it looks at its groups again.
constexpr auto kResponderSlice = std::chrono::milliseconds(1000);

// Every field, empty ones included.
std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(sep, begin);
    out.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

long long to_ll(const std::string& s, long long fallback) {
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    return fallback;
  }
}

// `out` = the field `key` of `object` when it is there with the right type; else unchanged.
void read_field(const ordered_json& object, const char* key, std::string& out) {
  auto it = object.find(key);
  if (it != object.end() && it->is_string()) out = it->get<std::string>();
}

template <typename Int>
void read_field(const ordered_json& object, const char* key, Int& out) {
  auto it = object.find(key);
  if (it != object.end() && it->is_number_integer()) out = static_cast<Int>(it->get<long long>());
}

std::string text_of(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

// The store below every PrefixStore of `store`, and the prefix they add together.
std::shared_ptr<Store> unwrap(std::shared_ptr<Store> store, std::string* ns) {
  std::vector<std::string> prefixes;
  while (auto* prefixed = dynamic_cast<PrefixStore*>(store.get())) {
    prefixes.push_back(prefixed->prefix());
    store = prefixed->base();
  }
  ns->clear();
  for (auto it = prefixes.rbegin(); it != prefixes.rend(); ++it) {
    if (!ns->empty()) *ns += "/";
    *ns += *it;
  }
  return store;
}

// A connection of its own to the same store (TCPStore), else the store itself (its calls
// do not hold each other up).
std::shared_ptr<Store> own_connection(const std::shared_ptr<Store>& root) {
  if (auto* tcp = dynamic_cast<TCPStore*>(root.get())) {
    TCPStoreOptions options;
    options.port = tcp->port();
    options.connect_timeout = std::chrono::seconds(10);
    return std::make_shared<TCPStore>(tcp->host(), options);
  }
  return root;
}

std::string key(const StatusEndpoint& e, const std::string& rest) {
  return e.ns + "/status/" + rest;
}

std::string answer_key(const StatusEndpoint& e, int64_t request, int rank) {
  return key(e, "answer/" + std::to_string(request) + "/" + std::to_string(rank));
}

std::string describe_rank(const GroupStatus& group, int group_rank) {
  std::string text = "rank " + std::to_string(group_rank);
  const int global = group_rank < static_cast<int>(group.global_ranks.size())
                         ? group.global_ranks[static_cast<size_t>(group_rank)]
                         : group_rank;
  if (global != group_rank) text += " (global rank " + std::to_string(global) + ")";
  return text;
}

std::string activity(const GroupStatus& g) {
  if (g.current_state == "started") {
    return "in " + g.current_op + " for " + std::to_string(g.current_ms / 1000) + " s";
  }
  if (g.current_state == "queued") return "about to run " + g.current_op;
  return "computing";
}

// A collective that has waited longer than TDIST_WAIT_WARNING, to be logged with the ranks
// that have not arrived.
struct Warning {
  std::shared_ptr<ProcessGroup> group;
  FlightRecorder::Summary summary;
  int64_t waited_ns = 0;
};

struct Responder {
  std::atomic<bool> stop{false};
  std::atomic<bool> kept{false};  // on the list of those kept at exit (done())
  std::shared_ptr<Store> root;    // a connection of its own
  StatusEndpoint endpoint;
  int rank = 0;
  std::chrono::milliseconds warn_after{0};
  std::set<std::pair<std::string, uint64_t>> warned;  // responder thread only
  // The warnings are asked of the other ranks on the responder's second thread (started by
  // the first warning, ended with the responder), so that it keeps answering meanwhile.
  std::thread warner;  // responder thread only
  Mutex warn_mu;
  CondVar warn_cv;
  std::deque<Warning> warnings TDIST_GUARDED_BY(warn_mu);
  bool serving TDIST_GUARDED_BY(warn_mu) = true;
};

struct ResponderSlot {
  Mutex mu;
  std::shared_ptr<Responder> current TDIST_GUARDED_BY(mu);
};

ResponderSlot& slot() {
  static ResponderSlot* s = new ResponderSlot();  // never destroyed: its thread may outlive statics
  return *s;
}

std::shared_ptr<Responder> current_responder() {
  ResponderSlot& s = slot();
  MutexLock lock(s.mu);
  return s.current;
}

void answer(Responder& r, int64_t request) {
  r.root->set(answer_key(r.endpoint, request, r.rank),
              bytes_of(encode_status(local_status(r.rank))));
}

void warn(const Warning& w) {
  const std::vector<std::string> missing = diagnose_wait(*w.group, w.summary.current_seq);
  std::string text;
  for (const auto& m : missing) text += (text.empty() ? "" : "; ") + m;
  TDIST_LOG(kWarn) << "rank " << w.group->rank() << " of group " << w.group->name() << ": "
                   << w.summary.current.describe(w.summary.current_seq) << " has waited "
                   << w.waited_ns / 1'000'000'000 << " s; "
                   << (missing.empty() ? "every rank has called it (a slow peer or link?)"
                                       : "not arrived: " + text);
}

// The responder's second thread: the warnings in turn, until the responder ends.
void warn_loop(Responder& r) {
  while (true) {
    Warning w;
    {
      MutexLock lock(r.warn_mu);
      while (r.warnings.empty() && r.serving) r.warn_cv.wait(r.warn_mu);
      if (!r.serving) return;
      w = std::move(r.warnings.front());
      r.warnings.pop_front();
    }
    warn(w);
  }
}

// Logs, once per operation, the ranks that have not arrived at a collective that has waited
// longer than TDIST_WAIT_WARNING.
void watch_waits(const std::shared_ptr<Responder>& shared) {
  Responder& r = *shared;
  if (r.warn_after.count() == 0) return;
  for (const auto& group : live_groups()) {
    if (group->global_rank(group->rank()) != r.rank) continue;
    const FlightRecorder::Summary s = group->flight_recorder().summary();
    if (!s.has_current || !s.current_started) continue;
    const int64_t waited_ns = steady_ns() - s.current_since_ns;
    if (waited_ns < std::chrono::nanoseconds(r.warn_after).count()) continue;
    if (!r.warned.insert({group->name(), s.current_seq}).second) continue;
    {
      MutexLock lock(r.warn_mu);
      r.warnings.push_back(Warning{group, s, waited_ns});
    }
    r.warn_cv.notify_all();
    if (!r.warner.joinable()) r.warner = std::thread([shared] { warn_loop(*shared); });
  }
}

// Set at exit: a responder that wakes up then touches nothing (the process is tearing
// down its statics) and keeps its objects for good, on a list that a global points to (so
// that a leak checker sees them reachable).
std::atomic<bool> g_exiting{false};
struct Kept {
  std::shared_ptr<Responder> responder;
  Kept* next;
};
std::atomic<Kept*> g_kept{nullptr};

bool done(const std::shared_ptr<Responder>& r) {
  if (!g_exiting.load()) return r->stop.load();
  if (!r->kept.exchange(true)) {
    Kept* k = new Kept{r, g_kept.load()};  // never destroyed
    while (!g_kept.compare_exchange_weak(k->next, k)) {
    }
  }
  return true;
}

void serve(const std::shared_ptr<Responder>& r) {
  try {
    int64_t seen = r->root->add(key(r->endpoint, "requests"), 0);
    while (!done(r)) {
      try {
        r->root->wait({key(r->endpoint, "request/" + std::to_string(seen + 1))},
                      Deadline::after(kResponderSlice));
        ++seen;
        if (!done(r)) answer(*r, seen);
      } catch (const TimeoutError&) {
      }
      if (!done(r)) watch_waits(r);
    }
  } catch (const std::exception& e) {
    if (!done(r)) TDIST_LOG(kDebug) << "status responder stopped: " << e.what();
  }
  {
    MutexLock lock(r->warn_mu);
    r->serving = false;
  }
  r->warn_cv.notify_all();
  if (!r->warner.joinable()) return;
  if (g_exiting.load()) {
    r->warner.detach();  // the process is ending: its objects are kept for good (done())
  } else {
    r->warner.join();
  }
}

}  // namespace

std::string encode_status(const RankStatus& status) {
  ordered_json groups = ordered_json::array();
  for (const GroupStatus& g : status.groups) {
    groups.push_back({{"name", g.name},
                      {"backend", g.backend},
                      {"rank", g.rank},
                      {"size", g.size},
                      {"global_ranks", g.global_ranks},
                      {"last_seq", g.last_seq},
                      {"last_op", g.last_op},
                      {"current_seq", g.current_seq},
                      {"current_state", g.current_state},
                      {"current_ms", g.current_ms},
                      {"current_op", g.current_op}});
  }
  const ordered_json out = {{"rank", status.rank},
                            {"host", status.host},
                            {"pid", status.pid},
                            {"groups", std::move(groups)}};
  return out.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

RankStatus decode_status(const std::string& text) {
  RankStatus status;
  const ordered_json in = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) return status;
  read_field(in, "rank", status.rank);
  read_field(in, "host", status.host);
  read_field(in, "pid", status.pid);
  auto groups = in.find("groups");
  if (groups == in.end() || !groups->is_array()) return status;
  for (const ordered_json& j : *groups) {
    if (!j.is_object()) continue;
    GroupStatus g;
    read_field(j, "name", g.name);
    read_field(j, "backend", g.backend);
    read_field(j, "rank", g.rank);
    read_field(j, "size", g.size);
    auto ranks = j.find("global_ranks");
    if (ranks != j.end() && ranks->is_array()) {
      for (const ordered_json& r : *ranks) {
        g.global_ranks.push_back(r.is_number_integer() ? static_cast<int>(r.get<long long>()) : -1);
      }
    }
    read_field(j, "last_seq", g.last_seq);
    read_field(j, "last_op", g.last_op);
    read_field(j, "current_seq", g.current_seq);
    read_field(j, "current_state", g.current_state);
    read_field(j, "current_ms", g.current_ms);
    read_field(j, "current_op", g.current_op);
    status.groups.push_back(std::move(g));
  }
  return status;
}

RankStatus local_status(int rank) {
  RankStatus status;
  status.rank = rank;
  char host[256] = {};
  (void)::gethostname(host, sizeof(host) - 1);
  status.host = host;
  status.pid = ::getpid();
  const int64_t now = steady_ns();
  for (const auto& group : live_groups()) {
    if (group->global_rank(group->rank()) != rank) continue;
    const FlightRecorder::Summary s = group->flight_recorder().summary();
    GroupStatus g;
    g.name = group->name();
    g.backend = group->backend_name();
    g.rank = group->rank();
    g.size = group->size();
    g.global_ranks = group->global_ranks();
    if (s.has_last) {
      g.last_seq = static_cast<long long>(s.last_seq);
      g.last_op = s.last.describe(s.last_seq);
    }
    g.current_state = "-";
    if (s.has_current) {
      g.current_seq = static_cast<long long>(s.current_seq);
      g.current_op = s.current.describe(s.current_seq);
      g.current_state = s.current_started ? "started" : "queued";
      g.current_ms = (now - s.current_since_ns) / 1'000'000;
    }
    status.groups.push_back(std::move(g));
  }
  return status;
}

StatusEndpoint find_status_endpoint(Store& root) {
  if (!root.check({kCurrentKey})) return {};
  const std::vector<std::string> parts = split(text_of(root.get(kCurrentKey)), '\n');
  if (parts.size() < 2) return {};
  return {parts[0], static_cast<int>(to_ll(parts[1], 0))};
}

std::map<int, RankStatus> ask_status(Store& root, const StatusEndpoint& endpoint,
                                     std::chrono::milliseconds wait, int self_rank) {
  std::map<int, RankStatus> answers;
  if (endpoint.ns.empty() || endpoint.world_size <= 0) return answers;
  const Deadline deadline = Deadline::after(wait);
  const int64_t request = root.add(key(endpoint, "requests"), 1);
  const std::string request_key = key(endpoint, "request/" + std::to_string(request));
  root.set(request_key, Bytes());
  // The asking rank answers for itself: its responder may be the thread that asks.
  if (self_rank >= 0) {
    root.set(answer_key(endpoint, request, self_rank),
             bytes_of(encode_status(local_status(self_rank))));
  }
  std::vector<std::string> keys;
  for (int r = 0; r < endpoint.world_size; ++r) keys.push_back(answer_key(endpoint, request, r));
  try {
    root.wait(keys, deadline);
  } catch (const TimeoutError&) {  // some ranks did not answer: they stay absent
  }
  for (int r = 0; r < endpoint.world_size; ++r) {
    const std::string& k = keys[static_cast<size_t>(r)];
    if (!root.check({k})) continue;
    answers[r] = decode_status(text_of(root.get(k)));
    root.delete_key(k);
  }
  root.delete_key(request_key);
  return answers;
}

std::vector<std::string> missing_ranks(const GroupStatus& waiter_group,
                                       const std::map<int, RankStatus>& answers, long long seq) {
  std::vector<std::string> missing;
  for (int r = 0; r < waiter_group.size; ++r) {
    if (r == waiter_group.rank) continue;
    const int global = r < static_cast<int>(waiter_group.global_ranks.size())
                           ? waiter_group.global_ranks[static_cast<size_t>(r)]
                           : r;
    const std::string who = describe_rank(waiter_group, r);
    auto it = answers.find(global);
    if (it == answers.end()) {
      missing.push_back(who + " (no answer: dead, or its process is stopped)");
      continue;
    }
    const GroupStatus* g = nullptr;
    for (const GroupStatus& candidate : it->second.groups) {
      if (candidate.name == waiter_group.name) g = &candidate;
    }
    if (g == nullptr) {
      missing.push_back(who + " (has no group " + waiter_group.name + ")");
      continue;
    }
    if (g->last_seq >= seq || g->current_seq == seq) continue;  // arrived
    std::string what = who + " (" + activity(*g);
    what += "; last: " + (g->last_op.empty() ? std::string("none") : g->last_op) + ")";
    missing.push_back(what);
  }
  return missing;
}

std::vector<std::string> diagnose_wait(const ProcessGroup& group, uint64_t seq) {
  std::shared_ptr<Responder> r = current_responder();
  if (!r) return {};
  try {
    std::shared_ptr<Store> conn = own_connection(r->root);
    std::map<int, RankStatus> answers =
        ask_status(*conn, r->endpoint, std::chrono::milliseconds(2000), r->rank);
    GroupStatus mine;
    for (const GroupStatus& g : answers[r->rank].groups) {
      if (g.name == group.name()) mine = g;
    }
    if (mine.name.empty()) return {};
    return missing_ranks(mine, answers, static_cast<long long>(seq));
  } catch (const std::exception& e) {
    TDIST_LOG(kDebug) << "asking the job's status failed: " << e.what();
    return {};
  }
}

void start_status_responder(const std::shared_ptr<ProcessGroup>& group) {
  stop_status_responder();
  try {
    auto r = std::make_shared<Responder>();
    std::shared_ptr<Store> root = unwrap(group->store(), &r->endpoint.ns);
    r->endpoint.world_size = group->size();
    r->rank = group->global_rank(group->rank());
    r->warn_after = setting_seconds("TDIST_WAIT_WARNING");
    if (group->rank() == 0) {
      root->set(kCurrentKey, bytes_of(r->endpoint.ns + "\n" + std::to_string(group->size())));
    }
    r->root = own_connection(root);
    {
      ResponderSlot& s = slot();
      MutexLock lock(s.mu);
      s.current = r;
    }
    static const bool at_exit = [] { return std::atexit([] { g_exiting.store(true); }) == 0; }();
    (void)at_exit;
    std::thread([r] { serve(r); }).detach();
  } catch (const std::exception& e) {
    TDIST_LOG(kWarn) << "tdist-status will not reach this rank: " << e.what();
  }
}

void stop_status_responder() {
  ResponderSlot& s = slot();
  MutexLock lock(s.mu);
  if (s.current) s.current->stop.store(true);
  s.current.reset();
}

}  // namespace tdist::diag
