// FashionMNIST (fashion_mnist.h): IDX files through zlib (gzipped or plain), inflated straight
// into the image tensor and normalized through a 256-entry table.
#include "tdist/torch/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tdist/error.h"

namespace tdist::torch {
namespace {

constexpr const char* kInstallHint =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or pass --data DIR";

// IDX type code of unsigned bytes, the only element type Fashion-MNIST uses.
constexpr uint8_t kUnsignedByte = 0x08;
// Larger headers can only come from a corrupt file; refused before allocating.
constexpr uint64_t kMaxElements = uint64_t{1} << 31;

// `root`/`name`.gz if present, else the plain `root`/`name`.
std::string find_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    TDIST_THROW(Error, "Fashion-MNIST directory '", root, "' ",
                fs::exists(root, ec) ? "is not a directory" : "does not exist", "; ", kInstallHint);
  }
  for (const std::string& candidate : {name + ".gz", name}) {
    const fs::path path = fs::path(root) / candidate;
    if (fs::is_regular_file(path, ec)) return path.string();
  }
  TDIST_THROW(Error, "Fashion-MNIST file '", (fs::path(root) / name).string(),
              ".gz' (or uncompressed '", name, "') not found; ", kInstallHint);
}

// One IDX file, gzipped or plain (zlib reads plain files unchanged).
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)) {
    file_.reset(gzopen(path_.c_str(), "rb"));
    TDIST_CHECK(file_ != nullptr, Error, "cannot open Fashion-MNIST file '", path_,
                "': ", std::strerror(errno));
    // A large buffer: the 26 MB training images inflate noticeably faster.
    gzbuffer(file_.get(), 1U << 20);
  }

  // Reads the header of an unsigned-byte IDX file of `ndims` dimensions; returns them.
  std::vector<uint64_t> header(uint8_t ndims, const char* kind) {
    std::array<uint8_t, 4> magic{};
    read(magic.data(), magic.size(), "header");
    const uint32_t expected = (uint32_t{kUnsignedByte} << 8) | ndims;
    const uint32_t found = be32(magic.data());
    TDIST_CHECK(found == expected, Error, "Fashion-MNIST file '", path_, "' is not an IDX ", kind,
                " file: magic number 0x", std::hex, found, ", expected 0x", expected);
    std::vector<uint64_t> dims(ndims);
    uint64_t elements = 1;
    for (uint64_t& d : dims) {
      std::array<uint8_t, 4> bytes{};
      read(bytes.data(), bytes.size(), "header");
      d = be32(bytes.data());
      TDIST_CHECK(d == 0 || elements <= kMaxElements / d, Error, "Fashion-MNIST file '", path_,
                  "' declares implausible dimensions (over ", kMaxElements, " elements)");
      elements *= d;
    }
    return dims;
  }

  // Reads exactly `n` bytes of `what` into `dst`.
  void read(void* dst, uint64_t n, const char* what) {
    auto* out = static_cast<uint8_t*>(dst);
    uint64_t done = 0;
    while (done < n) {
      const auto chunk = static_cast<unsigned>(std::min<uint64_t>(n - done, INT_MAX));
      const int got = gzread(file_.get(), out + done, chunk);
      if (got <= 0) {
        int code = Z_OK;
        const char* message = gzerror(file_.get(), &code);
        TDIST_CHECK(code == Z_OK, Error, "Fashion-MNIST file '", path_,
                    "' is corrupt or truncated while reading its ", what, " (zlib: ", message, ")");
        TDIST_THROW(Error, "Fashion-MNIST file '", path_, "' is truncated: its ", what, " needs ",
                    n, " bytes, found ", done);
      }
      done += static_cast<uint64_t>(got);
    }
  }

  // Checks that nothing follows the data; reading on also verifies the gzip checksum.
  void expect_end() {
    uint8_t extra = 0;
    const int got = gzread(file_.get(), &extra, 1);
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    TDIST_CHECK(got >= 0 && code == Z_OK, Error, "Fashion-MNIST file '", path_,
                "' is corrupt (zlib: ", message, ")");
    TDIST_CHECK(got == 0, Error, "Fashion-MNIST file '", path_,
                "' has data past the items its header declares");
  }

 private:
  static uint32_t be32(const uint8_t* b) {
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }

  struct Closer {
    void operator()(gzFile f) const { gzclose(f); }
  };
  std::string path_;
  std::unique_ptr<gzFile_s, Closer> file_;
};

