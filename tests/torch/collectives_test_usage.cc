// Tensor collectives over the "tcp" backend with ranks as threads, how they are called:
// point-to-point with tags, batch_isend_irecv, barrier, async forms (copy-back inside
// wait/is_completed, a bounded wait that times out, dropped Works, CallerWaits scopes), sub-groups
// and the default group, bad input, which must fail before anything is sent (the group still works
// after), and tensors with autograd state or lazily negated views. With collectives_test.cc, part
// of torch_test (collectives_test.cc instantiates the world sizes of CollectivesTest).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives_test_util.h"
#include "tdist/distributed.h"
#include "tdist/hash_store.h"
#include "tdist/torch/collectives.h"

namespace tdist::torch::coll_test::collectives_test_usage {
namespace {

// ---- point-to-point, barrier, async ---------------------------------------------------

TEST(CollectivesP2PTest, SendRecvMatchTagsIntoNonContiguousTensors) {
  run_world(2, [](int rank, const PG& pg) {
    for (c10::ScalarType type : kTypes) {
      const std::string what = std::string(c10::toString(type)) + " rank " + std::to_string(rank);
      if (rank == 0) {
        for (uint32_t tag : {1u, 2u, 3u}) {
          send(values(type, {kRows, kCols}, 0, static_cast<int>(tag), false).t(), 1, pg, tag);
        }
      } else {
        std::vector<View> views;
        std::vector<WorkPtr> works;
        for (uint32_t tag : {3u, 2u, 1u}) {  // posted in reverse order: matched by tag
          views.push_back(make_view(kLayouts[tag % 3], type, kCols, kRows));
          works.push_back(irecv(views.back().t, 0, pg, tag));
        }
        for (size_t i = 0; i < works.size(); ++i) {
          works[i]->wait();
          const int tag = 3 - static_cast<int>(i);
          expect_same(views[i].t, values(type, {kRows, kCols}, 0, tag, false).t(),
                      what + " tag " + std::to_string(tag));
          EXPECT_TRUE(views[i].outside_untouched());
        }
      }
      // Both directions at once with isend/irecv.
      Tensor out = values(type, {kRows}, rank, 30, false);
      Tensor in = ::torch::zeros({kRows}, ::torch::TensorOptions().dtype(type));
      WorkPtr s = isend(out, 1 - rank, pg, 9);
      WorkPtr r = irecv(in, 1 - rank, pg, 9);
      r->wait();
      s->wait();
      expect_same(in, values(type, {kRows}, 1 - rank, 30, false), what + " exchange");
    }
  });
}

TEST_P(CollectivesTest, BarrierWaitsForEveryRank) {
  std::atomic<int> arrived{0};
  run_world(GetParam(), [&](int rank, const PG& pg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * rank));
    arrived.fetch_add(1);
    barrier(pg);
    EXPECT_EQ(arrived.load(), pg->size()) << "rank " << rank << " left the barrier early";
    WorkPtr w = barrier_async(pg);
    w->wait();
    EXPECT_TRUE(w->is_success());
  });
}

