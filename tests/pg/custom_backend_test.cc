// A backend registered by the test, as a user would (register_backend), gets the
// argument checks of ProcessGroup: every invalid call throws InvalidArgument with the
// very text the built-in backend under test gives for it (same rank, same group size),
// and the backend's do_* methods never see the call. Valid collectives reach do_* with
// sequence numbers 0, 1, ... that invalid calls did not use up; point-to-point calls are
// not numbered. One that does not receive from any source refuses irecv_any, naming itself.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "pg/pg_test_util.h"

namespace tdist::pg_test {
namespace {

// The smallest backend: do_* records the call and returns a finished Work.
class RecordingGroup : public ProcessGroup {
 public:
  RecordingGroup(std::shared_ptr<Store> store, int rank, int size,
                 std::chrono::milliseconds timeout, std::vector<int> global_ranks = {})
      : ProcessGroup(std::move(store), rank, size, timeout, std::move(global_ranks)) {}

  std::string backend_name() const override { return "recording"; }
  void abort() override {}

  // The calls that reached the backend: "all_reduce #0", "isend", ...
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 protected:
  std::shared_ptr<ProcessGroup> make_subgroup(std::shared_ptr<Store> sub_store, int sub_rank,
                                              int sub_size, std::vector<int> globals) override {
    return std::make_shared<RecordingGroup>(std::move(sub_store), sub_rank, sub_size, timeout(),
                                            std::move(globals));
  }

  WorkPtr do_all_reduce(uint64_t seq, const void*, void*, size_t, DType, ReduceOp) override {
    return record("all_reduce", seq);
  }
  WorkPtr do_broadcast(uint64_t seq, void*, size_t, DType, int) override {
    return record("broadcast", seq);
  }
  WorkPtr do_reduce(uint64_t seq, const void*, void*, size_t, DType, ReduceOp, int) override {
    return record("reduce", seq);
  }
  WorkPtr do_all_gather(uint64_t seq, const void*, void*, size_t, DType) override {
    return record("all_gather", seq);
  }
  WorkPtr do_all_gatherv(uint64_t seq, const void*, size_t, void*, std::span<const size_t>,
                         DType) override {
    return record("all_gatherv", seq);
  }
  WorkPtr do_gather(uint64_t seq, const void*, void*, size_t, DType, int) override {
    return record("gather", seq);
  }
  WorkPtr do_scatter(uint64_t seq, const void*, void*, size_t, DType, int) override {
    return record("scatter", seq);
  }
  WorkPtr do_reduce_scatter(uint64_t seq, const void*, void*, size_t, DType, ReduceOp) override {
    return record("reduce_scatter", seq);
  }
  WorkPtr do_all_to_all(uint64_t seq, const void*, void*, size_t, DType) override {
    return record("all_to_all", seq);
  }
  WorkPtr do_all_to_allv(uint64_t seq, const void*, std::span<const size_t>, void*,
                         std::span<const size_t>, DType) override {
    return record("all_to_allv", seq);
  }
  WorkPtr do_barrier(uint64_t seq) override { return record("barrier", seq); }
  WorkPtr do_batch_isend_irecv(std::span<const P2POp> ops) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.emplace_back(p2p_name(ops));
    return completed_work(p2p_name(ops));
  }

 private:
  WorkPtr record(const char* op, uint64_t seq) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::string(op) + " #" + std::to_string(seq));
    return completed_work(op);
  }

  std::mutex mu_;
  std::vector<std::string> calls_;  // guarded by mu_
};

constexpr char kRecording[] = "recording";

void register_recording_backend() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_backend(kRecording, [](std::shared_ptr<Store> store, int rank, int world_size,
                                    std::chrono::milliseconds timeout) {
      return std::make_shared<RecordingGroup>(std::move(store), rank, world_size, timeout);
    });
  });
}

using Call = std::function<WorkPtr(ProcessGroup&)>;

