// FashionMNIST: the installed dataset (sizes, labels, class balance, normalization; skipped
// with a message when dataset-fashion-mnist is not installed), exact values from small
// IDX files written here, plain and gzipped, and the errors for missing, malformed,
// truncated and corrupt files.
#include "tdist/torch/fashion_mnist.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "tdist/error.h"

namespace tdist::torch::fashion_mnist_test {
namespace {

namespace fs = std::filesystem;

constexpr float kPixelMin = static_cast<float>((0.0 - FashionMNIST::kMean) / FashionMNIST::kStd);
constexpr float kPixelMax = static_cast<float>((1.0 - FashionMNIST::kMean) / FashionMNIST::kStd);

bool have_dataset() { return fs::is_directory(FashionMNIST::kDefaultRoot); }

#define SKIP_WITHOUT_DATASET()                    \
  if (!have_dataset())                            \
  GTEST_SKIP() << FashionMNIST::kDefaultRoot      \
               << " is missing; apt-get install " \
                  "dataset-fashion-mnist"

// Checks one split of the installed dataset.
void check_split(const FashionMNIST& data, int64_t size) {
  ASSERT_EQ(data.images().sizes(), (std::vector<int64_t>{size, 1, 28, 28}));
  ASSERT_EQ(data.images().scalar_type(), ::torch::kFloat32);
  ASSERT_EQ(data.targets().sizes(), (std::vector<int64_t>{size}));
  ASSERT_EQ(data.targets().scalar_type(), ::torch::kInt64);
  // Fashion-MNIST is balanced: a tenth of each split per class.
  const ::torch::Tensor per_class = ::torch::bincount(data.targets());
  ASSERT_EQ(per_class.size(0), 10);
  EXPECT_TRUE(per_class.eq(size / 10).all().item<bool>()) << per_class;
  // Both extremes occur in every split (black background, white highlights).
  EXPECT_FLOAT_EQ(data.images().min().item<float>(), kPixelMin);
  EXPECT_FLOAT_EQ(data.images().max().item<float>(), kPixelMax);
}

TEST(FashionMNIST, LoadsTheTrainingSet) {
  SKIP_WITHOUT_DATASET();
  const auto start = std::chrono::steady_clock::now();
  FashionMNIST train;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "training set loaded in " << seconds << " s\n";
  EXPECT_TRUE(train.is_train());
  ASSERT_EQ(train.size().value(), 60000U);
  check_split(train, 60000);
  // The first training image is an ankle boot (class 9).
  EXPECT_EQ(train.targets()[0].item<int64_t>(), 9);
  // kMean and kStd are the training set's own statistics.
  EXPECT_NEAR(train.images().mean().item<double>(), 0.0, 1e-3);
  EXPECT_NEAR(train.images().to(::torch::kFloat64).std().item<double>(), 1.0, 1e-3);

  ::torch::data::Example<> first = train.get(0);
  EXPECT_EQ(first.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(first.target.item<int64_t>(), 9);
  EXPECT_THROW(train.get(60000), InvalidArgument);
}

TEST(FashionMNIST, LoadsTheTestSet) {
  SKIP_WITHOUT_DATASET();
  FashionMNIST test(FashionMNIST::kDefaultRoot, FashionMNIST::Mode::kTest);
  EXPECT_FALSE(test.is_train());
  ASSERT_EQ(test.size().value(), 10000U);
  check_split(test, 10000);
}

// A fresh directory for hand-written IDX files, removed afterwards.
class FashionMNISTFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "tdist_fmnist_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An unsigned-byte IDX file: magic 0x0000 08 <ndims>, big-endian dims, then `data`.
  void write_idx(const std::string& name, uint8_t ndims, const std::vector<uint32_t>& dims,
                 const std::vector<uint8_t>& data) {
    std::vector<uint8_t> bytes = {0, 0, 0x08, ndims};
    for (uint32_t d : dims) {
      for (int shift = 24; shift >= 0; shift -= 8)
        bytes.push_back(static_cast<uint8_t>(d >> shift));
    }
    bytes.insert(bytes.end(), data.begin(), data.end());
    write_file(name, bytes);
  }

  void write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }

