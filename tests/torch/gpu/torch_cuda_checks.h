// The LibTorch layer on CUDA tensors (tests/torch/gpu): checks run by one rank of a group,
// in the test process (a world of one) or in a worker process. Each returns what failed,
// as text, instead of using gtest assertions, so that workers can report it.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "tdist/torch/collectives.h"
#include "tdist/torch/ddp.h"
#include "torch/collectives_test_util.h"

namespace tdist::torch::gpu_test {

using coll_test::reference;
using coll_test::values;
using ::torch::Tensor;
using PG = std::shared_ptr<ProcessGroup>;

struct Failures {
  std::vector<std::string> list;
  void expect(bool ok, const std::string& what) {
    if (!ok) list.push_back(what);
  }
};

inline const c10::ScalarType kAllTypes[] = {::torch::kFloat,    ::torch::kDouble, ::torch::kHalf,
                                            ::torch::kBFloat16, ::torch::kChar,   ::torch::kByte,
                                            ::torch::kInt,      ::torch::kLong,   ::torch::kBool};

// got (any device) equals want (CPU), as coll_test::expect_same compares.
inline bool same(const Tensor& got_any, const Tensor& want) {
  const Tensor got = got_any.cpu();
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) return false;
  if (c10::isFloatingType(want.scalar_type())) {
    const double tol = want.element_size() == 2 ? 1e-2 : 1e-6;
    return ::torch::allclose(got.to(::torch::kDouble), want.to(::torch::kDouble), tol, tol);
  }
  return ::torch::equal(got, want);
}

// Every tensor collective on `device` for every dtype, against a CPU reference.
inline void check_collectives(Failures& f, const PG& pg, c10::Device device) {
  const int rank = pg->rank();
  const int world = pg->size();
  const int64_t rows = coll_test::kRows;
  const int64_t cols = coll_test::kCols;
  for (c10::ScalarType type : kAllTypes) {
    const std::string name = std::string(c10::toString(type)) + " rank " + std::to_string(rank);
    auto x = [&](int r, int salt) { return values(type, {rows, cols}, r, salt); };
    auto all = [&](int salt) {
      std::vector<Tensor> xs;
      for (int r = 0; r < world; ++r) xs.push_back(x(r, salt));
      return xs;
    };
    for (ReduceOpKind op : {ReduceOpKind::kSum, ReduceOpKind::kMax}) {
      Tensor t = x(rank, 1).to(device);
      all_reduce(t, op, pg);
      f.expect(same(t, reference(all(1), op)), "all_reduce " + name);
    }
    // A transposed (non-contiguous) tensor: staged in a dense temporary and copied back.
    Tensor tt = x(rank, 2).t().contiguous().to(device).t();
    all_reduce(tt, ReduceOpKind::kSum, pg);
    f.expect(same(tt, reference(all(2), ReduceOpKind::kSum)), "all_reduce transposed " + name);

    Tensor b = x(rank, 3).to(device);
    broadcast(b, world - 1, pg);
    f.expect(same(b, x(world - 1, 3)), "broadcast " + name);

    Tensor r = x(rank, 4).to(device);
    reduce(r, 0, ReduceOpKind::kSum, pg);
    f.expect(same(r, rank == 0 ? reference(all(4), ReduceOpKind::kSum) : x(rank, 4)),
             "reduce " + name);

    std::vector<Tensor> gathered;
    for (int p = 0; p < world; ++p) gathered.push_back(::torch::empty_like(x(0, 5)).to(device));
    all_gather(gathered, x(rank, 5).to(device), pg);
    for (int p = 0; p < world; ++p) f.expect(same(gathered[p], x(p, 5)), "all_gather " + name);

    Tensor flat = ::torch::empty({world * rows * cols}, x(0, 6).options().device(device));
    all_gather_into_tensor(flat, x(rank, 6).to(device), pg);
    f.expect(same(flat, ::torch::cat(all(6)).reshape(-1)), "all_gather_into_tensor " + name);

    std::vector<Tensor> glist;
    if (rank == 0) {
      for (int p = 0; p < world; ++p) glist.push_back(::torch::empty_like(x(0, 7)).to(device));
    }
    gather(x(rank, 7).to(device), glist, 0, pg);
    for (size_t p = 0; p < glist.size(); ++p) {
      f.expect(same(glist[p], x(static_cast<int>(p), 7)), "gather " + name);
    }

    std::vector<Tensor> slist;
    if (rank == 0) {
      for (int p = 0; p < world; ++p) slist.push_back(x(p, 8).to(device));
    }
    Tensor s = ::torch::empty_like(x(0, 8)).to(device);
    scatter(s, slist, 0, pg);
    f.expect(same(s, x(rank, 8)), "scatter " + name);

    // reduce_scatter: rank p's block is the sum over ranks of their inputs[p].
    std::vector<Tensor> inputs;
    std::vector<Tensor> want_parts;
    for (int p = 0; p < world; ++p) inputs.push_back(x(rank * world + p, 9).to(device));
    for (int r2 = 0; r2 < world; ++r2) want_parts.push_back(x(r2 * world + rank, 9));
    Tensor rs = ::torch::empty_like(x(0, 9)).to(device);
    reduce_scatter(rs, inputs, ReduceOpKind::kSum, pg);
    f.expect(same(rs, reference(want_parts, ReduceOpKind::kSum)), "reduce_scatter " + name);

    Tensor rst = ::torch::empty_like(x(0, 10)).to(device);
    reduce_scatter_tensor(rst, ::torch::cat(inputs), ReduceOpKind::kSum, pg);
    f.expect(same(rst, reference(want_parts, ReduceOpKind::kSum)), "reduce_scatter_tensor " + name);

    // all_to_all_single: block p of rank r's input goes to rank p's block r.
    Tensor a2a_in = values(type, {world * rows, cols}, rank, 11).to(device);
    Tensor a2a_out = ::torch::empty_like(a2a_in);
    all_to_all_single(a2a_out, a2a_in, {}, {}, pg);
    for (int p = 0; p < world; ++p) {
      f.expect(same(a2a_out.narrow(0, p * rows, rows),
                    values(type, {world * rows, cols}, p, 11).narrow(0, rank * rows, rows)),
               "all_to_all_single " + name);
    }
    std::vector<Tensor> outs;
    std::vector<Tensor> ins;
    for (int p = 0; p < world; ++p) {
      ins.push_back(x(rank * 10 + p, 12).to(device));
      outs.push_back(::torch::empty_like(x(0, 12)).to(device));
    }
    all_to_all(outs, ins, pg);
    for (int p = 0; p < world; ++p)
      f.expect(same(outs[p], x(p * 10 + rank, 12)), "all_to_all " + name);

    if (world >= 2) {  // a ring of send/recv
      Tensor got = ::torch::empty_like(x(0, 13)).to(device);
      WorkPtr sent = isend(x(rank, 13).to(device), (rank + 1) % world, pg);
      recv(got, (rank + world - 1) % world, pg);
      sent->wait();
      f.expect(same(got, x((rank + world - 1) % world, 13)), "send/recv " + name);
    }
  }
  barrier(pg);
}