// Invalid calls for `rank` of a group of `w`, over buffers a (64 f64) and b (64 * w f64).
std::vector<std::pair<std::string, Call>> invalid_calls(int rank, int w, uint8_t* p, uint8_t* q) {
  const DType f32 = DType::kF32;
  const int other = (rank + 1) % w;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  std::vector<size_t> ok(static_cast<size_t>(w), 1);
  std::vector<size_t> wrong_mine = ok;
  wrong_mine[static_cast<size_t>(rank)] = 2;
  const std::vector<size_t> too_many(static_cast<size_t>(w + 1), 1);
  std::vector<size_t> overflowing = ok;
  overflowing[0] = huge;
  overflowing[1] = huge;
  return {
      {"all_reduce null send",
       [=](ProcessGroup& g) { return g.all_reduce(nullptr, q, 10, f32, ReduceOpKind::kSum); }},
      {"all_reduce null recv",
       [=](ProcessGroup& g) { return g.all_reduce(p, nullptr, 10, f32, ReduceOpKind::kSum); }},
      {"all_reduce band on f32",
       [=](ProcessGroup& g) { return g.all_reduce(p, 4, f32, ReduceOpKind::kBand); }},
      {"all_reduce count overflow", [=](ProcessGroup& g) { return g.all_reduce(p, huge, f32); }},
      {"all_reduce unknown dtype",
       [=](ProcessGroup& g) {
         return g.all_reduce(p, 4, static_cast<DType>(42), ReduceOpKind::kMax);
       }},
      {"broadcast root = size", [=](ProcessGroup& g) { return g.broadcast(p, 4, f32, w); }},
      {"broadcast root -1", [=](ProcessGroup& g) { return g.broadcast(p, 4, f32, -1); }},
      {"broadcast null data", [=](ProcessGroup& g) { return g.broadcast(nullptr, 3, f32, 0); }},
      {"reduce null recv at root",
       [=](ProcessGroup& g) { return g.reduce(p, nullptr, 3, f32, ReduceOpKind::kSum, rank); }},
      {"reduce premul_sum on i32",
       [=](ProcessGroup& g) {
         return g.reduce(p, p, 4, DType::kI32, ReduceOp::premul_sum(2.0), 0);
       }},
      {"all_gather null recv", [=](ProcessGroup& g) { return g.all_gather(p, nullptr, 3, f32); }},
      {"all_gather count overflow",
       [=](ProcessGroup& g) { return g.all_gather(p, q, huge / 2, DType::kF64); }},
      {"all_gatherv counts length",
       [=](ProcessGroup& g) { return g.all_gatherv(p, 1, q, too_many, f32); }},
      {"all_gatherv own count",
       [=](ProcessGroup& g) { return g.all_gatherv(p, 1, q, wrong_mine, f32); }},
      {"gather root = size", [=](ProcessGroup& g) { return g.gather(p, q, 4, f32, w); }},
      {"gather null recv at root",
       [=](ProcessGroup& g) { return g.gather(p, nullptr, 3, f32, rank); }},
      {"scatter null send at root",
       [=](ProcessGroup& g) { return g.scatter(nullptr, p, 3, f32, rank); }},
      {"reduce_scatter bxor on f32",
       [=](ProcessGroup& g) { return g.reduce_scatter(q, p, 4, f32, ReduceOpKind::kBxor); }},
      {"all_to_all null send", [=](ProcessGroup& g) { return g.all_to_all(nullptr, q, 3, f32); }},
      {"all_to_allv counts length",
       [=](ProcessGroup& g) { return g.all_to_allv(p, ok, q, too_many, f32); }},
      {"all_to_allv null recv",
       [=](ProcessGroup& g) { return g.all_to_allv(q, ok, nullptr, ok, f32); }},
      {"all_to_allv counts overflow",
       [=](ProcessGroup& g) { return g.all_to_allv(q, overflowing, q, ok, f32); }},
      {"isend to self", [=](ProcessGroup& g) { return g.isend(p, 1, f32, rank); }},
      {"isend peer = size", [=](ProcessGroup& g) { return g.isend(p, 1, f32, w); }},
      {"irecv peer -1", [=](ProcessGroup& g) { return g.irecv(p, 1, f32, -1); }},
      {"irecv null buffer", [=](ProcessGroup& g) { return g.irecv(nullptr, 2, f32, other); }},
      {"irecv_any null buffer", [=](ProcessGroup& g) { return g.irecv_any(nullptr, 2, f32); }},
      {"batch with one bad op",
       [=](ProcessGroup& g) {
         const P2POp ops[] = {{P2POp::Kind::kSend, p, 1, f32, other},
                              {P2POp::Kind::kRecv, q, 1, f32, rank}};
         return g.batch_isend_irecv(ops);
       }},
  };
}

