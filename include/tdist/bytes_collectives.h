// Byte-string collectives: torch.distributed's all_gather_object, broadcast_object_list,
// gather_object and scatter_object_list for C++ callers exchanging metadata (names,
// shapes, serialized configs) as byte strings of any length, NUL bytes included.
//
// They work on any ProcessGroup (every backend) through its public API only: the lengths
// go first as one i64 each, then the bytes as u8 (all_gather + all_gatherv; broadcast
// twice; gather or scatter of the lengths, then all_to_allv carrying only the bytes to or
// from the root). Strings may differ in length per rank and may be empty.
//
// Contract for callers:
//  - Collective: every rank of the group calls the same function, in the same order as
//    its other collectives on the group, with the same root. Each call issues two
//    collectives (all_gather and broadcast skip the second when no bytes move), so no
//    other thread may issue collectives on the same group while it runs.
//  - Blocking: returns once this rank's part is done. Inputs are only read, and only
//    during the call; results are owned by the caller.
//  - Failures: a root outside 0..size()-1, or (scatter, at the root) a pieces vector whose
//    length is not size(), raise InvalidArgument on the calling rank before anything is
//    sent; ranks that did call wait until the group's timeout, as for any collective a
//    rank skips. A dead peer raises PeerError; each underlying collective ends with
//    TimeoutError after pg.timeout(). Either leaves the group aborted (process_group.h).
//  - Thread-safety: the functions keep no state; what applies to `pg` applies to them.
//
// The forms without a group run on the default group (distributed.h) and throw Error
// when none is initialized.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "tdist/process_group.h"
#include "tdist/store.h"

namespace tdist {

// Every rank gets size() strings: element r is rank r's `mine`.
std::vector<std::string> all_gather_bytes(ProcessGroup& pg, std::string_view mine);
std::vector<Bytes> all_gather_bytes(ProcessGroup& pg, const Bytes& mine);

// Root's `data` replaces `data` on every other rank (root's is left as it is).
void broadcast_bytes(ProcessGroup& pg, std::string& data, int root);
void broadcast_bytes(ProcessGroup& pg, Bytes& data, int root);

// The root gets size() strings (element r is rank r's `mine`); other ranks an empty vector.
std::vector<std::string> gather_bytes(ProcessGroup& pg, std::string_view mine, int root);
std::vector<Bytes> gather_bytes(ProcessGroup& pg, const Bytes& mine, int root);

// Rank r gets pieces[r] of the root's `pieces`, which must hold size() strings there
// (InvalidArgument otherwise); elsewhere `pieces` is ignored and may be empty ({}).
std::string scatter_bytes(ProcessGroup& pg, const std::vector<std::string>& pieces, int root);
namespace detail {
Bytes scatter_bytes(ProcessGroup& pg, const std::vector<Bytes>& pieces, int root);
}  // namespace detail
// The Bytes form is a template only so that `scatter_bytes(pg, {}, root)` (a non-root
// rank's usual call) still picks the std::string form instead of being ambiguous.
template <std::same_as<Bytes> Piece = Bytes>
Bytes scatter_bytes(ProcessGroup& pg, const std::vector<Piece>& pieces, int root) {
  return detail::scatter_bytes(pg, pieces, root);
}

// The same on the default group.
std::vector<std::string> all_gather_bytes(std::string_view mine);
void broadcast_bytes(std::string& data, int root);
std::vector<std::string> gather_bytes(std::string_view mine, int root);
std::string scatter_bytes(const std::vector<std::string>& pieces, int root);

}  // namespace tdist
