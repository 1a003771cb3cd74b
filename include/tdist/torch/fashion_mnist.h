// FashionMNIST: the Fashion-MNIST dataset (Zalando; 28x28 grey images of 10 kinds of
// clothing) as a LibTorch dataset, read from its IDX files:
//
//   tdist::torch::FashionMNIST train;                        // the Debian package's copy
//   tdist::torch::FashionMNIST test(dir, FashionMNIST::Mode::kTest);
//   auto loader = ::torch::data::make_data_loader(train.map(Stack<>()), sampler, options);
//
// Files in `root`: train-images-idx3-ubyte, train-labels-idx1-ubyte (kTrain),
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (kTest), each gzipped with a ".gz" suffix
// (preferred when both exist) or plain. The constructor loads everything into memory:
// images() is float32 [N, 1, rows, cols] (28x28 here), normalized as
// (pixel / 255 - kMean) / kStd; targets() is int64 [N] with values 0..9.
//
// Failures (constructor, tdist::Error): a missing directory or file names the path and
// says to install the Debian package dataset-fashion-mnist or pass --data DIR; a file
// that is not an IDX file of the expected kind, is truncated, has bytes past the count
// its header gives, is corrupt gzip, or whose counts or labels disagree, says which file
// and what is wrong. Thread-safety: immutable after construction; get() may be called
// from any thread (LibTorch's loader workers do).
#pragma once

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <cstddef>
#include <string>

namespace tdist::torch {

class FashionMNIST : public ::torch::data::datasets::Dataset<FashionMNIST> {
 public:
  enum class Mode { kTrain, kTest };

  // Where Debian's dataset-fashion-mnist package installs the files.
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  // Mean and standard deviation of the training set's pixels scaled to [0, 1] (0.28604,
  // 0.35302), the normalization commonly used with torchvision's FashionMNIST. The
  // normalized training set has mean ~0 and standard deviation ~1.
  static constexpr double kMean = 0.2860;
  static constexpr double kStd = 0.3530;
  static constexpr int64_t kNumClasses = 10;

  explicit FashionMNIST(const std::string& root = kDefaultRoot, Mode mode = Mode::kTrain);

  // Image [1, rows, cols] and label (int64 scalar) of sample `index` (< size()).
  ::torch::data::Example<> get(size_t index) override;
  ::torch::optional<size_t> size() const override;

  bool is_train() const { return mode_ == Mode::kTrain; }
  const ::torch::Tensor& images() const { return images_; }
  const ::torch::Tensor& targets() const { return targets_; }

 private:
  Mode mode_;
  ::torch::Tensor images_;
  ::torch::Tensor targets_;
};

}  // namespace tdist::torch
