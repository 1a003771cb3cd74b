// fully_shard's cross-rank check (shard_check.h): the headers, their exchange, and the
// DesyncError that names both sides.
//
// Header words. 0: a magic number with the phase in its low byte. Wrap: 1 this rank's
// proposed id, 2 the number of own parameters, 3 a hash of their names, dtypes and shapes,
// 4 the number of units inside, 5 a hash of their ids and paths, 6..10 the first
// parameter's shape. Forward/backward: 1 the unit's id, 2 its root's id, 3 the root's call
// number, 4 touched, 5 the number of Tensor inputs, 6 a hash of their dtypes and shapes,
// 7..11 and 12..15 the first two inputs' shapes. A shape: a word of ndim | dtype << 8 |
// 1 << 16, then its first dims.
#include "shard_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <string_view>

#include "tdist/bytes_collectives.h"
#include "tdist/device.h"
#include "tdist/error.h"
#include "tdist/torch/collectives.h"

namespace tdist::torch::shard_check {
namespace {

constexpr int64_t kMagic = int64_t{0x7d5c4b} << 8;
constexpr int64_t kPresent = int64_t{1} << 16;
constexpr size_t kListed = 4;  // parameters a wrap's description lists

// FNV-1a over int64 words and strings.
struct Hash {
  uint64_t h = 1469598103934665603ULL;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  }
  void add(std::string_view s) {
    add(s.size());
    for (char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ULL;
    }
  }
  void add(const ::torch::Tensor& t) {
    add(static_cast<uint64_t>(t.scalar_type()));
    add(static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.sizes()) add(static_cast<uint64_t>(d));
  }
  int64_t value() const { return static_cast<int64_t>(h); }
};

// A shape in words [at, at + n): the meta word, then the first n - 1 dims.
void put_shape(Header& h, size_t at, size_t n, const ::torch::Tensor& t) {
  h[at] = t.dim() | (static_cast<int64_t>(t.scalar_type()) << 8) | kPresent;
  for (size_t d = 0; d + 1 < n && static_cast<int64_t>(d) < t.dim(); ++d) {
    h[at + 1 + d] = t.size(static_cast<int64_t>(d));
  }
}

std::string show_shape(const Header& h, size_t at, size_t n, bool with_dtype) {
  const int64_t meta = h[at];
  if ((meta & kPresent) == 0) return "?";
  const int64_t ndim = meta & 0xff;
  std::string out = "[";
  for (int64_t d = 0; d < ndim; ++d) {
    if (d > 0) out += ", ";
    if (static_cast<size_t>(d) + 1 >= n) {
      out += "...";
      break;
    }
    out += std::to_string(h[at + 1 + static_cast<size_t>(d)]);
  }
  out += "]";
  if (with_dtype) {
    out += " ";
    out += c10::toString(static_cast<c10::ScalarType>((meta >> 8) & 0xff));
  }
  return out;
}

Phase phase_of(const Header& h) { return static_cast<Phase>(h[0] & 0xff); }
bool is_ours(const Header& h) { return (h[0] & ~int64_t{0xff}) == kMagic; }

// The words that must agree: all but a wrap's proposed id and a run's `touched`.
bool agree(const Header& a, const Header& b) {
  for (size_t i = 0; i < kWords; ++i) {
    const bool ignored =
        (i == 1 && phase_of(a) == Phase::kWrap) || (i == 4 && phase_of(a) != Phase::kWrap);
    if (!ignored && a[i] != b[i]) return false;
  }
  return true;
}

std::string describe_full(const Header& h, const UnitName& name, bool with_call, bool with_dtype) {
  if (!is_ours(h)) return "is in another collective (not fully_shard's)";
  if (phase_of(h) == Phase::kWrap) {
    std::string out =
        ::tdist::detail::str_cat("wraps a module (fully_shard) of ", h[2], " parameters");
    if (h[2] > 0) out += " (the first " + show_shape(h, 6, 5, with_dtype) + ")";
    return out + ::tdist::detail::str_cat(" with ", h[4], " units inside");
  }
  std::string out = "runs " + name(h[1]);
  out += phase_of(h) == Phase::kForward ? " forward" : " backward";
  if (with_call) {
    out += ::tdist::detail::str_cat(" (call ", h[3], " of ", h[2] == h[1] ? "it" : name(h[2]),
                                    " as the root)");
  }
  if (phase_of(h) != Phase::kForward) return out;
  const int64_t inputs = h[5];
  if (inputs == 0) return out + " with no Tensor input";
  out += inputs == 1 ? " with input " : " with inputs ";
  out += show_shape(h, 7, 5, with_dtype);
  if (inputs > 1) out += ", " + show_shape(h, 12, 4, with_dtype);
  if (inputs > 2) out += ::tdist::detail::str_cat(", ... (", inputs, " in all)");
  return out;
}

}  // namespace

