// Rendezvous: turning an init method and the environment into (store, rank, world size),
// as torch.distributed.rendezvous does. Every rank of a job calls rendezvous() once per
// process group it creates; the call returns once all world_size ranks have joined and
// agreed (distinct ranks 0..world_size-1, one world size).
//
// Init methods:
//   env://                MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE. When RANK is unset
//                         the rank comes from OMPI_COMM_WORLD_RANK, then PMI_RANK, then
//                         SLURM_PROCID; WORLD_SIZE likewise from OMPI_COMM_WORLD_SIZE,
//                         PMI_SIZE, SLURM_NTASKS (each variable independently; the first
//                         one set wins). "env://?rank=R&world_size=W" is accepted too.
//   tcp://host:port?rank=R&world_size=W   (IPv6: tcp://[::1]:port?...)
//   file:///path?rank=R&world_size=W      a FileStore at /path, removed when all are done
// Explicit rank / world_size arguments win over the environment; an argument that
// contradicts the URL's query is an InvalidArgument (torch asserts there too).
//
// Store hosting (env:// and tcp://): rank 0 starts a TCPStoreServer on the port
// (0.0.0.0, or :: when the host is an IPv6 literal) and every rank, rank 0 included,
// connects to host:port as a client. When TDIST_USE_AGENT_STORE=1 (or torch's
// TORCHELASTIC_USE_AGENT_STORE=True) the launcher hosts the server and rank 0 is just a
// client; keys then live under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>/", as in
// torch, so a restarted job never sees its previous attempt's keys.
//
// Under mpirun (env:// only) with neither MASTER_ADDR nor MASTER_PORT set, in a build
// with the mpi backend: MPI rank 0 hosts the store on a free port and MPI broadcasts its
// address (127.0.0.1 when every rank shares one host, else rank 0's host name).
//
// Under tdistrun (env:// only): tdistrun hosts one TCPStore for the whole job and sets
// TDIST_AGENT_STORE=host:port ([v6]:port) and TDIST_AGENT_STORE_PREFIX=<this round's key
// prefix>. When TDIST_AGENT_STORE is set, env:// connects there instead of
// MASTER_ADDR:MASTER_PORT (which tdistrun points at a store on rank 0, for Python torch
// workers, with TORCHELASTIC_USE_AGENT_STORE=False), rank 0 hosts nothing, and keys live
// under TDIST_AGENT_STORE_PREFIX (else "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>").
// A malformed TDIST_AGENT_STORE is an InvalidArgument naming it. tcp:// and file://
// ignore both variables.
//
// Key layout in the base store (after the agent prefix, if any):
//   tdist/rdzv/joining                 arrivals over all rounds; round = (n-1)/world_size
//   tdist/rdzv/<round>/rank/<r>        claims of rank r (a second claim is an error)
//   tdist/rdzv/<round>/world_size      the world size the first arrival registered
//   tdist/rdzv/<round>/joined          arrivals in the round; the last one checks it
//   tdist/rdzv/<round>/done            "ok", or the error every rank then raises
// The returned store is PrefixStore("tdist/pg/<round>", base): each rendezvous on one
// store (say init, destroy, init again) gets its own namespace that all ranks agree on.
//
// Blocking and failure: everything (connecting, joining) finishes by one deadline,
// `timeout` from the call. An unreachable store raises TimeoutError naming host:port; a
// round that does not fill raises TimeoutError saying how many ranks joined. Bad input
// (unknown scheme, malformed URL, missing or non-numeric variables, rank >= world_size)
// raises InvalidArgument naming the variable or argument and the value found, before
// anything is contacted. Thread-safe: calls share no state (the store does the work).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "tdist/store.h"

namespace tdist {

// The default timeout of process groups and rendezvous: TDIST_TIMEOUT (1800 s), read
// from the environment at each call (torch's default_pg_timeout).
std::chrono::milliseconds default_pg_timeout();

struct RendezvousResult {
  std::shared_ptr<Store> store;  // this group's namespace in the job's store
  int rank = -1;
  int world_size = -1;
};

// Resolves `init_method`, connects (rank 0 may host the store) and joins. rank and
// world_size of -1 mean "take them from the URL or the environment".
RendezvousResult rendezvous(const std::string& init_method, int rank = -1, int world_size = -1,
                            std::chrono::milliseconds timeout = default_pg_timeout());

// Joins on a store the caller already has (init_process_group's store= argument): rank
// and world_size are required. Same agreement checks, key layout and result prefix.
RendezvousResult rendezvous(std::shared_ptr<Store> store, int rank, int world_size,
                            std::chrono::milliseconds timeout = default_pg_timeout());

// The job's store as rendezvous(init_method, ...) opens it (connecting; on rank 0 hosting
// it where the init method says so), without joining a round: for protocols that form
// their own groups on it (elastic.h). `survives_ranks` is false when a rank of the job
// hosts the store (tcp://, env:// without a launcher's store), whose death then ends it;
// `must_survive_ranks` refuses such a store (InvalidArgument naming `caller`) before
// anything is contacted. Same parsing, errors and deadline as rendezvous().
struct JobStore {
  std::shared_ptr<Store> store;  // under the launcher's key prefix, if any
  int rank = -1;
  int world_size = -1;
  bool survives_ranks = false;
  std::string where;  // "TCPStore 127.0.0.1:29500 (hosted by the launcher)", for messages
};
JobStore open_job_store(const std::string& init_method = "env://", int rank = -1,
                        int world_size = -1,
                        std::chrono::milliseconds timeout = default_pg_timeout(),
                        const char* caller = nullptr, bool must_survive_ranks = false);

}  // namespace tdist