TEST_P(CollectivesTest, AsyncFormsCopyBackOnWaitOrCompletion) {
  run_world(GetParam(), [](int rank, const PG& pg) {
    const int n = pg->size();
    std::vector<Tensor> all;
    for (int r = 0; r < n; ++r) all.push_back(values(::torch::kFloat, {kRows, kCols}, r, 40));
    const Tensor sum = reference(all, ReduceOpKind::kSum);
    // Several in flight on non-contiguous tensors, waited in reverse order.
    std::vector<View> views;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 4; ++k) {
      views.push_back(view_of(kLayouts[k % 3], all[static_cast<size_t>(rank)] * (k + 1)));
      works.push_back(all_reduce_async(views.back().t, ReduceOpKind::kSum, pg));
    }
    for (int k = 3; k >= 0; --k) {
      works[static_cast<size_t>(k)]->wait();
      expect_same(views[static_cast<size_t>(k)].t, sum * (k + 1),
                  "reverse wait " + std::to_string(k));
    }
    // Polling is_completed() alone completes the Work, copy-back included.
    View v = view_of(Layout::kTransposed, all[static_cast<size_t>(rank)]);
    WorkPtr w = all_reduce_async(v.t, ReduceOpKind::kSum, pg);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!w->is_completed() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(w->is_completed());
    EXPECT_TRUE(w->is_success());
    expect_same(v.t, sum, "is_completed");
    // A list output through the async form; the list itself may go out of scope.
    std::vector<Tensor> outs;
    WorkPtr g;
    {
      std::vector<Tensor> list;
      for (int r = 0; r < n; ++r) list.push_back(::torch::zeros({kCols, kRows}).t());
      outs = list;
      g = all_gather_async(list, all[static_cast<size_t>(rank)], pg);
    }
    g->wait();
    for (int r = 0; r < n; ++r) expect_same(outs[r], all[static_cast<size_t>(r)], "async gather");
    // Dropped unfinished Works: the operations still run and keep their temporaries.
    for (int k = 0; k < 3; ++k) {
      all_reduce_async(::torch::ones({kCols, kRows}).t(), ReduceOpKind::kSum, pg);
    }
    Tensor after = ::torch::ones({3});
    all_reduce(after, ReduceOpKind::kSum, pg);
    expect_same(after, ::torch::full({3}, static_cast<float>(n)), "after dropped works");
  });
}

TEST(CollectivesAsyncTest, BoundedWaitTimesOutThenCompletes) {
  run_world(2, [](int rank, const PG& pg) {
    View v = view_of(Layout::kTransposed, values(::torch::kFloat, {kRows, kCols}, rank, 50));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    WorkPtr w = all_reduce_async(v.t, ReduceOpKind::kSum, pg);
    if (rank == 0) {
      EXPECT_THROW(w->wait(Deadline::after(std::chrono::milliseconds(50))), TimeoutError);
      EXPECT_FALSE(w->is_completed());
    }
    w->wait();
    const Tensor want = values(::torch::kFloat, {kRows, kCols}, 0, 50) +
                        values(::torch::kFloat, {kRows, kCols}, 1, 50);
    expect_same(v.t, want, "after the timed-out wait");
  });
}

TEST(CollectivesAsyncTest, CallerWaitsFinishesCallsInsideThem) {
  run_world(2, [](int rank, const PG& pg) {
    const Tensor want = values(::torch::kFloat, {kRows, kCols}, 0, 60) +
                        values(::torch::kFloat, {kRows, kCols}, 1, 60);
    // Issued before the scope: its callback, which may run on this thread while the scoped
    // call runs the queue up to its own, issues a call that stays asynchronous (a send or
    // receive: those need no order with the collectives, which the callback may precede).
    View before = view_of(Layout::kTransposed, values(::torch::kFloat, {kRows, kCols}, rank, 60));
    WorkPtr first = all_reduce_async(before.t, ReduceOpKind::kSum, pg);
    Tensor from_callback = rank == 0 ? ::torch::full({4}, 7.0f) : ::torch::zeros({4});
    std::promise<WorkPtr> issued;
    first->add_callback([&] {
      issued.set_value(rank == 0 ? isend(from_callback, 1, pg) : irecv(from_callback, 0, pg));
    });
    View v = view_of(Layout::kStrided, values(::torch::kFloat, {kRows, kCols}, rank, 60));
    WorkPtr w;
    {
      CallerWaits waits;
      w = all_reduce_async(v.t, ReduceOpKind::kSum, pg);
      // Complete on return, the copy into the non-contiguous view included.
      EXPECT_TRUE(w->is_completed());
      EXPECT_TRUE(w->is_success());
      expect_same(v.t, want, "inside CallerWaits");
    }
    first->wait();
    expect_same(before.t, want, "issued before the scope");
    WorkPtr later = issued.get_future().get();
    later->wait();
    expect_same(from_callback, ::torch::full({4}, 7.0f), "issued by a callback");
    // After the scope, async calls are asynchronous Works again (completed by wait()).
    Tensor t = ::torch::ones({kRows, kCols}).t();
    WorkPtr after = all_reduce_async(t, ReduceOpKind::kSum, pg);
    after->wait();
    expect_same(t, ::torch::full({kCols, kRows}, 2.0f), "after the scope");
  });
}

