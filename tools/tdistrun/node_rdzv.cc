// NodeRendezvous: the round protocol over the agents' store (the key layout is in the
// header; node_rdzv_store.cc opens the store).
#include "tdistrun/node_rdzv.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <set>
#include <sstream>

#include "net/address.h"
#include "net/fd.h"
#include "net/interface.h"
#include "net/socket.h"
#include "tdist/error.h"
#include "tdist/logging.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"

namespace tdist::launcher {
namespace {

using std::chrono::milliseconds;

constexpr char kRestart[] = "restart";
constexpr char kGiveUp[] = "give_up";
constexpr char kMembership[] = "membership";
constexpr char kDone[] = "done";

std::string local_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name)) != 0) return "localhost";
  return name;
}

int to_int(const Bytes& b) { return static_cast<int>(std::stoll(to_string(b))); }

struct State {
  int round = 0;
  int restarts = 0;
};

State parse_state(const Bytes& value) {
  State s;
  std::istringstream(to_string(value)) >> s.round >> s.restarts;
  return s;
}

std::string state_text(State s) { return detail::str_cat(s.round, ' ', s.restarts); }

bool is_terminal(const std::string& outcome) { return outcome == kDone || outcome == kGiveUp; }

// The state after a round in state `s` ended with a restart or membership change.
std::string next_state(State s, const std::string& outcome) {
  return state_text({s.round + 1, s.restarts + (outcome == kRestart ? 1 : 0)});
}

Outcome to_outcome(const std::string& outcome) {
  if (outcome == kRestart) return Outcome::kRestart;
  if (outcome == kMembership) return Outcome::kMembershipChange;
  if (outcome == kGiveUp) return Outcome::kGiveUp;
  TDIST_CHECK(outcome == kDone, Error, "rendezvous: unknown round outcome '", outcome, "'");
  return Outcome::kDone;
}

struct Record {  // r/<R>/node/<i>
  int local_world_size = 1;
  std::string addr;
  std::string hostname;
  int rank_hint = -1;
  uint16_t port = 0;  // free on that node when it arrived
};

std::string record_text(const Record& r) {
  return detail::str_cat(r.local_world_size, '\n', r.addr, '\n', r.hostname, '\n', r.rank_hint,
                         '\n', r.port);
}

Record parse_record(const Bytes& value) {
  std::istringstream in(to_string(value));
  std::vector<std::string> f;
  for (std::string line; std::getline(in, line);) f.push_back(line);
  TDIST_CHECK(f.size() == 5, Error, "rendezvous: malformed node record '", in.str(), "'");
  return {std::stoi(f[0]), f[1], f[2], std::stoi(f[3]), static_cast<uint16_t>(std::stoi(f[4]))};
}

Bytes encode_records(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) out += detail::str_cat(r.size(), '\n', r);
  return to_bytes(out);
}

void decode_records(const Bytes& value, std::vector<std::string>* out) {
  std::string t = to_string(value);
  for (size_t pos = 0; pos < t.size();) {
    size_t nl = t.find('\n', pos);
    size_t length = std::stoull(t.substr(pos, nl - pos));
    out->push_back(t.substr(nl + 1, length));
    pos = nl + 1 + length;
  }
}

uint16_t free_port() { return net::listen_tcp("", 0).port(); }

double seconds(milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

}  // namespace

std::chrono::milliseconds default_agent_heartbeat_timeout() {
  return setting_seconds("TDIST_AGENT_HEARTBEAT_TIMEOUT");
}

