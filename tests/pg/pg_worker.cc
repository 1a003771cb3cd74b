// One rank of pg_process_test: joins the default group through env:// (the test hosts
// the store: TDIST_USE_AGENT_STORE=1) with the backend BACKEND and runs one scenario.
//
//   pg_worker collectives DIR   every collective once, results checked; exit 0 when right
//   pg_worker kill DIR          64 MiB all_reduces in a loop; rank 2 writes DIR/event and
//                               SIGKILLs itself 30 ms into the second; the others write
//                               DIR/rank<r> = "<error type> <ns since the kill>
//                               <later op's error type> <later op's ns>"
//   pg_worker abort DIR         rank 1 writes DIR/event and calls abort() while the others
//                               wait in all_reduce; every rank writes DIR/rank<r> as above
//
// The group timeout of kill and abort is 10 minutes: a quick failure is not a timeout.
// Exit codes: 0 done, 1 a check failed (printed on stderr), 2 an unexpected exception.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace {

using tdist::DType;
using tdist::ProcessGroup;
using Clock = std::chrono::steady_clock;

int failures = 0;

#define CHECK_EQ(a, b)                                                                     \
  do {                                                                                     \
    auto a_ = (a);                                                                         \
    auto b_ = (b);                                                                         \
    if (!(a_ == b_)) {                                                                     \
      std::cerr << "rank " << tdist::get_rank() << ": " << __LINE__ << ": " #a " = " << a_ \
                << ", expected " << b_ << "\n";                                            \
      ++failures;                                                                          \
    }                                                                                      \
  } while (false)

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

// Writes `text` to `path` atomically (temporary file, then rename).
void write_file(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path + ".tmp");
    out << text << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// Waits (up to 20 s) for `path` and returns the integer in it.
int64_t read_number(const std::string& path) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    int64_t v = 0;
    if (in >> v) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

std::string type_of(std::exception_ptr e) {
  if (e == nullptr) return "none";
  try {
    std::rethrow_exception(e);
  } catch (const tdist::PeerError&) {
    return "PeerError";
  } catch (const tdist::TimeoutError&) {
    return "TimeoutError";
  } catch (const tdist::DesyncError&) {
    return "DesyncError";
  } catch (const tdist::InvalidArgument&) {
    return "InvalidArgument";
  } catch (const std::exception& x) {
    std::cerr << "rank " << tdist::get_rank() << ": " << x.what() << "\n";
    return "OtherError";
  }
}

void run_collectives(const std::string& backend) {
  ProcessGroup& pg = *tdist::get_default_group();
  const int rank = pg.rank();
  const int w = pg.size();
  CHECK_EQ(pg.backend_name(), backend);

  // all_reduce, an odd large count.
  std::vector<float> big((1 << 20) + 1, static_cast<float>(rank + 1));
  pg.all_reduce(big.data(), big.size(), DType::kF32)->wait();
  const float sum = static_cast<float>(w * (w + 1) / 2);
  CHECK_EQ(big.front(), sum);
  CHECK_EQ(big.back(), sum);
  // broadcast from the last rank.
  std::vector<int64_t> b(1000, rank == w - 1 ? 42 : -1);
  pg.broadcast(b.data(), b.size(), DType::kI64, w - 1)->wait();
  CHECK_EQ(b[999], int64_t{42});
  // all_gather.
  std::vector<int32_t> mine(333, rank * 7), all(333 * static_cast<size_t>(w), -1);
  pg.all_gather(mine.data(), all.data(), 333, DType::kI32)->wait();
  for (int r = 0; r < w; ++r) CHECK_EQ(all[static_cast<size_t>(r) * 333 + 5], r * 7);
  // reduce_scatter (max).
  std::vector<int64_t> rs_in(static_cast<size_t>(w) * 10), rs_out(10, 0);
  for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<int64_t>(i) * (rank + 1);
  pg.reduce_scatter(rs_in.data(), rs_out.data(), 10, DType::kI64, tdist::ReduceOpKind::kMax)
      ->wait();
  CHECK_EQ(rs_out[3], static_cast<int64_t>(rank * 10 + 3) * w);
  // all_to_allv: rank r sends p+1 elements of value 100r+p to rank p.
  std::vector<size_t> sc, rc;
  std::vector<int32_t> a2a_in, a2a_out;
  for (int p = 0; p < w; ++p) {
    sc.push_back(static_cast<size_t>(p) + 1);
    rc.push_back(static_cast<size_t>(rank) + 1);
    a2a_in.insert(a2a_in.end(), static_cast<size_t>(p) + 1, 100 * rank + p);
  }
  a2a_out.assign(static_cast<size_t>(w) * (static_cast<size_t>(rank) + 1), -1);
  pg.all_to_allv(a2a_in.data(), sc, a2a_out.data(), rc, DType::kI32)->wait();
  for (int p = 0; p < w; ++p) {
    CHECK_EQ(a2a_out[static_cast<size_t>(p) * (static_cast<size_t>(rank) + 1)], 100 * p + rank);
  }
  // gather and scatter at rank 1.
  double g = rank + 0.5;
  std::vector<double> gathered(static_cast<size_t>(w), 0);
  pg.gather(&g, rank == 1 ? gathered.data() : nullptr, 1, DType::kF64, 1)->wait();
  if (rank == 1) CHECK_EQ(gathered[static_cast<size_t>(w) - 1], w - 0.5);
  double s = -1;
  std::vector<double> to_scatter(static_cast<size_t>(w));
  std::iota(to_scatter.begin(), to_scatter.end(), 10.0);
  pg.scatter(rank == 1 ? to_scatter.data() : nullptr, &s, 1, DType::kF64, 1)->wait();
  CHECK_EQ(s, 10.0 + rank);
  // A sub-group of the odd ranks, and a ring of point-to-point messages.
  std::shared_ptr<ProcessGroup> odds = pg.new_group({1, 3});
  if (rank % 2 == 1) {
    int32_t v = rank;
    odds->all_reduce(&v, 1, DType::kI32)->wait();
    CHECK_EQ(v, 4);
  } else {
    CHECK_EQ(odds == nullptr, true);
  }
  int32_t out = rank, in = -1;
  std::vector<tdist::P2POp> ops = {
      {tdist::P2POp::Kind::kSend, &out, 1, DType::kI32, (rank + 1) % w, 3},
      {tdist::P2POp::Kind::kRecv, &in, 1, DType::kI32, (rank + w - 1) % w, 3}};
  pg.batch_isend_irecv(ops)->wait();
  CHECK_EQ(in, (rank + w - 1) % w);
  pg.barrier()->wait();
}