TEST(CollectivesAsyncTest, CallerWaitsThrowsTheOperationsError) {
  run_world(2, [](int rank, const PG& pg) {
    if (rank == 1) pg->abort();
    CallerWaits waits;
    EXPECT_THROW(all_reduce_async(::torch::ones({3}), ReduceOpKind::kSum, pg), PeerError);
  });
}

// ---- groups ---------------------------------------------------------------------------

TEST(CollectivesGroupTest, SubGroupsUseGroupRanksAndNullGroupsAreRefused) {
  run_world(4, [](int rank, const PG& pg) {
    PG odds = pg->new_group({1, 3});
    PG halves = pg->split(rank % 2, rank);
    if (rank % 2 == 0) {
      ASSERT_EQ(odds, nullptr);
      Tensor t = ::torch::ones({2});
      EXPECT_THROW(all_reduce(t, ReduceOpKind::kSum, odds), InvalidArgument);
    } else {
      Tensor t = ::torch::full({2}, static_cast<float>(rank));
      all_reduce(t, ReduceOpKind::kSum, odds);
      expect_same(t, ::torch::full({2}, 4.0f), "odds sum");
      // src 1 is the group's rank 1, global rank 3.
      Tensor b = ::torch::full({3}, static_cast<float>(rank)).expand({2, 3}).t().contiguous().t();
      broadcast(b, 1, odds);
      expect_same(b, ::torch::full({2, 3}, 3.0f), "odds broadcast");
    }
    Tensor h = ::torch::full({kCols, kRows}, static_cast<float>(rank)).t();
    all_reduce(h, ReduceOpKind::kMax, halves);
    expect_same(h, ::torch::full({kRows, kCols}, static_cast<float>(rank % 2 + 2)), "halves max");
  });
}

TEST(CollectivesGroupTest, DefaultGroupIsUsedWhenNoneIsGiven) {
  Tensor t = ::torch::arange(6, ::torch::kFloat).reshape({2, 3}).t();
  EXPECT_THROW(all_reduce(t), Error);  // nothing initialized
  init_process_group("tcp", "env://", 1, 0, std::chrono::seconds(30),
                     std::make_shared<HashStore>());
  all_reduce(t, ReduceOp::premul_sum(2.0));
  expect_same(t, ::torch::arange(6, ::torch::kFloat).reshape({2, 3}).t() * 2, "premul_sum");
  std::vector<Tensor> list{::torch::zeros({3, 2})};
  all_gather(list, t);
  expect_same(list[0], t, "all_gather");
  broadcast(t, 0);
  barrier();
  destroy_process_group();
}

// ---- bad input ------------------------------------------------------------------------

// What `fn` throws, as "Type: message" (or "nothing").
template <typename Fn>
std::string thrown(Fn&& fn) {
  try {
    fn();
  } catch (...) {
    return pg_test::describe(std::current_exception());
  }
  return "nothing";
}

void expect_invalid(const std::string& got, const std::string& fragment) {
  EXPECT_EQ(got.rfind("InvalidArgument: ", 0), 0u) << got;
  EXPECT_NE(got.find(fragment), std::string::npos) << "\"" << fragment << "\" not in: " << got;
}

TEST(CollectivesErrorTest, DeviceMessageNamesTheDevice) {
  EXPECT_EQ(detail::device_error(c10::Device(c10::kCUDA, 0)),
            std::string("tdist: CUDA tensors are not supported (tensor on cuda:0); move it to the "
                        "CPU") +
                (TDIST_TORCH_CUDA ? " or a CUDA device"
                                  : " (tdist_torch was built against a LibTorch without CUDA)"));
  Tensor meta = ::torch::empty({4}, ::torch::TensorOptions().device(c10::kMeta));
  ThreadWorld world(1);
  ASSERT_TRUE(world.ok());
  expect_invalid(thrown([&] { all_reduce(meta, ReduceOpKind::kSum, world.shared(0)); }),
                 "tensors are not supported (tensor on meta); move it to the CPU");
}

