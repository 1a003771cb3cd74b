// checkpoint::load (checkpoint.h): every rank reads the headers, plans and checks; the
// ranks agree; then each reads the byte ranges of its rows straight into the state.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_files.h"
#include "checkpoint_state.h"
#include "safetensors.h"
#include "tdist/bytes_collectives.h"
#include "tdist/distributed.h"
#include "tdist/error.h"

namespace tdist::checkpoint {
namespace {

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// One saved piece of a tensor: a box of the global tensor in one file.
struct Chunk {
  std::string file;  // path
  std::vector<int64_t> offsets, shape;
  uint64_t begin = 0;
};

struct SavedTensor {
  c10::ScalarType dtype = c10::kFloat;
  std::vector<int64_t> shape;  // global
  std::vector<Chunk> chunks;
};

// What a checkpoint folder holds: its index (when tdist wrote it) and every file's header.
class Catalog {
 public:
  explicit Catalog(std::string path) : path_(std::move(path)) {
    TDIST_CHECK(files::exists(path_), InvalidArgument, "checkpoint: ", path_, " does not exist");
    std::vector<std::string> names;
    const std::string index_path = path_ + "/" + files::kIndex;
    const bool indexed = files::exists(index_path);
    if (indexed) {
      const files::Index index = files::parse_index(files::read_text(index_path), index_path);
      step_ = index.step;
      values_ = index.values;
      for (const auto& [name, bytes] : index.files) {
        const std::string file = path_ + "/" + name;
        TDIST_CHECK(files::exists(file), InvalidArgument, "checkpoint: ", file,
                    " is missing (the index lists it)");
        names.push_back(name);
        expected_size_[file] = bytes;
      }
      for (const auto& [name, t] : index.tensors) {
        SavedTensor& s = tensors_[name];
        TDIST_CHECK(safetensors::dtype_from_name(t.dtype, &s.dtype), InvalidArgument,
                    "checkpoint: ", index_path, ": '", name, "' has an unknown dtype ", t.dtype);
        s.shape = t.shape;
      }
    } else {
      for (const std::string& name : files::list_dir(path_)) {
        if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
          names.push_back(name);
        }
      }
      TDIST_CHECK(!names.empty(), InvalidArgument, "checkpoint: ", path_,
                  " holds no checkpoint (no ", files::kIndex, ", no .safetensors files)");
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) add_file(path_ + "/" + name, indexed);
  }
  ~Catalog() {
    for (const auto& [path, fd] : fds_) ::close(fd);
  }
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  int64_t step() const { return step_; }
  const std::string& path() const { return path_; }
  const SavedTensor* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() || (it->second.chunks.empty() && product(it->second.shape) > 0)
               ? nullptr
               : &it->second;
  }
  const Value* value(const std::string& name) const {
    for (const auto& [k, v] : values_) {
      if (k == name) return &v;
    }
    return nullptr;
  }

  // Rows [first, first + count) of `name` (whole rows; a scalar has one), as a new tensor.
  ::torch::Tensor read(const std::string& name, int64_t first, int64_t count) {
    const SavedTensor* s = find(name);
    TDIST_CHECK(s != nullptr, InvalidArgument, "checkpoint: ", path_, " holds no tensor '", name,
                "'");
    ::torch::Tensor out =
        ::torch::empty(rows_shape(*s, count), ::torch::TensorOptions().dtype(s->dtype));
    read_rows(name, first, count, &out);
    return out;
  }

