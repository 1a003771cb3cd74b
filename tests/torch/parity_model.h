// The parity model (internal to the tests): 3 blocks of Linear(37, 37) + ReLU, then
// Linear(37, 5), its parameters and batches given by formulas (see sharded_parity_worker.cc;
// tests/torch/fsdp2_parity.py builds the same in Python). Shared by the workers that train
// it: sharded_parity_worker.cc and checkpoint_worker.cc.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tdist/torch/fully_shard.h"

namespace parity_model {

inline constexpr int64_t kWidth = 37;
inline constexpr int64_t kOut = 5;
inline constexpr int kBlocks = 3;
inline constexpr int64_t kGlobalBatch = 12;

struct Net : torch::nn::Module {
  Net() {
    for (int i = 0; i < kBlocks; ++i) {
      blocks.push_back(
          register_module("block" + std::to_string(i), torch::nn::Linear(kWidth, kWidth)));
    }
    head = register_module("head", torch::nn::Linear(kWidth, kOut));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      x = torch::relu(units.empty() ? blocks[i](x) : units[i](x));
    }
    return head(x);
  }
  std::vector<torch::nn::Linear> blocks;
  torch::nn::Linear head{nullptr};
  std::vector<tdist::torch::FullyShardedModule<torch::nn::Linear>> units;
};

// A float tensor of `shape` whose flat element i is f(i), computed in double.
template <typename F>
torch::Tensor formula(std::vector<int64_t> shape, F f) {
  torch::Tensor t = torch::empty(shape, torch::kFloat);
  float* data = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) data[i] = static_cast<float>(f(i));
  return t;
}

inline void init_parameters(Net& net) {
  torch::NoGradGuard no_grad;
  double k = 0;
  for (auto& named : net.named_parameters()) {
    torch::Tensor& p = named.value();
    const double scale = 1.0 / std::sqrt(static_cast<double>(kWidth));  // every fan_in is 37
    p.copy_(formula(p.sizes().vec(), [&](int64_t i) { return std::sin(0.37 * i + k) * scale; }));
    k += 1;
  }
}

// This rank's slice of step `step`'s global batch.
inline std::pair<torch::Tensor, torch::Tensor> batch(int64_t step, int rank, int world) {
  const int64_t local = kGlobalBatch / world;
  const int64_t first = step * kGlobalBatch + rank * local;
  torch::Tensor x = formula({local, kWidth}, [&](int64_t i) {
    return std::sin(0.71 * static_cast<double>(first + i / kWidth) + 0.13 * (i % kWidth));
  });
  torch::Tensor y = formula({local, kOut}, [&](int64_t i) {
    return 0.5 * std::cos(0.29 * static_cast<double>(first + i / kOut) + 0.5 * (i % kOut));
  });
  return {x, y};
}

inline std::string hex_bits(float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", bits);
  return buf;
}

}  // namespace parity_model