TEST(CollectivesErrorTest, BadArgumentsFailBeforeAnythingIsSent) {
  run_world(2, [](int rank, const PG& pg) {
    const auto f32 = ::torch::TensorOptions().dtype(::torch::kFloat);
    Tensor t = ::torch::ones({4}, f32);
    expect_invalid(thrown([&] {
                     all_reduce(::torch::ones({2}, ::torch::kComplexFloat), ReduceOpKind::kSum, pg);
                   }),
                   "ComplexFloat");
    expect_invalid(thrown([&] { all_reduce(Tensor(), ReduceOpKind::kSum, pg); }), "undefined");
    expect_invalid(thrown([&] { all_reduce(t.to_sparse(), ReduceOpKind::kSum, pg); }), "layout");
    expect_invalid(thrown([&] { all_reduce(t, ReduceOpKind::kBand, pg); }), "band");
    expect_invalid(
        thrown([&] { all_reduce(::torch::ones({1}).expand({4}), ReduceOpKind::kSum, pg); }),
        "share memory");
    expect_invalid(thrown([&] { broadcast(t, 2, pg); }), "src 2 is not a rank of the group");
    expect_invalid(thrown([&] { all_gather({t}, t, pg); }), "one per rank of the group (2)");
    expect_invalid(thrown([&] {
                     all_gather({t, ::torch::ones({2, 2})}, t, pg);
                   }),
                   "outputs[1] has shape [2, 2] but input has [4]");
    expect_invalid(thrown([&] {
                     all_gather({t, ::torch::ones({4}, ::torch::kLong)}, t, pg);
                   }),
                   "outputs[1] has dtype Long but input has Float");
    expect_invalid(thrown([&] { all_gather_into_tensor(::torch::ones({7}), t, pg); }),
                   "output has 7 elements; it needs 2 x 4");
    expect_invalid(
        thrown([&] { reduce_scatter_tensor(t, ::torch::ones({4}), ReduceOpKind::kSum, pg); }),
        "input has 4 elements; it needs 2 x 4");
    expect_invalid(thrown([&] {
                     gather(t, {t, t}, 1 - rank, pg);
                   }),
                   "gather_list must be empty on ranks other than dst");
    expect_invalid(thrown([&] { scatter(t, {}, rank, pg); }), "scatter_list holds 0 tensors");
    expect_invalid(thrown([&] {
                     all_to_all({t, t}, {t, ::torch::ones({4}, ::torch::kHalf)}, pg);
                   }),
                   "inputs[1] has dtype Half");
    expect_invalid(thrown([&] {
                     all_to_all({t, t}, {::torch::ones({3}), ::torch::ones({3})}, pg);
                   }),
                   "sends itself");
    expect_invalid(
        thrown([&] { all_to_all_single(::torch::ones({3}), ::torch::ones({3}), {}, {}, pg); }),
        "does not divide evenly among 2 ranks");
    expect_invalid(thrown([&] {
                     all_to_all_single(t, t, {2, 2}, {1, 2}, pg);
                   }),
                   "split sizes add up to 3");
    expect_invalid(thrown([&] {
                     all_to_all_single(t, t, {2, 2}, {4}, pg);
                   }),
                   "split sizes hold 1 entries");
    expect_invalid(thrown([&] { all_to_all_single(::torch::ones({}), t, {}, {}, pg); }), "0-dim");
    expect_invalid(thrown([&] { send(t, rank, pg); }), "itself");
    // Nothing reached the backend: both ranks still agree on the next collective.
    Tensor ok = ::torch::full({3}, static_cast<float>(rank + 1));
    all_reduce(ok, ReduceOpKind::kSum, pg);
    expect_same(ok, ::torch::full({3}, 3.0f), "after the errors");
  });
}

