// all_to_allv (all_to_all.h): pairwise exchange.
#include "collectives/all_to_all.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "collectives/detail.h"
#include "tdist/error.h"

namespace tdist::coll {
namespace {

std::vector<size_t> offsets_of(std::span<const size_t> sizes) {
  std::vector<size_t> out(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) out[i + 1] = out[i] + sizes[i];
  return out;
}

}  // namespace

void all_to_allv(const Ctx& ctx, const void* send, std::span<const size_t> send_bytes, void* recv,
                 std::span<const size_t> recv_bytes, Algorithm algo) {
  const int n = ctx.comm.size();
  const int r = ctx.comm.rank();
  TDIST_CHECK(
      send_bytes.size() == static_cast<size_t>(n) && recv_bytes.size() == static_cast<size_t>(n),
      InvalidArgument, "all_to_all: expected ", n, " send and receive sizes, found ",
      send_bytes.size(), " and ", recv_bytes.size());
  TDIST_CHECK(send_bytes[r] == recv_bytes[r], InvalidArgument, "all_to_all: rank ", r,
              " sends itself ", send_bytes[r], " bytes but expects ", recv_bytes[r]);
  const size_t largest = std::max(*std::max_element(send_bytes.begin(), send_bytes.end()),
                                  *std::max_element(recv_bytes.begin(), recv_bytes.end()));
  detail::choose(ctx, Collective::kAllToAll, largest, algo);
  const std::vector<size_t> soff = offsets_of(send_bytes);
  const std::vector<size_t> roff = offsets_of(recv_bytes);
  if (send_bytes[r] > 0) {
    std::memmove(detail::at(recv, roff[r]), detail::at(send, soff[r]), send_bytes[r]);
  }
  if (n == 1) return;
  const uint64_t t = detail::tag(ctx, 0);
  detail::RequestQueue recvs(ctx);
  detail::RequestQueue sends(ctx);
  // Zero-byte messages are sent too, so that sizes that disagree are a DesyncError.
  for (int k = 1; k < n; ++k) {
    const int from = detail::mod(r - k, n);
    recvs.push(detail::irecv(ctx, from, t, detail::at(recv, roff[from]), recv_bytes[from]));
  }
  for (int k = 1; k < n; ++k) {
    const int to = detail::mod(r + k, n);
    sends.push(detail::isend(ctx, to, t, detail::at(send, soff[to]), send_bytes[to]));
  }
  recvs.wait_all();
  sends.wait_all();
}

}  // namespace tdist::coll
