#include "ddp_sync.h"

#include <algorithm>
#include <exception>
#include <map>
#include <numeric>

#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"
#include "tdist/torch/types.h"

namespace tdist::torch {
namespace {

constexpr size_t kMaxDifferences = 5;
constexpr size_t kBroadcastChunkBytes = size_t{32} << 20;

struct Shape {
  int64_t dtype = 0;
  std::vector<int64_t> dims;
  bool operator==(const Shape&) const = default;
};

// [count, then per tensor: dtype, ndim, dims...]
std::vector<int64_t> signature(const std::vector<NamedTensor>& tensors) {
  std::vector<int64_t> out{static_cast<int64_t>(tensors.size())};
  for (const NamedTensor& t : tensors) {
    out.push_back(static_cast<int64_t>(t.tensor.scalar_type()));
    out.push_back(t.tensor.dim());
    for (int64_t d : t.tensor.sizes()) out.push_back(d);
  }
  return out;
}

std::vector<Shape> parse_signature(const int64_t* p, size_t len) {
  std::vector<Shape> shapes;
  const int64_t* end = p + len;
  const int64_t count = p < end ? *p++ : 0;
  for (int64_t i = 0; i < count && end - p >= 2; ++i) {
    Shape s;
    s.dtype = *p++;
    const int64_t ndim = *p++;
    for (int64_t d = 0; d < ndim && p < end; ++d) s.dims.push_back(*p++);
    shapes.push_back(std::move(s));
  }
  return shapes;
}

std::string show(const Shape& s) {
  std::string out = c10::toString(static_cast<c10::ScalarType>(s.dtype));
  out += " [";
  for (size_t d = 0; d < s.dims.size(); ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(s.dims[d]);
  }
  return out + "]";
}

// Broadcasts tensors of one dtype that together fit a chunk: in place for one contiguous
// tensor, else packed into a flat buffer. Returns the packed buffer (undefined if none)
// for the caller to unpack once the Work completed.
// The broadcast of `t` (contiguous): the group's own call on a CPU tensor, the tensor
// collective (staging or device pointers) on a CUDA one.
WorkPtr broadcast_flat(ProcessGroup& group, const ::torch::Tensor& t, int root) {
  if (t.is_cuda()) return broadcast_async(t, root, group.shared_from_this());
  return group.broadcast(t.data_ptr(), static_cast<size_t>(t.numel()), to_dtype(t.scalar_type()),
                         root);
}

::torch::Tensor start_broadcast(ProcessGroup& group, const std::vector<::torch::Tensor>& run,
                                int root, std::vector<WorkPtr>& works) {
  if (run.size() == 1 && run.front().is_contiguous()) {
    works.push_back(broadcast_flat(group, run.front(), root));
    return {};
  }
  std::vector<::torch::Tensor> flat;
  for (const ::torch::Tensor& t : run) flat.push_back(t.reshape(-1));
  ::torch::Tensor packed = ::torch::cat(flat);
  works.push_back(broadcast_flat(group, packed, root));
  return packed;
}

// Every rank's `mine`, back to back (counts[r] values from rank r): the group's own calls
// on host memory, or, for a group that takes device memory only, tensor collectives on
// `device`.
std::vector<int64_t> gather_signatures(ProcessGroup& group, const std::vector<int64_t>& mine,
                                       std::vector<size_t>& counts, c10::Device device) {
  const auto world = static_cast<size_t>(group.size());
  const auto length = static_cast<int64_t>(mine.size());
  counts.assign(world, 0);
  if ((group.memory_kinds() & memory_bit(MemoryKind::kHost)) != 0) {
    std::vector<int64_t> lengths(world);
    group.all_gather(&length, lengths.data(), 1, DType::kI64)->wait();
    for (size_t r = 0; r < world; ++r) counts[r] = static_cast<size_t>(lengths[r]);
    std::vector<int64_t> all(std::accumulate(counts.begin(), counts.end(), size_t{0}));
    group.all_gatherv(mine.data(), mine.size(), all.data(), counts, DType::kI64)->wait();
    return all;
  }
  const auto pg = group.shared_from_this();
  const auto i64 = ::torch::TensorOptions().dtype(::torch::kLong);
  ::torch::Tensor lengths = ::torch::empty({static_cast<int64_t>(world)}, i64.device(device));
  all_gather_into_tensor(lengths, ::torch::tensor({length}, i64).to(device), pg);
  const ::torch::Tensor host_lengths = lengths.cpu();
  int64_t longest = 0;
  for (size_t r = 0; r < world; ++r) {
    counts[r] = static_cast<size_t>(host_lengths[static_cast<int64_t>(r)].item<int64_t>());
    longest = std::max(longest, static_cast<int64_t>(counts[r]));
  }
  ::torch::Tensor padded = ::torch::zeros({longest}, i64);
  if (length > 0) {
    padded.narrow(0, 0, length).copy_(::torch::tensor(mine, i64));
  }
  ::torch::Tensor gathered =
      ::torch::empty({static_cast<int64_t>(world) * longest}, i64.device(device));
  all_gather_into_tensor(gathered, padded.to(device), pg);
  const ::torch::Tensor host = gathered.cpu();
  std::vector<int64_t> all;
  for (size_t r = 0; r < world; ++r) {
    const int64_t* block = host.data_ptr<int64_t>() + static_cast<int64_t>(r) * longest;
    all.insert(all.end(), block, block + counts[r]);
  }
  return all;
}

void unpack(const ::torch::Tensor& packed, const std::vector<::torch::Tensor>& run) {
  int64_t offset = 0;
  for (const ::torch::Tensor& t : run) {
    t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

bool is_communication_error(const Error& e) {
  return dynamic_cast<const TimeoutError*>(&e) != nullptr ||
         dynamic_cast<const PeerError*>(&e) != nullptr ||
         dynamic_cast<const DesyncError*>(&e) != nullptr;
}

// Rethrows `error` as the same tdist type, with `context` in front of its message.
void rethrow_with_context(std::exception_ptr error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    throw TimeoutError(context + e.what());
  } catch (const PeerError& e) {
    throw PeerError(context + e.what());
  } catch (const DesyncError& e) {
    throw DesyncError(context + e.what());
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(context + e.what());
  } catch (const Error& e) {
    throw Error(context + e.what());
  }
}

void all_reduce_values(ProcessGroup& group, std::vector<int64_t>& values, ReduceOpKind op,
                       c10::Device device) {
  if ((group.memory_kinds() & memory_bit(MemoryKind::kHost)) != 0) {
    group.all_reduce(values.data(), values.size(), DType::kI64, op)->wait();
    return;
  }
  const auto i64 = ::torch::TensorOptions().dtype(::torch::kLong);
  ::torch::Tensor t = ::torch::tensor(values, i64).to(device);
  all_reduce(t, op, group.shared_from_this());
  const ::torch::Tensor host = t.cpu();
  std::copy_n(host.data_ptr<int64_t>(), values.size(), values.begin());
}

void verify_same_shapes(ProcessGroup& group, const std::vector<NamedTensor>& tensors,
                        std::string_view subject) {
  const auto world = static_cast<size_t>(group.size());
  if (world == 1) return;
  std::vector<int64_t> mine = signature(tensors);
  std::vector<size_t> counts;
  const std::vector<int64_t> all = gather_signatures(
      group, mine, counts, tensors.empty() ? c10::Device(c10::kCPU) : tensors[0].tensor.device());

  std::vector<std::vector<Shape>> shapes;
  size_t offset = 0;
  for (size_t r = 0; r < world; ++r) {
    shapes.push_back(parse_signature(all.data() + offset, counts[r]));
    offset += counts[r];
  }
  std::vector<std::string> differences;
  for (size_t r = 1; r < world && differences.size() < kMaxDifferences; ++r) {
    const size_t n = std::max(shapes[0].size(), shapes[r].size());
    for (size_t i = 0; i < n && differences.size() < kMaxDifferences; ++i) {
      const std::string name =
          i < tensors.size() ? "'" + tensors[i].name + "'" : "tensor #" + std::to_string(i);
      const std::string at0 = i < shapes[0].size() ? show(shapes[0][i]) : "nothing";
      const std::string atr = i < shapes[r].size() ? show(shapes[r][i]) : "nothing";
      if (at0 == atr) continue;
      differences.push_back(
          ::tdist::detail::str_cat(name, ": rank 0 has ", at0, ", rank ", r, " has ", atr));
    }
  }
  if (differences.empty()) return;
  std::string list;
  for (const std::string& d : differences) list += (list.empty() ? "" : "; ") + d;
  TDIST_THROW(InvalidArgument, subject,
              " must have the same shapes and dtypes on every rank. First differences: ", list);
}

void broadcast_coalesced(ProcessGroup& group, const std::vector<::torch::Tensor>& tensors,
                         int root) {
  if (group.size() == 1 || tensors.empty()) return;
  // Runs of one dtype (in first-appearance order), each within a chunk.
  std::map<c10::ScalarType, std::vector<::torch::Tensor>> by_dtype;
  std::vector<c10::ScalarType> dtypes;
  for (const ::torch::Tensor& t : tensors) {
    auto [it, inserted] = by_dtype.try_emplace(t.scalar_type());
    if (inserted) dtypes.push_back(t.scalar_type());
    it->second.push_back(t);
  }
  std::vector<std::vector<::torch::Tensor>> runs;
  for (c10::ScalarType dtype : dtypes) {
    size_t bytes = kBroadcastChunkBytes;  // forces a new run for the first tensor
    for (const ::torch::Tensor& t : by_dtype[dtype]) {
      const size_t size = static_cast<size_t>(t.numel()) * t.element_size();
      if (bytes + size > kBroadcastChunkBytes) {
        runs.emplace_back();
        bytes = 0;
      }
      runs.back().push_back(t);
      bytes += size;
    }
  }
  ::torch::NoGradGuard no_grad;
  std::vector<WorkPtr> works;
  std::vector<::torch::Tensor> packed;
  for (const auto& run : runs) packed.push_back(start_broadcast(group, run, root, works));
  // Every Work ends before `packed` goes, even when one fails.
  std::exception_ptr error;
  for (const WorkPtr& w : works) {
    try {
      w->wait();
    } catch (...) {
      if (error == nullptr) error = std::current_exception();
    }
  }
  if (error != nullptr) std::rethrow_exception(error);
  if (group.rank() == root) return;
  for (size_t k = 0; k < runs.size(); ++k) {
    if (packed[k].defined()) unpack(packed[k], runs[k]);
  }
}

}  // namespace tdist::torch
