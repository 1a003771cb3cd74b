// Byte-string collectives over the public ProcessGroup API: the lengths first (one i64
// per rank), then the bytes (u8). Written once for std::string and Bytes.
#include "tdist/bytes_collectives.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>

#include "tdist/distributed.h"
#include "tdist/error.h"

namespace tdist {
namespace {

constexpr DType kLength = DType::kI64;
constexpr DType kByte = DType::kU8;

// The bytes of one input string.
struct View {
  const uint8_t* data;
  size_t size;
};

View view(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
View view(const Bytes& b) { return {b.data(), b.size()}; }

void check_root(const char* op, const ProcessGroup& pg, int root) {
  TDIST_CHECK(root >= 0 && root < pg.size(), InvalidArgument, op, ": root ", root,
              " is outside 0..", pg.size() - 1, " (group of ", pg.size(), ")");
}

// A length a peer announced, checked (a negative one means the ranks disagree).
size_t length_of(const char* op, int64_t length, int from) {
  TDIST_CHECK(length >= 0, DesyncError, op, ": rank ", from, " announced a length of ", length,
              " bytes (do all ranks call ", op, " with the same root?)");
  return static_cast<size_t>(length);
}

// Never null: some backends hand buffers straight to a library that may dislike null
// pointers even for empty transfers.
template <typename P>
P* or_dummy(P* p) {
  static uint8_t dummy = 0;
  return p != nullptr ? p : reinterpret_cast<P*>(&dummy);
}

template <typename T>
T make(const uint8_t* data, size_t size) {
  return T(data, data + size);
}

// Splits `flat` into the strings of `sizes`, back to back.
template <typename T>
std::vector<T> split(const uint8_t* flat, const std::vector<size_t>& sizes) {
  std::vector<T> out;
  out.reserve(sizes.size());
  size_t at = 0;
  for (size_t n : sizes) {
    out.push_back(make<T>(flat + at, n));
    at += n;
  }
  return out;
}

std::unique_ptr<uint8_t[]> buffer(size_t bytes) {
  return std::make_unique_for_overwrite<uint8_t[]>(bytes == 0 ? 1 : bytes);
}

template <typename T>
std::vector<T> all_gather_impl(ProcessGroup& pg, View mine) {
  const auto world = static_cast<size_t>(pg.size());
  int64_t my_length = static_cast<int64_t>(mine.size);
  std::vector<int64_t> lengths(world);
  pg.all_gather(&my_length, lengths.data(), 1, kLength)->wait();
  std::vector<size_t> sizes(world);
  for (size_t r = 0; r < world; ++r) {
    sizes[r] = length_of("all_gather_bytes", lengths[r], static_cast<int>(r));
  }
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  auto flat = buffer(total);
  if (total > 0) {  // every rank knows the total: all skip together
    pg.all_gatherv(or_dummy(mine.data), mine.size, flat.get(), sizes, kByte)->wait();
  }
  return split<T>(flat.get(), sizes);
}

template <typename T>
void broadcast_impl(ProcessGroup& pg, T& data, int root) {
  check_root("broadcast_bytes", pg, root);
  int64_t length = pg.rank() == root ? static_cast<int64_t>(data.size()) : 0;
  pg.broadcast(&length, 1, kLength, root)->wait();
  const size_t size = length_of("broadcast_bytes", length, root);
  if (pg.rank() != root) data.resize(size);
  if (size > 0) pg.broadcast(data.data(), size, kByte, root)->wait();
}

template <typename T>
std::vector<T> gather_impl(ProcessGroup& pg, View mine, int root) {
  check_root("gather_bytes", pg, root);
  const auto world = static_cast<size_t>(pg.size());
  const bool is_root = pg.rank() == root;
  int64_t my_length = static_cast<int64_t>(mine.size);
  std::vector<int64_t> lengths(is_root ? world : 0);
  pg.gather(&my_length, is_root ? lengths.data() : nullptr, 1, kLength, root)->wait();
  // The bytes: everyone sends only to the root, which receives from everyone. The other
  // ranks do not know whether any bytes move, so all take part every time.
  std::vector<size_t> send_counts(world, 0), recv_counts(world, 0);
  send_counts[static_cast<size_t>(root)] = mine.size;
  for (size_t r = 0; r < lengths.size(); ++r) {
    recv_counts[r] = length_of("gather_bytes", lengths[r], static_cast<int>(r));
  }
  const size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
  auto flat = buffer(total);
  pg.all_to_allv(or_dummy(mine.data), send_counts, flat.get(), recv_counts, kByte)->wait();
  if (!is_root) return {};
  return split<T>(flat.get(), recv_counts);
}

template <typename T>
T scatter_impl(ProcessGroup& pg, const std::vector<T>& pieces, int root) {
  check_root("scatter_bytes", pg, root);
  const auto world = static_cast<size_t>(pg.size());
  const bool is_root = pg.rank() == root;
  TDIST_CHECK(!is_root || pieces.size() == world, InvalidArgument, "scatter_bytes: the root has ",
              pieces.size(), " pieces for a group of ", world);
  std::vector<int64_t> lengths;
  std::vector<size_t> send_counts(world, 0), recv_counts(world, 0);
  if (is_root) {
    for (size_t r = 0; r < world; ++r) {
      lengths.push_back(static_cast<int64_t>(pieces[r].size()));
      send_counts[r] = pieces[r].size();
    }
  }
  int64_t my_length = 0;
  pg.scatter(is_root ? lengths.data() : nullptr, &my_length, 1, kLength, root)->wait();
  const size_t size = length_of("scatter_bytes", my_length, root);
  recv_counts[static_cast<size_t>(root)] = size;
  // Only the root's sends carry bytes; every rank takes part (none knows the others' sizes).
  const size_t total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  auto flat = buffer(total);
  size_t at = 0;
  for (size_t r = 0; r < world && is_root; ++r) {
    const View piece = view(pieces[r]);
    if (piece.size > 0) std::copy_n(piece.data, piece.size, flat.get() + at);
    at += piece.size;
  }
  T out(size, typename T::value_type{});
  pg.all_to_allv(flat.get(), send_counts, or_dummy(out.data()), recv_counts, kByte)->wait();
  return out;
}

}  // namespace

std::vector<std::string> all_gather_bytes(ProcessGroup& pg, std::string_view mine) {
  return all_gather_impl<std::string>(pg, view(mine));
}
std::vector<Bytes> all_gather_bytes(ProcessGroup& pg, const Bytes& mine) {
  return all_gather_impl<Bytes>(pg, view(mine));
}

void broadcast_bytes(ProcessGroup& pg, std::string& data, int root) {
  broadcast_impl(pg, data, root);
}
void broadcast_bytes(ProcessGroup& pg, Bytes& data, int root) { broadcast_impl(pg, data, root); }

std::vector<std::string> gather_bytes(ProcessGroup& pg, std::string_view mine, int root) {
  return gather_impl<std::string>(pg, view(mine), root);
}
std::vector<Bytes> gather_bytes(ProcessGroup& pg, const Bytes& mine, int root) {
  return gather_impl<Bytes>(pg, view(mine), root);
}

std::string scatter_bytes(ProcessGroup& pg, const std::vector<std::string>& pieces, int root) {
  return scatter_impl(pg, pieces, root);
}
Bytes detail::scatter_bytes(ProcessGroup& pg, const std::vector<Bytes>& pieces, int root) {
  return scatter_impl(pg, pieces, root);
}

// The default group is held for the whole call, so a concurrent destroy cannot free it.
std::vector<std::string> all_gather_bytes(std::string_view mine) {
  const std::shared_ptr<ProcessGroup> pg = get_default_group();
  return all_gather_bytes(*pg, mine);
}
void broadcast_bytes(std::string& data, int root) {
  const std::shared_ptr<ProcessGroup> pg = get_default_group();
  broadcast_bytes(*pg, data, root);
}
std::vector<std::string> gather_bytes(std::string_view mine, int root) {
  const std::shared_ptr<ProcessGroup> pg = get_default_group();
  return gather_bytes(*pg, mine, root);
}
std::string scatter_bytes(const std::vector<std::string>& pieces, int root) {
  const std::shared_ptr<ProcessGroup> pg = get_default_group();
  return scatter_bytes(*pg, pieces, root);
}

}  // namespace tdist
