// NodeRendezvous: how the tdistrun agents of a job (one per node) meet, agree on ranks, watch
// each other, restart together and leave together, through one store.
//
// c10d: the store is a TCPStore hosted by the agent whose address the rendezvous endpoint is
// (or, standalone, by the only agent, on a free port); every agent, the host included, is a
// client of it, and losing the host's node ends the job (PeerError saying the store was
// lost). etcd (NodeRdzvConfig::etcd): the store is the etcd at the endpoint (EtcdStore, keys
// under "/tdist/<run_id>/"), which no agent hosts and which outlives every node.
// An attempt is a Round: agents join (join()), the round closes, workers run while the agents
// call check() every monitor interval, and the round ends with one Outcome that every agent
// learns: kRestart or kGiveUp after a failure (report_failure(), or a heartbeat that stopped),
// kMembershipChange when nodes wait to get in, kDone when every node finished (finish()).
//
// Joining: the round waits up to join_timeout for min_nodes; once that many arrived it waits
// last_call_timeout more for others, and closes at once when max_nodes arrived. Node ranks
// follow the --node-rank hints when given (distinct, < num_nodes), else arrival order. A node
// arriving after the round closed ends the round when there is room (num_nodes < max_nodes),
// so everybody meets again one round later; otherwise it waits for the next restart.
// Restarts are the job's: all nodes together restart at most max_restarts times; membership
// changes cost nothing.
//
// Keys, all under "tdistrun/<run_id>/":
//   state                 "<round> <restarts used>": the round to join and the job's restart
//                         count, moved on by one compare_set when a round ends, so the round
//                         number and the budget always change together, exactly once
//   r/<R>/arrived         arrival counter (add); arrival i writes:
//   r/<R>/node/<i>        its record (local world size, address, hostname, rank hint, port)
//   r/<R>/hb/<i>          its heartbeat counter (add), bumped by every check()
//   r/<R>/quorum          set by arrival min_nodes: the last call starts
//   r/<R>/closed          member count N (compare_set, first closer wins); arrivals > N are
//                         late. 0: voided by a node whose join() timed out, so that it is
//                         never a member that will not heartbeat; the others move on
//   r/<R>/full            set when the round closed, wakes agents waiting out the last call
//   r/<R>/outcome         restart | give_up | membership | done (compare_set, first wins);
//                         the job has finished when the current round's outcome is done or
//                         give_up (the state never moves past such a round)
//   r/<R>/failures        failure records (append; each "<length>\n<bytes>")
//   r/<R>/dead/<i>        set by the one agent that reports node i's lost heartbeat
//   r/<R>/done            count of nodes whose workers all succeeded (the exit barrier)
//   r/<R>/exit/<i>        node i learned the final outcome (or was declared dead)
//   r/<R>/w/              prefix of the round's workers' keys (Round::worker_prefix, which
//                         with etcd starts with the store's own "/tdist/<run_id>/")
//
// Threading: one object per agent, used by one thread. Blocking: join() is bounded by
// join_timeout (plus one last call when MIN nodes came only just in time); check() and
// report_failure() take a few store round trips; finish() waits while the other nodes' workers run,
// for as long as their agents keep heartbeating (a fixed bound would strand nodes that legitimately
// run longer: the host must keep serving them). The host's destructor keeps the store up until
// every node of the final round has learned the final outcome, at most heartbeat_timeout. Failures:
// TimeoutError when join() times out, Error for bad rank hints, a finished job or a taken port,
// PeerError when the store is lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdist/store.h"
#include "tdist/tcp_store.h"