Header wrap_header(const WrapInfo& info) {
  Header h{};
  h[0] = kMagic | static_cast<int64_t>(Phase::kWrap);
  h[1] = info.proposed_id;
  h[2] = static_cast<int64_t>(info.params.size());
  Hash params;
  for (size_t i = 0; i < info.params.size(); ++i) {
    params.add(info.param_names[i]);
    params.add(info.params[i]);
  }
  h[3] = params.value();
  h[4] = static_cast<int64_t>(info.inner.size());
  Hash inner;
  for (const auto& [id, path] : info.inner) {
    inner.add(static_cast<uint64_t>(id));
    inner.add(path);
  }
  h[5] = inner.value();
  if (!info.params.empty()) put_shape(h, 6, 5, info.params[0]);
  return h;
}

Header run_header(const RunInfo& info) {
  Header h{};
  h[0] = kMagic | static_cast<int64_t>(info.phase);
  h[1] = info.unit;
  h[2] = info.root;
  h[3] = info.call;
  h[4] = info.touched;
  if (info.inputs == nullptr) return h;
  const std::vector<::torch::Tensor>& inputs = *info.inputs;
  h[5] = static_cast<int64_t>(inputs.size());
  Hash shapes;
  for (const ::torch::Tensor& t : inputs) shapes.add(t);
  h[6] = shapes.value();
  if (!inputs.empty()) put_shape(h, 7, 5, inputs[0]);
  if (inputs.size() > 1) put_shape(h, 12, 4, inputs[1]);
  return h;
}

std::vector<Header> exchange(ProcessGroup& group, const Header& mine, c10::Device device) {
  const auto world = static_cast<size_t>(group.size());
  std::vector<Header> all(world);
  if ((group.memory_kinds() & memory_bit(MemoryKind::kHost)) != 0) {
    group.all_gather(mine.data(), all.data(), kWords, DType::kI64)->wait();
    return all;
  }
  const auto i64 = ::torch::TensorOptions().dtype(::torch::kLong);
  const ::torch::Tensor input =
      ::torch::tensor(std::vector<int64_t>(mine.begin(), mine.end()), i64).to(device);
  ::torch::Tensor output =
      ::torch::empty({static_cast<int64_t>(world * kWords)}, i64.device(device));
  all_gather_into_tensor(output, input, group.shared_from_this());
  const ::torch::Tensor host = output.cpu();
  std::copy_n(host.data_ptr<int64_t>(), world * kWords, all[0].data());
  return all;
}

int first_difference(const std::vector<Header>& all) {
  for (size_t r = 1; r < all.size(); ++r) {
    if (!agree(all[0], all[r])) return static_cast<int>(r);
  }
  return -1;
}

std::string describe(const Header& h, const UnitName& name, bool with_call) {
  return describe_full(h, name, with_call, /*with_dtype=*/false);
}

std::string describe_wrap(const WrapInfo& info) {
  std::string out = "a " + info.module;
  if (!info.inner.empty()) {
    out += " with the units ";
    for (size_t i = 0; i < info.inner.size(); ++i) {
      out += (i > 0 ? ", '" : "'") + info.inner[i].second + "'";
    }
    out += " inside (in wrap order) and";
  } else {
    out += " with";
  }
  if (info.params.empty()) return out + " no parameters of its own";
  out += " parameters ";
  for (size_t i = 0; i < info.params.size() && i < kListed; ++i) {
    out += ::tdist::detail::str_cat(i > 0 ? ", '" : "'", info.param_names[i], "' ",
                                    info.params[i].sizes());
  }
  if (info.params.size() > kListed) {
    out += ::tdist::detail::str_cat(", ... (", info.params.size(), " in all)");
  }
  return out;
}

void throw_desync(ProcessGroup& group, const std::vector<Header>& all, int r, const UnitName& name,
                  const WrapInfo* wrap) {
  const Header& a = all[0];
  const Header& b = all[static_cast<size_t>(r)];
  const bool all_wrap = std::all_of(all.begin(), all.end(), [](const Header& h) {
    return is_ours(h) && phase_of(h) == Phase::kWrap;
  });
  if (all_wrap && wrap != nullptr && (group.memory_kinds() & memory_bit(MemoryKind::kHost)) != 0) {
    const std::vector<std::string> texts = all_gather_bytes(group, describe_wrap(*wrap));
    TDIST_THROW(DesyncError,
                "fully_shard: the ranks' wrapping is out of step (every rank must call "
                "fully_shard on the same modules of the same model, in the same order): rank 0 "
                "wraps ",
                texts[0], " where rank ", r, " wraps ", texts[static_cast<size_t>(r)]);
  }
  const bool runs =
      is_ours(a) && is_ours(b) && phase_of(a) != Phase::kWrap && phase_of(b) != Phase::kWrap;
  const bool calls = runs && (a[2] != b[2] || a[3] != b[3]);
  std::string da = describe_full(a, name, calls, false);
  std::string db = describe_full(b, name, calls, false);
  std::string note;
  if (da == db) {  // dtypes, or dims past those in the header
    da = describe_full(a, name, calls, true);
    db = describe_full(b, name, calls, true);
    if (da == db) note = " (their inputs' shapes or dtypes differ past those shown)";
  }
  TDIST_THROW(DesyncError,
              "fully_shard: the ranks are out of step (every rank must wrap and call the same "
              "units, in the same order, with inputs of the same shapes): rank 0 ",
              da, " where rank ", r, " ", db, note);
}

}  // namespace tdist::torch::shard_check