  // The same rows into `out` (contiguous, on the CPU, of the saved dtype, shaped as the
  // rows); with `out` null only the check that the saved pieces cover them.
  void read_rows(const std::string& name, int64_t first, int64_t count, ::torch::Tensor* out) {
    const SavedTensor* s = find(name);
    const bool scalar = s->shape.empty();
    const int64_t elem = static_cast<int64_t>(c10::elementSize(s->dtype));
    int64_t covered = 0;
    for (const Chunk& c : s->chunks) {
      const int64_t c0 = c.offsets.empty() ? 0 : c.offsets[0];
      const int64_t crows = c.shape.empty() ? 1 : c.shape[0];
      const int64_t lo = std::max(first, c0), hi = std::min(first + count, c0 + crows);
      if (lo >= hi) continue;
      const int64_t row_numel = product(c.shape, 1);
      covered += (hi - lo) * row_numel;
      if (out == nullptr) continue;
      const uint64_t begin = c.begin + static_cast<uint64_t>((lo - c0) * row_numel * elem);
      const uint64_t end = begin + static_cast<uint64_t>((hi - lo) * row_numel * elem);
      // A chunk of whole rows goes straight into `out`; one cut along other dims through a
      // buffer of its rows.
      bool whole_rows = true;
      for (size_t d = 1; d < c.shape.size(); ++d) {
        whole_rows = whole_rows && c.offsets[d] == 0 && c.shape[d] == s->shape[d];
      }
      ::torch::Tensor dst = scalar ? *out : out->narrow(0, lo - first, hi - lo);
      if (whole_rows) {
        safetensors::read_range(fd(c.file), c.file, begin, end, dst.data_ptr());
      } else {
        std::vector<int64_t> piece = c.shape;
        piece[0] = hi - lo;
        ::torch::Tensor buf = ::torch::empty(piece, out->options());
        safetensors::read_range(fd(c.file), c.file, begin, end, buf.data_ptr());
        for (size_t d = 1; d < c.shape.size(); ++d) {
          dst = dst.narrow(static_cast<int64_t>(d), c.offsets[d], c.shape[d]);
        }
        dst.copy_(buf);
      }
    }
    const int64_t want = scalar ? 1 : count * product(s->shape, 1);
    TDIST_CHECK(covered == want, InvalidArgument, "checkpoint: ", path_, ": the saved pieces of '",
                name, "' cover ", covered, " of the ", want, " elements of rows ", first, " to ",
                first + count, " (a file is missing, or the pieces overlap)");
  }

  static std::vector<int64_t> rows_shape(const SavedTensor& s, int64_t count) {
    std::vector<int64_t> shape = s.shape;
    if (!shape.empty()) shape[0] = count;
    return shape;
  }

 private:
  void add_file(const std::string& file, bool indexed) {
    const safetensors::Header h = safetensors::read_header(file);
    if (auto it = expected_size_.find(file); it != expected_size_.end()) {
      TDIST_CHECK(h.file_size == it->second, InvalidArgument, "checkpoint: ", file, " is ",
                  h.file_size, " bytes where the index says ", it->second,
                  " (truncated or replaced)");
    }
    for (const safetensors::Item& item : h.items) {
      SavedTensor& s = tensors_[item.name];
      if (s.chunks.empty() && !indexed) s.dtype = item.dtype;
      TDIST_CHECK(item.dtype == s.dtype, InvalidArgument, "checkpoint: ", file, ": '", item.name,
                  "' is ", c10::toString(item.dtype), " where other pieces are ",
                  c10::toString(s.dtype));
      bool same = false;  // the same piece in two files (a replicated tensor saved twice)
      for (const Chunk& c : s.chunks) {
        same = same || (c.offsets == item.offsets && c.shape == item.shape);
      }
      if (same) continue;
      s.chunks.push_back({file, item.offsets, item.shape, item.begin});
      if (!indexed) {
        // Without an index the global shape is what the pieces reach (PyTorch's reader).
        if (s.shape.size() != item.shape.size()) s.shape.assign(item.shape.size(), 0);
        for (size_t d = 0; d < item.shape.size(); ++d) {
          s.shape[d] = std::max(s.shape[d], item.offsets[d] + item.shape[d]);
        }
      } else {
        TDIST_CHECK(item.shape.size() == s.shape.size(), InvalidArgument, "checkpoint: ", file,
                    ": '", item.name, "' has a piece of ", item.shape.size(),
                    " dimensions in a tensor of ", s.shape.size());
      }
    }
  }
  int fd(const std::string& file) {
    auto it = fds_.find(file);
    if (it != fds_.end()) return it->second;
    const int f = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    TDIST_CHECK(f >= 0, InvalidArgument, "checkpoint: cannot open ", file);
    fds_[file] = f;
    return f;
  }

  std::string path_;
  int64_t step_ = -1;
  std::vector<std::pair<std::string, Value>> values_;
  std::map<std::string, uint64_t> expected_size_;
  std::map<std::string, SavedTensor> tensors_;
  std::map<std::string, int> fds_;
};

