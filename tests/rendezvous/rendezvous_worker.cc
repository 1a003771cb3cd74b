// rendezvous_worker: one rank of a multi-process rendezvous test.
//
//   rendezvous_worker MODE INIT_METHOD RANK WORLD_SIZE EXPECTED_RANK EXPECTED_WORLD ROUNDS
//
// MODE is "rendezvous" (tdist::rendezvous) or "init" (init_process_group with the test
// backend "fake", then destroy_process_group). RANK / WORLD_SIZE of -1 leave them to the
// init method and environment. Each round checks the rank and world size it got, that
// the round's store namespace is "tdist/pg/<round>", writes "<rank>,<world>,<round>",
// reads every rank's entry and checks they agree. The timeout is TDIST_TIMEOUT.
// Exit status: 0 on success, 1 on a failed check or error (printed to stderr), 2 on usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "rendezvous/test_util.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/prefix_store.h"
#include "tdist/rendezvous.h"

namespace {

using tdist::Store;

struct Args {
  std::string mode;
  std::string init_method;
  int rank = -1;
  int world_size = -1;
  int expected_rank = -1;
  int expected_world = -1;
  int rounds = 1;
};

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// Publishes this rank's entry, reads everyone's, and keeps the store up until every rank
// is done with it (rank 0 may be the one hosting it).
void exchange(Store& store, int rank, int world, int round) {
  auto entry = [&](int r) {
    return std::to_string(r) + "," + std::to_string(world) + "," + std::to_string(round);
  };
  store.set("entry/" + std::to_string(rank), entry(rank));
  for (int r = 0; r < world; ++r) {
    std::string got = tdist::to_string(store.get("entry/" + std::to_string(r)));
    check(got == entry(r),
          "rank " + std::to_string(r) + "'s entry is '" + got + "', expected '" + entry(r) + "'");
  }
  // Ranks other than 0 report that they are done; rank 0 waits until all of them are,
  // so its server outlives every use of it.
  if (rank != 0) {
    store.add("left", 1);
    return;
  }
  auto deadline = tdist::Deadline::after(store.timeout());
  while (store.add("left", 0) < world - 1) {
    check(!deadline.expired(), "the other ranks did not finish");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void check_round(const std::shared_ptr<Store>& store, int rank, int world, const Args& args,
                 int round) {
  check(rank == args.expected_rank,
        "got rank " + std::to_string(rank) + ", expected " + std::to_string(args.expected_rank));
  check(world == args.expected_world, "got world size " + std::to_string(world) + ", expected " +
                                          std::to_string(args.expected_world));
  auto* prefixed = dynamic_cast<tdist::PrefixStore*>(store.get());
  std::string want = "tdist/pg/" + std::to_string(round);
  check(prefixed != nullptr && prefixed->prefix() == want, "the store's namespace is not " + want);
  exchange(*store, rank, world, round);
}

void run(const Args& args) {
  for (int round = 0; round < args.rounds; ++round) {
    if (args.mode == "rendezvous") {
      tdist::RendezvousResult r = tdist::rendezvous(args.init_method, args.rank, args.world_size);
      check_round(r.store, r.rank, r.world_size, args, round);
    } else {
      tdist::rdzv_test::register_fake_backend();
      tdist::init_process_group(tdist::rdzv_test::kFakeBackend, args.init_method, args.world_size,
                                args.rank);
      check(tdist::is_initialized(), "is_initialized() after init_process_group");
      check(tdist::get_backend() == "fake", "get_backend() is " + tdist::get_backend());
      auto group = tdist::get_default_group();
      check(group->timeout() == tdist::default_pg_timeout(), "the group's timeout");
      check_round(group->store(), tdist::get_rank(), tdist::get_world_size(), args, round);
      group.reset();
      tdist::destroy_process_group();
      check(!tdist::is_initialized(), "is_initialized() after destroy_process_group");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s MODE INIT_METHOD RANK WORLD_SIZE EXPECTED_RANK EXPECTED_WORLD "
                 "ROUNDS\n",
                 argv[0]);
    return 2;
  }
  Args args{argv[1],
            argv[2],
            std::atoi(argv[3]),
            std::atoi(argv[4]),
            std::atoi(argv[5]),
            std::atoi(argv[6]),
            std::atoi(argv[7])};
  try {
    run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rendezvous_worker (expected rank %d): %s\n", args.expected_rank,
                 e.what());
    return 1;
  }
  return 0;
}