NodeRendezvous::NodeRendezvous(NodeRdzvConfig config) : config_(std::move(config)) {
  const NodeRdzvConfig& c = config_;
  TDIST_CHECK(!c.host.empty(), InvalidArgument, "rendezvous: empty endpoint host");
  TDIST_CHECK(!c.run_id.empty(), InvalidArgument, "rendezvous: empty run id");
  TDIST_CHECK(c.min_nodes >= 1 && c.max_nodes >= c.min_nodes, InvalidArgument,
              "rendezvous: bad node counts ", c.min_nodes, ":", c.max_nodes,
              " (want 1 <= MIN <= MAX)");
  TDIST_CHECK(c.local_world_size >= 1, InvalidArgument, "rendezvous: local world size ",
              c.local_world_size, " is not positive");
  TDIST_CHECK(c.node_rank >= -1 && c.node_rank < c.max_nodes, InvalidArgument,
              "rendezvous: node rank ", c.node_rank, " is not below the ", c.max_nodes,
              " nodes the job may have");
  TDIST_CHECK(c.max_restarts >= 0 && c.heartbeat_timeout.count() > 0, InvalidArgument,
              "rendezvous: max_restarts must be >= 0 and the heartbeat timeout positive");
  hostname_ = c.hostname.empty() ? local_hostname() : c.hostname;
  open_store();
  if (!server_) probe_store();
  node_addr_ = c.node_addr;
  if (node_addr_.empty()) {
    try {
      node_addr_ = net::choose_local_ip({c.host, port_, false}, "");
    } catch (const Error&) {
      node_addr_ = "127.0.0.1";
    }
  }
}

// Whatever listens at the endpoint must answer as a tdist store, and quickly: a foreign
// server would otherwise hold every store call until its timeout.
void NodeRendezvous::probe_store() {
  constexpr std::chrono::milliseconds kProbeTimeout{10000};
  const std::chrono::milliseconds normal = store_->timeout();
  store_->set_timeout(std::min(config_.join_timeout, kProbeTimeout));
  try {
    store_->add(detail::str_cat("tdistrun/", config_.run_id, "/probe"), 0);
  } catch (const Error& e) {
    TDIST_THROW(Error, "the rendezvous endpoint ", config_.host, ":", port_,
                config_.etcd ? " does not answer as etcd (" : " does not answer as a tdist store (",
                e.what(), "); is another program using that port?");
  }
  store_->set_timeout(normal);
}

NodeRendezvous::~NodeRendezvous() {
  if (!server_ || (outcome_ != Outcome::kDone && outcome_ != Outcome::kGiveUp)) return;
  std::vector<std::string> acks;
  for (int i = 1; i <= round_.num_nodes; ++i) acks.push_back(key(detail::str_cat("exit/", i)));
  try {
    store_->wait(acks, Deadline::after(config_.heartbeat_timeout));
  } catch (const Error& e) {
    TDIST_LOG(kWarn) << "rendezvous: not every node learned that the job ended: " << e.what();
  }
}

std::string NodeRendezvous::job_state_key() const {
  return detail::str_cat("tdistrun/", config_.run_id, "/state");
}

std::string NodeRendezvous::round_key(int round, const std::string& name) const {
  return detail::str_cat("tdistrun/", config_.run_id, "/r/", round, "/", name);
}

Round NodeRendezvous::join() {
  const Deadline deadline = Deadline::after(config_.join_timeout);
  const std::string state_key = job_state_key();
  in_round_ = false;
  outcome_.reset();
  while (true) {
    State s = parse_state(store_->compare_set(state_key, {}, to_bytes("0 0")));
    const std::string outcome_key = round_key(s.round, "outcome");
    if (store_->check({outcome_key})) {  // the round ended: move on, unless the job did
      std::string outcome = to_string(store_->get(outcome_key, deadline));
      if (is_terminal(outcome)) throw_finished();
      store_->compare_set(state_key, to_bytes(state_text(s)), to_bytes(next_state(s, outcome)));
      continue;
    }
    int arrival = static_cast<int>(store_->add(round_key(s.round, "arrived"), 1));
    store_->add(round_key(s.round, detail::str_cat("hb/", arrival)), 1);
    Record mine{config_.local_world_size, node_addr_, hostname_, config_.node_rank, free_port()};
    store_->set(round_key(s.round, detail::str_cat("node/", arrival)), record_text(mine));
    int members = close_round(s.round, arrival, deadline);
    if (arrival <= members) return make_round(s.round, s.restarts, arrival, members, deadline);
    wait_for_next_round(s.round, members, deadline);
  }
}

