// FashionNet: the small CNN train_fashion_mnist trains (and ddp_bench times) on 28x28 grey
// images: conv 1->32 3x3 pad 1, relu, maxpool 2, conv 32->64 3x3 pad 1, relu, maxpool 2,
// fc 3136->128, relu, fc 128->10 (421k parameters, 1.7 MB of gradients). With SGD
// (momentum 0.9, lr 0.05) and 2 ranks of batch 64 it reaches about 88% test accuracy in
// one epoch; without the padding (fc 1600->128) it stays around 86%. forward() takes
// [N, 1, 28, 28] float and returns [N, 10] logits. A plain torch::nn::Module: not
// thread-safe, no failure modes of its own.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace fashion_mnist {

class FashionNet : public torch::nn::Module {
 public:
  FashionNet()
      : conv1_(register_module("conv1", torch::nn::Conv2d(conv_options(1, 32)))),
        conv2_(register_module("conv2", torch::nn::Conv2d(conv_options(32, 64)))),
        fc1_(register_module("fc1", torch::nn::Linear(64 * 7 * 7, 128))),
        fc2_(register_module("fc2", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);  // [N, 32, 14, 14]
    x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2);  // [N, 64, 7, 7]
    x = torch::relu(fc1_->forward(x.flatten(1)));
    return fc2_->forward(x);
  }

 private:
  static torch::nn::Conv2dOptions conv_options(int64_t in, int64_t out) {
    return torch::nn::Conv2dOptions(in, out, 3).padding(1);
  }

  torch::nn::Conv2d conv1_;
  torch::nn::Conv2d conv2_;
  torch::nn::Linear fc1_;
  torch::nn::Linear fc2_;
};

}  // namespace fashion_mnist
