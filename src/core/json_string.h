// JSON string escaping, shared by the error-file writer (error_file.cc) and tdistrun's
// JSON (tools/tdistrun/json.cc). Internal; pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tdist::detail {

// Length of the valid UTF-8 sequence at s[i] (lead byte >= 0x80), or 0 when it is invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t utf8_length(std::string_view s, size_t i);

// Appends `s` as the inside of a JSON string literal (no quotes): control characters
// escaped, valid UTF-8 kept, invalid bytes replaced by U+FFFD (Python's json rejects them).
void append_json_string(std::string& out, std::string_view s);

}  // namespace tdist::detail