// Returns the round's member count once it closed.
int NodeRendezvous::close_round(int round, int arrival, Deadline deadline) {
  const std::string closed = round_key(round, "closed");
  const std::string quorum = round_key(round, "quorum");
  const int max = config_.max_nodes;
  if (arrival == config_.min_nodes && max > 1) store_->set(quorum, "");
  if (arrival == max) {  // the last seat: close now, unless the last call closed it already
    int members = to_int(store_->compare_set(closed, {}, to_bytes(std::to_string(max))));
    if (members == max && max > 1) store_->set(round_key(round, "full"), "");
    return members;
  }
  try {
    store_->wait({quorum}, deadline);
  } catch (const TimeoutError&) {
    // Void the round (0 members) so that it never closes with this node, whose heartbeat
    // would then never come, and wake whoever still waits in it to start the next round.
    int64_t arrived = store_->add(round_key(round, "arrived"), 0);
    int members = to_int(store_->compare_set(closed, {}, to_bytes("0")));
    if (members > 0) return members;  // it closed after all, just now
    store_->set(quorum, "");
    store_->set(round_key(round, "full"), "");
    TDIST_THROW(TimeoutError, "rendezvous '", config_.run_id, "' at ",
                net::format_host_port(config_.host, port_), ": only ", arrived, " of ",
                config_.min_nodes, " nodes joined within ", seconds(config_.join_timeout),
                " s; check that every node runs tdistrun with the same --rdzv-endpoint and "
                "--rdzv-id");
  }
  try {  // the last call: whoever comes before it ends, or before the seats run out
    store_->wait({round_key(round, "full")}, Deadline::after(config_.last_call_timeout));
    return to_int(store_->get(closed, deadline));
  } catch (const TimeoutError&) {
    int arrived = static_cast<int>(store_->add(round_key(round, "arrived"), 0));
    int members =
        to_int(store_->compare_set(closed, {}, to_bytes(std::to_string(std::min(arrived, max)))));
    store_->set(round_key(round, "full"), "");
    return members;
  }
}

// This node came after `round` closed with `members` nodes: it ends the round when there is
// room for it (or waits for a restart when there is not), then lets the state move on.
void NodeRendezvous::wait_for_next_round(int round, int members, Deadline deadline) {
  const std::string outcome_key = round_key(round, "outcome");
  if (members < config_.max_nodes) store_->compare_set(outcome_key, {}, to_bytes(kMembership));
  try {
    store_->wait({outcome_key}, deadline);
  } catch (const TimeoutError&) {
    TDIST_THROW(TimeoutError, "rendezvous '", config_.run_id, "' at ",
                net::format_host_port(config_.host, port_), ": the job runs with its maximum of ",
                members, " nodes and did not restart within ", seconds(config_.join_timeout),
                " s to let this node in");
  }
  // join()'s loop now finds the outcome and moves on (or stops when the job ended).
}