  std::vector<uint8_t> read_file(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // Replaces `name` by `name`.gz (gzip is part of every Debian system).
  void gzip(const std::string& name) {
    const std::string command = "gzip -n -f '" + (dir_ / name).string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  // Two 2x3 images and their labels.
  void write_valid_train_set() {
    write_idx("train-images-idx3-ubyte", 3, {2, 2, 3},
              {0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6});
    write_idx("train-labels-idx1-ubyte", 1, {2}, {9, 0});
  }

  // The message of the Error loading `dir_` throws.
  std::string load_error(FashionMNIST::Mode mode = FashionMNIST::Mode::kTrain) {
    try {
      FashionMNIST data(dir_.string(), mode);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "loading " << dir_ << " did not throw";
    return "";
  }

  fs::path dir_;
};

void expect_contains(const std::string& message, const std::string& part) {
  EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

void check_valid_train_set(const FashionMNIST& data) {
  ASSERT_EQ(data.images().sizes(), (std::vector<int64_t>{2, 1, 2, 3}));
  const std::vector<int> pixels = {0, 51, 102, 153, 204, 255, 1, 2, 3, 4, 5, 6};
  const float* got = data.images().data_ptr<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    const double expected = (pixels[i] / 255.0 - 0.2860) / 0.3530;
    EXPECT_NEAR(got[i], expected, 1e-6) << "pixel " << i;
  }
  EXPECT_EQ(data.targets()[0].item<int64_t>(), 9);
  EXPECT_EQ(data.targets()[1].item<int64_t>(), 0);
}

TEST_F(FashionMNISTFiles, ReadsPlainIdxFiles) {
  write_valid_train_set();
  check_valid_train_set(FashionMNIST(dir_.string()));
}

TEST_F(FashionMNISTFiles, ReadsGzippedFilesAndPrefersThem) {
  write_valid_train_set();
  gzip("train-images-idx3-ubyte");
  gzip("train-labels-idx1-ubyte");
  // A broken plain copy next to the .gz is ignored.
  write_file("train-images-idx3-ubyte", {1, 2, 3});
  check_valid_train_set(FashionMNIST(dir_.string()));
}

TEST_F(FashionMNISTFiles, MissingDirectoryOrFileSaysWhatToInstall) {
  const std::string hint =
      "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
      "or pass --data DIR";
  try {
    FashionMNIST data((dir_ / "absent").string());
    FAIL() << "a missing directory was accepted";
  } catch (const Error& e) {
    expect_contains(e.what(), (dir_ / "absent").string());
    expect_contains(e.what(), "does not exist");
    expect_contains(e.what(), hint);
  }
  write_valid_train_set();
  const std::string message = load_error(FashionMNIST::Mode::kTest);
  expect_contains(message, "t10k-images-idx3-ubyte.gz");
  expect_contains(message, "not found");
  expect_contains(message, hint);
}

TEST_F(FashionMNISTFiles, RejectsAWrongMagicNumber) {
  write_valid_train_set();
  // A labels file where the images belong.
  write_idx("train-images-idx3-ubyte", 1, {2}, {1, 2});
  gzip("train-images-idx3-ubyte");
  const std::string message = load_error();
  expect_contains(message, "train-images-idx3-ubyte.gz");
  expect_contains(message, "is not an IDX images file");
}

TEST_F(FashionMNISTFiles, RejectsTruncatedAndOverlongFiles) {
  write_valid_train_set();
  write_idx("train-images-idx3-ubyte", 3, {5, 2, 3}, std::vector<uint8_t>(12, 7));
  expect_contains(load_error(), "is truncated: its pixels needs 30 bytes, found 12");

  write_valid_train_set();
  write_idx("train-labels-idx1-ubyte", 1, {2}, {1, 2, 3});
  expect_contains(load_error(), "has data past the items its header declares");
}

TEST_F(FashionMNISTFiles, RejectsCorruptAndCutGzip) {
  // Enough pixels that the deflate stream is long; corrupt its middle.
  std::vector<uint8_t> pixels(100 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 7919) >> 5);
  write_idx("train-images-idx3-ubyte", 3, {100, 28, 28}, pixels);
  write_idx("train-labels-idx1-ubyte", 1, {100}, std::vector<uint8_t>(100, 3));
  gzip("train-images-idx3-ubyte");
  const std::vector<uint8_t> good = read_file("train-images-idx3-ubyte.gz");
  ASSERT_GT(good.size(), 200U);
  EXPECT_EQ(FashionMNIST(dir_.string()).size().value(), 100U) << "the intact file loads";

  std::vector<uint8_t> corrupt = good;
  for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 16; ++i) corrupt[i] ^= 0x5A;
  write_file("train-images-idx3-ubyte.gz", corrupt);
  expect_contains(load_error(), "is corrupt");

  write_file("train-images-idx3-ubyte.gz",
             std::vector<uint8_t>(good.begin(),
                                  good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)));
  const std::string cut = load_error();
  expect_contains(cut, "train-images-idx3-ubyte.gz");
  expect_contains(cut, "truncated");
}

TEST_F(FashionMNISTFiles, RejectsBadLabelsAndCountMismatch) {
  write_valid_train_set();
  write_idx("train-labels-idx1-ubyte", 1, {2}, {3, 10});
  expect_contains(load_error(), "holds label 10");

  write_idx("train-labels-idx1-ubyte", 1, {3}, {1, 2, 3});
  expect_contains(load_error(), "holds 2 images");
}

}  // namespace
}  // namespace tdist::torch::fashion_mnist_test