// Checks target `t` against the checkpoint (present, dtype, global shape, its rows covered).
void check_target(Catalog& cat, const TensorEntry& t) {
  const SavedTensor* s = cat.find(t.name);
  TDIST_CHECK(s != nullptr, InvalidArgument, "checkpoint: ", cat.path(), " holds no tensor '",
              t.name, "' (a checkpoint of another model, or saved without it)");
  TDIST_CHECK(s->dtype == t.data.scalar_type(), InvalidArgument, "checkpoint: '", t.name,
              "' is saved as ", c10::toString(s->dtype), " but the state's is ",
              c10::toString(t.data.scalar_type()), " (in ", cat.path(), ")");
  TDIST_CHECK(s->shape == t.global_shape, InvalidArgument, "checkpoint: '", t.name,
              "' is saved with shape ", c10::IntArrayRef(s->shape), " but the state's is ",
              c10::IntArrayRef(t.global_shape), " (in ", cat.path(), ")");
  const RowRange rows = rows_of(t);
  if (rows.count > 0 && t.data.numel() > 0) cat.read_rows(t.name, rows.first, rows.count, nullptr);
}

// Reads target `t`'s rows into it: straight into its memory when it is a contiguous CPU
// tensor, else through a buffer.
void fill_target(Catalog& cat, const TensorEntry& t) {
  const RowRange rows = rows_of(t);
  if (rows.count == 0 || t.data.numel() == 0) return;
  const SavedTensor* s = cat.find(t.name);
  if (t.data.device().is_cpu() && t.data.is_contiguous()) {
    ::torch::Tensor view = t.data.view(Catalog::rows_shape(*s, rows.count));
    cat.read_rows(t.name, rows.first, rows.count, &view);
  } else {
    t.data.copy_(cat.read(t.name, rows.first, rows.count).view(t.data.sizes()));
  }
}

// Raises on every rank when any rank's `error` is not empty (the first such rank's).
void agree(const std::shared_ptr<ProcessGroup>& group, int world, std::string error,
           const std::string& path, const char* after) {
  if (error.rfind("checkpoint: ", 0) == 0) error.erase(0, 12);  // said once, in front
  if (group && world > 1) {
    const std::vector<std::string> all = all_gather_bytes(*group, error);
    for (size_t r = 0; r < all.size(); ++r) {
      TDIST_CHECK(all[r].empty(), InvalidArgument, "checkpoint: loading ", path, " failed on rank ",
                  r, after, ": ", all[r]);
    }
  }
  TDIST_CHECK(error.empty(), InvalidArgument, "checkpoint: loading ", path, " failed", after, ": ",
              error);
}

}  // namespace

int64_t load(const std::string& path, const State& state, std::shared_ptr<ProcessGroup> group) {
  if (!group && is_initialized()) group = get_default_group();
  const int rank = group ? group->rank() : 0;
  const int world = group ? group->size() : 1;
  std::unique_ptr<Catalog> cat;
  State::LoadTarget target;
  std::string error;
  try {
    cat = std::make_unique<Catalog>(path);
    State::Saved saved;
    saved.has = [&](const std::string& name) { return cat->find(name) != nullptr; };
    saved.read = [&](const std::string& name) {
      const SavedTensor* s = cat->find(name);
      TDIST_CHECK(s != nullptr, InvalidArgument, "checkpoint: ", path, " holds no tensor '", name,
                  "'");
      return cat->read(name, 0, s->shape.empty() ? 1 : s->shape[0]);
    };
    saved.value = [&](const std::string& name) { return cat->value(name); };
    target = state.load_target(rank, world, saved);
    for (const TensorEntry& t : target.tensors) check_target(*cat, t);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every check passed on every rank, or every rank raises with nothing overwritten.
  agree(group, world, error, path, "");
  ::torch::NoGradGuard no_grad;
  try {
    for (const TensorEntry& t : target.tensors) fill_target(*cat, t);
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Only an I/O error can fail here (the sizes were checked): the state is then partly
  // loaded, and every rank says so.
  agree(group, world, error, path, " while reading (the state is partly loaded: load again)");
  for (const auto& apply : target.apply) apply();
  return cat->step();
}

}  // namespace tdist::checkpoint
