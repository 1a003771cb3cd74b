// Helpers shared by the Store implementations in src/store (internal, not installed):
// the decimal counter arithmetic behind add(), and the TimeoutError that get/wait/multi_get
// raise naming the keys still missing. Stateless; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "tdist/deadline.h"
#include "tdist/error.h"
#include "tdist/store.h"

namespace tdist::store_internal {

// The value add(key, delta) stores: `current` (nullptr when the key is missing, read as 0)
// parsed as a decimal int64 plus delta. InvalidArgument when the value is not a decimal
// integer or the sum overflows; `store` names the caller in the message.
inline int64_t add_to_counter(const char* store, const std::string& key, const Bytes* current,
                              int64_t delta) {
  int64_t value = 0;
  if (current != nullptr) {
    const std::string text = to_string(*current);
    size_t pos = std::string::npos;
    try {
      value = std::stoll(text, &pos, 10);
    } catch (const std::exception&) {
      pos = std::string::npos;
    }
    TDIST_CHECK(pos == text.size(), InvalidArgument, store, "::add: key '", key, "' holds '", text,
                "', which is not a decimal integer");
  }
  int64_t sum = 0;
  TDIST_CHECK(!__builtin_add_overflow(value, delta, &sum), InvalidArgument, store, "::add: key '",
              key, "' overflows int64 (", value, " + ", delta, ")");
  return sum;
}

// Throws the TimeoutError of a blocking call that began at `start` and still misses `missing`.
[[noreturn]] inline void throw_wait_timeout(const char* store, const char* op,
                                            const std::vector<std::string>& missing,
                                            Clock::time_point start) {
  std::string names;
  for (const auto& key : missing) {
    if (!names.empty()) names += ", ";
    names += "'" + key + "'";
  }
  const auto waited = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  TDIST_THROW(TimeoutError, store, "::", op, ": timed out after ", waited.count(),
              " ms waiting for key(s) ", names);
}

}  // namespace tdist::store_internal