namespace tdist::launcher {

// TDIST_AGENT_HEARTBEAT_TIMEOUT (default 10 s), read now.
std::chrono::milliseconds default_agent_heartbeat_timeout();

struct NodeRdzvConfig {
  std::string host;   // endpoint host: "127.0.0.1", "10.1.0.1", "::1" (no brackets), a name
  uint16_t port = 0;  // 0 only when hosting: a free port is chosen
  // Unset: host iff `host` is one of this machine's addresses and the bind succeeds; a port
  // in use means another agent here hosts, and this one connects. true: host or throw Error
  // "port P on H is in use". false: only connect.
  std::optional<bool> is_host;
  std::string run_id = "none";
  // --rdzv-backend etcd-v2: meet on the etcd whose client URL is host:port; nobody hosts.
  bool etcd = false;
  int min_nodes = 1, max_nodes = 1;
  int node_rank = -1;  // --node-rank hint; -1 = by arrival order
  int local_world_size = 1;
  // This node's address for other nodes and workers; "" = the local end of the route to
  // `host`. hostname "" = gethostname().
  std::string node_addr;
  std::string hostname;
  int max_restarts = 0;
  std::chrono::milliseconds join_timeout{900'000};
  std::chrono::milliseconds last_call_timeout{30'000};
  // A peer whose heartbeat counter has not moved for this long is dead.
  std::chrono::milliseconds heartbeat_timeout = default_agent_heartbeat_timeout();
  // tdistrun --elastic: a node whose heartbeat stopped does not end the round; it is
  // recorded (failures, dead/<i>) and take_lost_nodes() hands it to the agent, and the exit
  // barrier counts it as finished.
  bool elastic = false;
};

struct NodeInfo {
  int node_rank = 0;
  int local_world_size = 1;
  std::string addr;
  std::string hostname;
};

// One agreed attempt.
struct Round {
  int round = 0;          // 0, 1, 2, ... over the job (restarts and membership changes)
  int restart_count = 0;  // restarts consumed so far (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0, num_nodes = 1;
  int rank_offset = 0;  // sum of local_world_size over the nodes of lower rank
  int world_size = 1;
  std::vector<NodeInfo> nodes;  // by node rank
  // Node 0's address and a port that was free there, for workers that host their own store.
  std::string master_addr;
  uint16_t master_port = 0;
  std::string worker_prefix;  // "tdistrun/<run_id>/r/<round>/w/" (etcd: after its prefix)
};

enum class Outcome { kRestart, kMembershipChange, kGiveUp, kDone };

class NodeRendezvous {
 public:
  // Hosts the store (see NodeRdzvConfig::is_host) and connects to it, retrying the
  // connection for up to join_timeout. Throws InvalidArgument for a bad config.
  explicit NodeRendezvous(NodeRdzvConfig config);
  ~NodeRendezvous();
  NodeRendezvous(const NodeRendezvous&) = delete;
  NodeRendezvous& operator=(const NodeRendezvous&) = delete;

  bool is_host() const { return server_ != nullptr; }
  // Where workers reach the store (the real port when it was 0).
  const std::string& store_host() const { return config_.host; }
  uint16_t store_port() const { return port_; }
  std::shared_ptr<Store> store() const { return store_; }
  // TDIST_AGENT_STORE for the workers: "host:port" ([v6]:port), or "etcd://host:port".
  std::string worker_store() const;
  // The keys the round's workers see (under Round::worker_prefix), through this agent's
  // store (whose own prefix etcd's worker_prefix already includes).
  std::shared_ptr<Store> workers_view(const Round& round) const;
  const std::string& node_addr() const { return node_addr_; }

  // Joins the next round and returns once it closed with this node in it. TimeoutError
  // ("rendezvous 'id' at host:port: only K of MIN nodes joined within T s; ...") when
  // min_nodes do not come, or ("... the job runs with its maximum of N nodes and did not
  // restart within T s ...") for a node that found no seat; Error "job 'id' already
  // finished" after kDone or kGiveUp.
  Round join();

  // Monitor tick while workers run: bumps this node's heartbeat; nullopt while all is well,
  // else why the round ends (a peer's failure, a peer whose heartbeat stopped -- this node
  // then reports it, as the record "node R (host, addr) stopped responding: ...", and
  // decides --, or nodes waiting to get in).
  std::optional<Outcome> check();

  // This node's workers failed: appends `records` (one per failed worker) to the round's
  // failures and returns the round's outcome, decided once for the whole job: kRestart while
  // restarts remain (consuming one), else kGiveUp. When the round already ended (another
  // node's failure first, a membership change), the records are still published and that
  // outcome is returned; when this node already learned it (check()), nothing is published.
  Outcome report_failure(const std::vector<std::string>& records);

  // Every failure record published in rounds 0..current, oldest round first.
  std::vector<std::string> failure_records() const;

  // This node's workers all succeeded: the exit barrier. Returns kDone once every node of
  // the round finished, or the outcome of a failure elsewhere. Heartbeats while waiting.
  Outcome finish();

  // --elastic: the node ranks of the peers found lost since the last call (check()/finish()
  // found them; each once).
  std::vector<int> take_lost_nodes();

  // Leaves on a signal: publishes the record "node R (host, addr) left the job" and decides
  // the round's outcome by the budget, as for a failure, so the others need not wait
  // heartbeat_timeout to notice. No-op outside a live round.
  void leave();

 private:
  struct Peer {
    int arrival;
    int node_rank;
    int64_t heartbeat = 0;
    std::chrono::steady_clock::time_point moved;
  };

  void open_store();  // node_rdzv_store.cc
  void host_store();
  std::string job_state_key() const;
  void probe_store();
  std::string round_key(int round, const std::string& name) const;
  std::string key(const std::string& name) const { return round_key(round_.round, name); }
  int close_round(int round, int arrival, Deadline deadline);
  void wait_for_next_round(int round, int members, Deadline deadline);
  Round make_round(int round, int restarts, int arrival, int members, Deadline deadline);
  Outcome decide(const std::string& outcome);
  Outcome learn(const std::string& outcome);
  std::optional<Outcome> peer_lost();
  Outcome node_failed(int arrival, int node_rank, const std::string& what);
  void record_dead(int arrival, int node_rank, const std::string& what);
  int dead_nodes() const;  // of the round (dead/<i> set)
  const char* after_failure() const;
  [[noreturn]] void throw_finished() const;

  NodeRdzvConfig config_;
  std::unique_ptr<TCPStoreServer> server_;
  uint16_t port_ = 0;
  std::shared_ptr<Store> store_;
  std::string key_prefix_;  // the store's own prefix of every key ("" unless etcd)
  std::string node_addr_;
  std::string hostname_;

  bool in_round_ = false;  // join() returned and the round's outcome is not known yet
  Round round_;
  int arrival_ = 0;  // this node's arrival index in round_
  std::vector<Peer> peers_;
  std::optional<Outcome> outcome_;  // of round_, once learned
  std::vector<int> lost_nodes_;     // --elastic: lost peers not yet taken
};

}  // namespace tdist::launcher