// float32 [N, 1, rows, cols], normalized.
::torch::Tensor load_images(const std::string& path) {
  IdxReader reader(path);
  const std::vector<uint64_t> dims = reader.header(3, "images");
  const uint64_t count = dims[0] * dims[1] * dims[2];
  ::torch::Tensor images =
      ::torch::empty({static_cast<int64_t>(dims[0]), 1, static_cast<int64_t>(dims[1]),
                      static_cast<int64_t>(dims[2])},
                     ::torch::kFloat32);
  // Inflate the pixels into the last quarter of the float buffer, then widen them in place
  // from the front: float i (bytes 4i..4i+3) never reaches a pixel not yet read
  // (byte 3 * count + j, j > i), so no second buffer is needed.
  auto* floats = images.data_ptr<float>();
  auto* bytes = reinterpret_cast<uint8_t*>(floats);
  const uint8_t* pixels = bytes + 3 * count;
  reader.read(bytes + 3 * count, count, "pixels");
  reader.expect_end();
  std::array<float, 256> normalized{};
  for (size_t v = 0; v < normalized.size(); ++v) {
    normalized[v] = static_cast<float>((static_cast<double>(v) / 255.0 - FashionMNIST::kMean) /
                                       FashionMNIST::kStd);
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t v = pixels[i];
    floats[i] = normalized[v];
  }
  return images;
}

// int64 [N], checked to be class numbers.
::torch::Tensor load_labels(const std::string& path) {
  IdxReader reader(path);
  const std::vector<uint64_t> dims = reader.header(1, "labels");
  ::torch::Tensor raw = ::torch::empty({static_cast<int64_t>(dims[0])}, ::torch::kUInt8);
  reader.read(raw.data_ptr<uint8_t>(), dims[0], "labels");
  reader.expect_end();
  if (dims[0] > 0) {
    const int64_t max_label = raw.max().item<int64_t>();
    TDIST_CHECK(max_label < FashionMNIST::kNumClasses, Error, "Fashion-MNIST file '", path,
                "' holds label ", max_label, "; Fashion-MNIST has classes 0..",
                FashionMNIST::kNumClasses - 1);
  }
  return raw.to(::torch::kInt64);
}

}  // namespace

FashionMNIST::FashionMNIST(const std::string& root, Mode mode) : mode_(mode) {
  const std::string prefix = mode == Mode::kTrain ? "train" : "t10k";
  const std::string images_path = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_file(root, prefix + "-labels-idx1-ubyte");
  images_ = load_images(images_path);
  targets_ = load_labels(labels_path);
  TDIST_CHECK(images_.size(0) == targets_.size(0), Error, "Fashion-MNIST files disagree: '",
              images_path, "' holds ", images_.size(0), " images, '", labels_path, "' ",
              targets_.size(0), " labels");
}

::torch::data::Example<> FashionMNIST::get(size_t index) {
  TDIST_CHECK(index < static_cast<size_t>(targets_.size(0)), InvalidArgument,
              "FashionMNIST::get: index ", index, " is out of range for ", targets_.size(0),
              " samples");
  const auto i = static_cast<int64_t>(index);
  return {images_[i], targets_[i]};
}

::torch::optional<size_t> FashionMNIST::size() const {
  return static_cast<size_t>(targets_.size(0));
}

}  // namespace tdist::torch