// The InvalidArgument text of call(group); a failure (naming `what`) when it is not one.
std::string invalid_argument_text(const std::string& what, const Call& call, ProcessGroup& group) {
  try {
    call(group);
    ADD_FAILURE() << group.backend_name() << ": " << what << ": no exception";
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (...) {
    ADD_FAILURE() << group.backend_name() << ": " << what << ": "
                  << describe(std::current_exception());
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CustomBackendTest, GetsTheBuiltinChecksAndTextsAndDoIsNeverCalled) {
  register_recording_backend();
  ThreadWorld world(2);
  ASSERT_TRUE(world.ok());
  auto custom_store = std::make_shared<HashStore>();
  world.run([&](int rank, ProcessGroup& builtin) {
    const int w = builtin.size();
    std::shared_ptr<ProcessGroup> custom =
        backend_factory(kRecording)(custom_store, rank, w, seconds(30));
    auto* recording = dynamic_cast<RecordingGroup*>(custom.get());
    ASSERT_NE(recording, nullptr);
    Buffer a(DType::kF64, 64), b(DType::kF64, 64 * static_cast<size_t>(w));

    for (const auto& [what, call] : invalid_calls(rank, w, a.data(), b.data())) {
      const std::string expected = invalid_argument_text(what, call, builtin);
      const std::string got = invalid_argument_text(what, call, *custom);
      EXPECT_FALSE(got.empty()) << what;
      EXPECT_EQ(got, expected) << what << " (rank " << rank << ")";
    }
    EXPECT_TRUE(recording->calls().empty()) << recording->calls().front();

    // The texts themselves, as the built-in backends have always written them.
    auto text = [&](const Call& call) { return invalid_argument_text("text", call, *custom); };
    EXPECT_TRUE(
        contains(text([&](ProcessGroup& g) { return g.all_reduce(nullptr, 10, DType::kF32); }),
                 "all_reduce: send is null but the count is 10"));
    EXPECT_TRUE(
        contains(text([&](ProcessGroup& g) { return g.broadcast(a.data(), 1, DType::kF32, w); }),
                 "broadcast: root 2 is outside 0..1 (group of 2)"));
    EXPECT_TRUE(
        contains(text([&](ProcessGroup& g) { return g.isend(a.data(), 1, DType::kF32, rank); }),
                 "isend: rank " + std::to_string(rank) + " cannot send to or receive from itself"));
    EXPECT_TRUE(
        contains(text([&](ProcessGroup& g) { return g.irecv(a.data(), 1, DType::kF32, 5); }),
                 "irecv: peer 5 is outside 0..1 (group of 2)"));

    // A backend that does not override do_irecv_any refuses any source, naming itself.
    EXPECT_EQ(text([&](ProcessGroup& g) {
                return g.irecv_any(a.data(), 1, DType::kF32, 3);
              }).rfind("irecv_any: receiving from any source is not supported by recording", 0),
              0u);

    // Valid calls reach the backend; the invalid ones took no sequence number.
    float x[4] = {};
    custom->all_reduce(x, 4, DType::kF32)->wait();
    custom->isend(x, 4, DType::kF32, 1 - rank)->wait();
    custom->barrier()->wait();
    const P2POp pair[] = {{P2POp::Kind::kSend, x, 1, DType::kF32, 1 - rank},
                          {P2POp::Kind::kRecv, x + 1, 1, DType::kF32, 1 - rank}};
    custom->batch_isend_irecv(pair)->wait();
    custom->broadcast(nullptr, 0, DType::kF32, 0)->wait();  // count 0: null is fine
    const std::vector<std::string> want = {"all_reduce #0", "isend", "barrier #1",
                                           "batch_isend_irecv", "broadcast #2"};
    EXPECT_EQ(recording->calls(), want);
    EXPECT_TRUE(a.guards_intact() && b.guards_intact());
  });
}

}  // namespace
}  // namespace tdist::pg_test
