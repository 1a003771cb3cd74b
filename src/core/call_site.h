// Call sites for TDIST_DEBUG=callsite (tdist/process_group.h's CallSite): a collective's
// caller, "train.cc:88", as a 16-bit id that joins its fingerprint (op_fingerprint.h), so
// that ranks calling the same operation from different lines disagree on the wire.
//
// The id hashes the file's last path component and the line (FNV-1a, folded to 16 bits,
// never 0), so that ranks built in different directories agree. Each process keeps the text
// of every id it made, which is how a DesyncError names a peer's call site: ranks run the
// same program, so the peer's site is usually one this rank has called too; one it never
// called is named by its id ("call site 0x1a2b"). Two sites with the same id (1 in 65,536)
// look alike, so a mismatch between them goes unnamed; a match is never reported as one.
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tdist::core {

// The id of `file` at `line`, remembering its text.
uint16_t call_site_id(std::string_view file, uint32_t line);
// The same for a `file` that never changes and never moves (a SourceLocation's, a
// string literal): remembered by its address in a small per-thread cache, so that a call
// repeated from one line costs no hashing.
uint16_t call_site_id_of_literal(const char* file, uint32_t line);
// "train.cc:88" for an id this process made, else "call site 0x1a2b"; empty for 0.
std::string call_site_text(uint16_t id);

}  // namespace tdist::core