// Stream semantics: an all_reduce issued on a side stream behind queued work sees that
// work's result; wait() orders the current stream after it without blocking; synchronize()
// blocks the host until the Work completed.
inline void check_streams(Failures& f, const PG& pg, c10::Device device) {
  const int world = pg->size();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
  const c10::cuda::CUDAStreamGuard guard(side);
  const auto f32 = ::torch::TensorOptions().dtype(::torch::kFloat).device(device);
  Tensor busy = ::torch::ones({1024, 1024}, f32) / 1024;
  for (int i = 0; i < 20; ++i) busy = busy.matmul(busy);  // stays 1/1024 everywhere
  Tensor t = ::torch::full({1 << 16}, pg->rank() + 1.0, f32) + busy.sum() * 0;
  WorkPtr w = all_reduce_async(t, ReduceOpKind::kSum, pg);
  w->wait();
  Tensor after = t * 2;  // queued on the side stream after wait()
  const double want = world * (world + 1) / 2.0;
  f.expect(same(after, ::torch::full({1 << 16}, 2 * want)), "all_reduce after queued work");
  w->synchronize();
  f.expect(w->is_completed(), "synchronize() returned before the Work completed");
  // An async one whose Work is dropped before it completes: its buffers stay alive.
  Tensor u = ::torch::full({1 << 20}, 1.0, f32);
  { WorkPtr dropped = all_reduce_async(u, ReduceOpKind::kSum, pg); }
  barrier(pg);
  side.synchronize();
}

// DDP on `device` against the same training on the CPU without communication: every rank
// computes the average of all ranks' gradients itself. Relative error of the parameters
// after `steps` SGD steps, ||gpu - cpu|| / ||cpu||, must stay within 1e-5.
inline void check_ddp(Failures& f, const PG& pg, c10::Device device, int steps = 5) {
  const int world = pg->size();
  const int rank = pg->rank();
  ::torch::manual_seed(7);
  // Linear(300, 256) is over 256 KiB: a bucket of its own, reduced in place.
  ::torch::nn::Sequential gpu(::torch::nn::Linear(16, 300), ::torch::nn::ReLU(),
                              ::torch::nn::Linear(300, 256), ::torch::nn::Tanh(),
                              ::torch::nn::Linear(256, 4));
  auto cpu = std::dynamic_pointer_cast<::torch::nn::SequentialImpl>(gpu->clone());
  gpu->to(device);
  DDPOptions options;
  options.process_group = pg;
  DistributedDataParallel ddp(gpu, options);
  ::torch::optim::SGD gpu_opt(gpu->parameters(), ::torch::optim::SGDOptions(0.1));
  ::torch::optim::SGD cpu_opt(cpu->parameters(), ::torch::optim::SGDOptions(0.1));
  auto input = [](int r, int step) {
    return ::torch::sin(
        ::torch::arange(8 * 16, ::torch::kFloat).reshape({8, 16}) * (0.01 * (r + 1)) + step);
  };
  auto target = [](int r, int step) {
    return ::torch::cos(::torch::arange(8 * 4, ::torch::kFloat).reshape({8, 4}) * (0.1 * (r + 2)) +
                        step);
  };
  for (int step = 0; step < steps; ++step) {
    gpu_opt.zero_grad();
    Tensor loss =
        ::torch::mse_loss(ddp.forward(input(rank, step).to(device)), target(rank, step).to(device));
    loss.backward();
    gpu_opt.step();
    cpu_opt.zero_grad();
    for (int r = 0; r < world; ++r) {
      (::torch::mse_loss(cpu->forward(input(r, step)), target(r, step)) / world).backward();
    }
    cpu_opt.step();
  }
  double diff = 0;
  double norm = 0;
  const auto gp = gpu->parameters();
  const auto cp = cpu->parameters();
  for (size_t i = 0; i < gp.size(); ++i) {
    diff +=
        (gp[i].cpu().to(::torch::kDouble) - cp[i].to(::torch::kDouble)).pow(2).sum().item<double>();
    norm += cp[i].to(::torch::kDouble).pow(2).sum().item<double>();
  }
  const double rel = std::sqrt(diff / norm);
  f.expect(rel <= 1e-5, "DDP on " + device.str() + " vs CPU: relative error " +
                            std::to_string(rel) + " > 1e-5 (rank " + std::to_string(rank) + ")");
}

}  // namespace tdist::torch::gpu_test