Round NodeRendezvous::make_round(int round, int restarts, int arrival, int members,
                                 Deadline deadline) {
  std::vector<std::string> keys;
  for (int i = 1; i <= members; ++i) keys.push_back(round_key(round, detail::str_cat("node/", i)));
  std::vector<Record> records;
  for (const Bytes& value : store_->multi_get(keys, deadline)) {
    records.push_back(parse_record(value));
  }
  // Ranks: hints first (they must be distinct and fit), then arrival order for the rest.
  std::vector<int> rank_of(members, -1);
  std::vector<bool> taken(members, false);
  std::map<int, std::vector<int>> claims;  // hint -> who asked for it
  for (int i = 0; i < members; ++i) {
    if (records[i].rank_hint >= 0) claims[records[i].rank_hint].push_back(i);
  }
  std::string bad;
  for (const auto& [hint, who] : claims) {
    if (hint < members && who.size() == 1) {
      taken[hint] = true;
      rank_of[who[0]] = hint;
      continue;
    }
    if (!bad.empty()) bad += "; ";
    for (size_t k = 0; k < who.size(); ++k) {
      const Record& r = records[who[k]];
      bad += detail::str_cat(k == 0 ? "" : " and ", r.hostname, " (", r.addr, ")");
    }
    bad += detail::str_cat(" asked for node rank ", hint);
  }
  TDIST_CHECK(bad.empty(), Error, "rendezvous '", config_.run_id, "': node ranks (--node-rank) ",
              "must be distinct and below the ", members, " nodes that joined; ", bad);
  for (int i = 0, next = 0; i < members; ++i) {
    if (rank_of[i] >= 0) continue;
    while (taken[next]) ++next;
    taken[next] = true;
    rank_of[i] = next;
  }

  Round r;
  r.round = round;
  r.restart_count = restarts;
  r.num_nodes = members;
  r.nodes.resize(members);
  for (int i = 0; i < members; ++i) {
    r.nodes[rank_of[i]] = {rank_of[i], records[i].local_world_size, records[i].addr,
                           records[i].hostname};
  }
  r.node_rank = rank_of[arrival - 1];
  r.world_size = 0;
  for (const NodeInfo& n : r.nodes) {
    if (n.node_rank < r.node_rank) r.rank_offset += n.local_world_size;
    r.world_size += n.local_world_size;
  }
  r.master_addr = r.nodes[0].addr;
  for (int i = 0; i < members; ++i) {
    if (rank_of[i] == 0) r.master_port = records[i].port;
  }
  r.worker_prefix = key_prefix_ + round_key(round, "w/");

  const auto now = std::chrono::steady_clock::now();
  peers_.clear();
  for (int i = 1; i <= members; ++i) {
    if (i != arrival) peers_.push_back({i, rank_of[i - 1], 0, now});
  }
  round_ = r;
  arrival_ = arrival;
  in_round_ = true;
  return r;
}

std::optional<Outcome> NodeRendezvous::check() {
  if (outcome_) return outcome_;
  TDIST_CHECK(in_round_, Error, "rendezvous: check() before join()");
  store_->add(key(detail::str_cat("hb/", arrival_)), 1);
  if (store_->check({key("outcome")})) return learn(to_string(store_->get(key("outcome"))));
  return peer_lost();
}

Outcome NodeRendezvous::report_failure(const std::vector<std::string>& records) {
  if (outcome_) return *outcome_;
  TDIST_CHECK(in_round_, Error, "rendezvous: report_failure() before join()");
  if (!records.empty()) store_->append(key("failures"), encode_records(records));
  return decide(after_failure());
}

std::vector<std::string> NodeRendezvous::failure_records() const {
  std::vector<std::string> out;
  for (int r = 0; r <= round_.round; ++r) {
    std::string failures = round_key(r, "failures");
    if (store_->check({failures})) decode_records(store_->get(failures), &out);
  }
  return out;
}

Outcome NodeRendezvous::finish() {
  if (outcome_) return *outcome_;
  TDIST_CHECK(in_round_, Error, "rendezvous: finish() before join()");
  if (store_->add(key("done"), 1) == round_.num_nodes) return decide(kDone);
  const auto tick =
      std::clamp<milliseconds>(config_.heartbeat_timeout / 5, milliseconds(10), milliseconds(1000));
  while (true) {
    try {
      store_->wait({key("outcome")}, Deadline::after(tick));
      return learn(to_string(store_->get(key("outcome"))));
    } catch (const TimeoutError&) {
    }
    store_->add(key(detail::str_cat("hb/", arrival_)), 1);
    if (std::optional<Outcome> lost = peer_lost()) return *lost;
    if (config_.elastic && store_->add(key("done"), 0) + dead_nodes() >= round_.num_nodes) {
      return decide(kDone);  // every node finished or was lost
    }
  }
}

std::shared_ptr<Store> NodeRendezvous::workers_view(const Round& round) const {
  return std::make_shared<PrefixStore>(round_key(round.round, "w/"), store_);
}

std::vector<int> NodeRendezvous::take_lost_nodes() {
  std::vector<int> out;
  out.swap(lost_nodes_);
  return out;
}