TEST(CollectivesP2PTest, BatchIsendIrecvPostsEverythingAtOnceWithOneWork) {
  run_world(3, [](int rank, const PG& pg) {
    const int next = (rank + 1) % 3;
    const int prev = (rank + 2) % 3;
    // Receives first on every rank, one into a strided view: posted together, so no
    // order deadlocks; the Work completes after the copy into the view.
    View from_prev = make_view(Layout::kStrided, ::torch::kFloat, kCols, kRows);
    Tensor from_next = ::torch::zeros({5}, ::torch::kLong);
    WorkPtr work = batch_isend_irecv(
        {{P2POp::Kind::kRecv, from_prev.t, prev, 4},
         {P2POp::Kind::kRecv, from_next, next, 5},
         {P2POp::Kind::kSend, values(::torch::kFloat, {kRows, kCols}, rank, 4, false).t(), next, 4},
         {P2POp::Kind::kSend, ::torch::full({5}, int64_t{100} + rank), prev, 5}},
        pg);
    work->wait();
    expect_same(from_prev.t, values(::torch::kFloat, {kRows, kCols}, prev, 4, false).t(),
                "from the previous rank");
    EXPECT_TRUE(from_prev.outside_untouched());
    expect_same(from_next, ::torch::full({5}, int64_t{100} + next), "from the next rank");
    // Bad input fails at the call, before anything is posted.
    expect_invalid(thrown([&] { batch_isend_irecv({}, pg); }), "empty");
    expect_invalid(thrown([&] {
                     batch_isend_irecv({{P2POp::Kind::kSend, ::torch::ones({2}), next},
                                        {P2POp::Kind::kRecv, Tensor(), prev}},
                                       pg);
                   }),
                   "ops[1].tensor is an undefined tensor");
    expect_invalid(thrown([&] {
                     batch_isend_irecv({{P2POp::Kind::kSend, ::torch::ones({2}), 3}}, pg);
                   }),
                   "3");
    Tensor ok = ::torch::full({3}, static_cast<float>(rank + 1));
    all_reduce(ok, ReduceOpKind::kSum, pg);
    expect_same(ok, ::torch::full({3}, 6.0f), "after the errors");
  });
}

// ---- tensors with autograd state and lazy views ---------------------------------------

TEST(CollectivesTensorKindsTest, GradLeavesInferenceTensorsAndNegatedViews) {
  run_world(2, [](int rank, const PG& pg) {
    const float v = static_cast<float>(rank + 1);
    // A leaf that requires grad, non-contiguous: the copy-back must not trip autograd.
    Tensor leaf = ::torch::full({kCols, kRows}, v).t().requires_grad_(true);
    all_reduce(leaf, ReduceOpKind::kSum, pg);
    expect_same(leaf.detach(), ::torch::full({kRows, kCols}, 3.0f), "grad leaf");
    // Made under InferenceMode, written outside it.
    Tensor inference;
    {
      c10::InferenceMode guard;
      inference = ::torch::full({kCols, kRows}, v).t();
    }
    all_reduce(inference, ReduceOpKind::kSum, pg);
    expect_same(inference, ::torch::full({kRows, kCols}, 3.0f), "inference tensor");
    // Lazily negated views: the imaginary part of a conjugated complex tensor (strided),
    // and a contiguous one, whose memory holds the values' negation.
    Tensor z = ::torch::complex(::torch::zeros({4}), ::torch::full({4}, v));
    Tensor imag = ::torch::imag(z.conj());
    Tensor base = ::torch::full({4}, v);
    Tensor neg = ::torch::_neg_view(base);
    ASSERT_TRUE(imag.is_neg() && neg.is_neg() && neg.is_contiguous());
    // max, not sum: negation commutes with a sum, so a view read raw would still pass.
    all_reduce(imag, ReduceOpKind::kMax, pg);  // logical values -1 and -2
    all_reduce(neg, ReduceOpKind::kMax, pg);
    for (const Tensor& t : {imag, neg}) expect_same(t, ::torch::full({4}, -1.0f), "negated view");
    expect_same(::torch::imag(z), ::torch::full({4}, 1.0f), "the complex base");
    expect_same(base, ::torch::full({4}, 1.0f), "the real base");
  });
}

}  // namespace
}  // namespace tdist::torch::coll_test::collectives_test_usage
