// A worker of an elastic job without LibTorch (multinode_test.sh): it joins through
// tdist::ElasticGroup, runs STEPS steps of one all_reduce each (every rank adds 1: the sum
// must be the group's size) plus the commit vote, STEP_MS apart, and after a failure
// reconfigures and agrees on the step with the others (the highest committed one). It
// writes its pid to $ELASTIC_PID_DIR/<slot>.pid when it starts and, at the end, rank 0
// prints "elastic_worker: steps S world W generation G". Exit status 0, 1 on an error.
//
//   elastic_worker STEPS STEP_MS BACKEND
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "tdist/elastic.h"
#include "tdist/error.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: elastic_worker STEPS STEP_MS BACKEND\n");
    return 2;
  }
  const int64_t steps = std::atoll(argv[1]);
  const int step_ms = std::atoi(argv[2]);
  try {
    tdist::ElasticOptions options;
    options.backend = argv[3];
    auto job = tdist::ElasticGroup::join(options);
    if (const char* dir = std::getenv("ELASTIC_PID_DIR")) {
      std::ofstream(std::string(dir) + "/" + std::to_string(job->slot()) + ".pid") << ::getpid();
    }
    int64_t step = job->newcomer() ? -1 : 0;
    auto agree = [&] {  // the members' highest committed step
      job->group()->all_reduce(&step, 1, tdist::DType::kI64, tdist::ReduceOpKind::kMax)->wait();
    };
    agree();
    while (step < steps) {
      try {
        int64_t one = 1;
        job->group()->all_reduce(&one, 1, tdist::DType::kI64)->wait();
        if (one != job->size()) {
          std::fprintf(stderr, "elastic_worker: the sum is %lld in a group of %d\n",
                       static_cast<long long>(one), job->size());
          return 1;
        }
        if (job->commit()) ++step;
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      } catch (const tdist::PeerError& e) {
        job->reconfigure();
        agree();
      } catch (const tdist::TimeoutError& e) {
        job->reconfigure();
        agree();
      }
    }
    if (job->rank() == 0) {
      std::printf("elastic_worker: steps %lld world %d generation %d\n",
                  static_cast<long long>(step), job->size(), job->generation());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_worker: %s\n", e.what());
    return 1;
  }
}