int NodeRendezvous::dead_nodes() const {
  int dead = 0;
  for (int i = 1; i <= round_.num_nodes; ++i) {  // arrivals count from 1
    if (store_->check({key(detail::str_cat("dead/", i))})) ++dead;
  }
  return dead;
}

void NodeRendezvous::leave() {
  if (in_round_) node_failed(arrival_, round_.node_rank, "left the job");
}

// Publishes node `arrival`'s failure once however many agents notice it, acknowledges the
// end of the job for it (it will not), and decides the round's outcome by the budget.
Outcome NodeRendezvous::node_failed(int arrival, int node_rank, const std::string& what) {
  record_dead(arrival, node_rank, what);
  return decide(after_failure());
}

void NodeRendezvous::record_dead(int arrival, int node_rank, const std::string& what) {
  std::string who = std::to_string(arrival);
  std::string me = std::to_string(arrival_);
  if (to_string(store_->compare_set(key("dead/" + who), {}, to_bytes(me))) == me) {
    const NodeInfo& n = round_.nodes[node_rank];
    store_->append(key("failures"),
                   encode_records({detail::str_cat("node ", n.node_rank, " (", n.hostname, ", ",
                                                   n.addr, ") ", what)}));
    store_->set(key("exit/" + who), "");
  }
}

const char* NodeRendezvous::after_failure() const {
  return round_.restart_count < config_.max_restarts ? kRestart : kGiveUp;
}

// Decides the round's outcome unless another node did first; either way returns the one
// every node learns.
Outcome NodeRendezvous::decide(const std::string& outcome) {
  return learn(to_string(store_->compare_set(key("outcome"), {}, to_bytes(outcome))));
}

// Takes the round's outcome in: a round that ends with a restart or membership change moves
// the job's state on (every node tries; the first compare_set does it); a final one is
// acknowledged, which the host waits for before it stops serving.
Outcome NodeRendezvous::learn(const std::string& outcome) {
  outcome_ = to_outcome(outcome);
  in_round_ = false;
  if (is_terminal(outcome)) {
    store_->set(key(detail::str_cat("exit/", arrival_)), "");
  } else {
    State now{round_.round, round_.restart_count};
    store_->compare_set(job_state_key(), to_bytes(state_text(now)),
                        to_bytes(next_state(now, outcome)));
  }
  return *outcome_;
}

// Looks at the other nodes' heartbeats; the first node to see one stalled reports that node
// as failed (once: r/<R>/dead/<i>) and decides the round's outcome.
std::optional<Outcome> NodeRendezvous::peer_lost() {
  if (peers_.empty()) return std::nullopt;
  std::vector<std::string> keys;
  for (const Peer& p : peers_) keys.push_back(key(detail::str_cat("hb/", p.arrival)));
  std::vector<Bytes> beats = store_->multi_get(keys, Deadline::after(config_.heartbeat_timeout));
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    int64_t beat = std::stoll(to_string(beats[i]));
    if (beat != p.heartbeat) {
      p.heartbeat = beat;
      p.moved = now;
      continue;
    }
    if (now - p.moved < config_.heartbeat_timeout) continue;
    if (store_->check({key("outcome")})) return learn(to_string(store_->get(key("outcome"))));
    const std::string what = detail::str_cat("stopped responding: its agent sent no heartbeat for ",
                                             seconds(config_.heartbeat_timeout), " s");
    if (config_.elastic) {  // the job goes on without it: record it once, tell the agent
      record_dead(p.arrival, p.node_rank, what);
      lost_nodes_.push_back(p.node_rank);
      peers_.erase(peers_.begin() + static_cast<std::ptrdiff_t>(i));
      return std::nullopt;
    }
    return node_failed(p.arrival, p.node_rank, what);
  }
  return std::nullopt;
}

void NodeRendezvous::throw_finished() const {
  TDIST_THROW(Error, "job '", config_.run_id, "' already finished");
}

}  // namespace tdist::launcher
