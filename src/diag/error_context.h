// Error context for backends: names the rank, group, operation and sequence number in
// every error an operation raises, keeping the exception's type.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "tdist/error.h"

namespace tdist::diag {

// "rank 1/4 (tcp) all_reduce #17"
std::string describe(int rank, int size, const std::string& backend, const std::string& op,
                     uint64_t seq);

// The same kind of tdist exception as `error`, its message prefixed with `prefix`
// (unless it already starts with it). Non-tdist exceptions become Error.
std::exception_ptr add_context(std::exception_ptr error, const std::string& prefix);

using detail::what_of;  // tdist/error.h

// Whether the exception is (derived from) E.
template <typename E>
bool is_a(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace tdist::diag
