// Status: what every rank of a job is doing, asked through the job's store while it runs or
// hangs. `tdist-status` prints it; a rank whose collective waits longer than
// TDIST_WAIT_WARNING asks the same way and logs which ranks it waits for (the collective's
// timeout error names them too).
//
// Every process that called init_process_group runs one responder thread with a store
// connection of its own (a blocked collective, or a call on the group's store connection,
// does not stop it). Keys, in the job's root store (below any launcher prefix's parent):
//   tdist/status/current             "<namespace>\n<world size>", set by rank 0 at init
//   <namespace>/status/requests      counter of requests
//   <namespace>/status/request/<n>   request n (set by whoever asks)
//   <namespace>/status/answer/<n>/<r> global rank r's answer (below)
// An answer is one JSON object (encode_status):
//   {"rank":<global rank>,"host":..,"pid":..,"groups":[{"name":..,"backend":..,"rank":<group
//    rank>,"size":..,"global_ranks":[..],"last_seq":<seq or -1>,"last_op":..,"current_seq":
//    <seq or -1>,"current_state":"queued"|"started"|"-","current_ms":<ms since>,
//    "current_op":..}, ...]}   (one group per live group of the process)
// Thread-safety: all functions may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/store.h"

namespace tdist::diag {

// Starts this process's responder for the job of `group` (init_process_group's group),
// replacing one of an earlier init. Best effort: a failure is logged, never thrown.
void start_status_responder(const std::shared_ptr<ProcessGroup>& group);
void stop_status_responder();

// One rank's answer, parsed.
struct GroupStatus {
  std::string name;
  std::string backend;
  int rank = 0;
  int size = 0;
  std::vector<int> global_ranks;
  long long last_seq = -1;
  std::string last_op;
  long long current_seq = -1;
  std::string current_state;  // "queued", "started" or "-"
  long long current_ms = 0;
  std::string current_op;
};
struct RankStatus {
  int rank = -1;
  std::string host;
  long long pid = 0;
  std::vector<GroupStatus> groups;
};

std::string encode_status(const RankStatus& status);
RankStatus decode_status(const std::string& text);  // fields it cannot read stay default
// This process's answer for global rank `rank` (its live groups of that rank).
RankStatus local_status(int rank);

// Where a job's status keys live: the namespace and world size rank 0 published in `root`
// (the job's store without prefixes). Empty namespace when none is there.
struct StatusEndpoint {
  std::string ns;
  int world_size = 0;
};
StatusEndpoint find_status_endpoint(Store& root);
// Asks every rank and returns the answers by global rank (ranks that did not answer within
// `wait` are absent). With `self_rank`, this process answers for that rank itself first
// (its responder may be the thread that asks).
std::map<int, RankStatus> ask_status(Store& root, const StatusEndpoint& endpoint,
                                     std::chrono::milliseconds wait, int self_rank = -1);

// For the member ranks of `group` (as `waiter` sees it, in collective `seq`): the ones that
// have not called it, each with what it does instead ("rank 1 (computing; last: all_reduce
// #5 f32 x4 sum)", "rank 3 (no answer: dead or stopped?)"); empty when all arrived.
std::vector<std::string> missing_ranks(const GroupStatus& waiter_group,
                                       const std::map<int, RankStatus>& answers, long long seq);

// The status of the job this process belongs to, from this process (for the hang warning
// and timeout errors): the missing ranks of `group`'s collective `seq`, or empty when the
// job cannot be asked (no responder: no init_process_group).
std::vector<std::string> diagnose_wait(const ProcessGroup& group, uint64_t seq);

}  // namespace tdist::diag