// The pending operation's error and, after it, a new all_reduce's error, timed.
void record_failure(const std::string& dir, int rank, std::exception_ptr error, int64_t error_ns,
                    std::vector<float>& data) {
  const int64_t event_ns = read_number(dir + "/event");
  const int64_t later_start = now_ns();
  std::exception_ptr later;
  try {
    tdist::get_default_group()->all_reduce(data.data(), data.size(), DType::kF32)->wait();
  } catch (...) {
    later = std::current_exception();
  }
  const int64_t later_ns = now_ns() - later_start;
  write_file(dir + "/rank" + std::to_string(rank),
             type_of(error) + " " + std::to_string(error_ns - event_ns) + " " + type_of(later) +
                 " " + std::to_string(later_ns));
}

void run_kill(const std::string& dir) {
  ProcessGroup& pg = *tdist::get_default_group();
  std::vector<float> data(size_t{16} << 20, 1.0f);  // 64 MiB
  for (int iteration = 0; iteration < 200; ++iteration) {
    std::exception_ptr error;
    try {
      pg.all_reduce(data.data(), data.size(), DType::kF32)->wait();
    } catch (...) {
      error = std::current_exception();
    }
    if (error != nullptr) {
      record_failure(dir, pg.rank(), error, now_ns(), data);
      return;
    }
    if (iteration == 0) CHECK_EQ(data[12345], 4.0f);
    if (iteration == 0 && pg.rank() == 2) {
      // Dies in the middle of the next all_reduce, while its data is in flight.
      std::thread([dir] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        write_file(dir + "/event", std::to_string(now_ns()));
        ::raise(SIGKILL);
      }).detach();
    }
  }
  record_failure(dir, pg.rank(), nullptr, now_ns(), data);
}

void run_abort(const std::string& dir) {
  ProcessGroup& pg = *tdist::get_default_group();
  std::vector<float> data(1000, 1.0f);
  pg.barrier()->wait();
  std::exception_ptr error;
  if (pg.rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the others wait
    write_file(dir + "/event", std::to_string(now_ns()));
    pg.abort();
  } else {
    try {
      pg.all_reduce(data.data(), data.size(), DType::kF32)->wait();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (pg.rank() == 1) error = std::make_exception_ptr(tdist::PeerError("aborted here"));
  record_failure(dir, pg.rank(), error, now_ns(), data);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: pg_worker collectives|kill|abort DIR BACKEND\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const std::string backend = argv[3];
  try {
    const auto timeout =
        mode == "collectives" ? std::chrono::milliseconds(60000) : std::chrono::minutes(10);
    tdist::init_process_group(backend, "env://", -1, -1, timeout);
    if (mode == "collectives") {
      run_collectives(backend);
    } else if (mode == "kill") {
      run_kill(dir);
    } else if (mode == "abort") {
      run_abort(dir);
    } else {
      std::cerr << "unknown mode " << mode << "\n";
      return 2;
    }
    tdist::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "pg_worker " << mode << ": " << e.what() << "\n";
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
