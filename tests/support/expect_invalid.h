// EXPECT_INVALID(expr, "part", ...): expr throws tdist::InvalidArgument and its message
// holds every part; invalid_argument_message(fn): that message, with a test failure naming
// what happened instead (another exception, or none). Test-only.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

#include "tdist/error.h"

namespace tdist::test_support {

template <typename Fn>
std::string invalid_argument_message(Fn fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InvalidArgument, nothing was thrown";
  return "";
}

}  // namespace tdist::test_support

#define EXPECT_INVALID(expr, ...)                                                                \
  do {                                                                                           \
    std::string msg = ::tdist::test_support::invalid_argument_message([&] { (void)(expr); });    \
    for (const char* part : {__VA_ARGS__})                                                       \
      EXPECT_NE(msg.find(part), std::string::npos) << "message lacks '" << part << "': " << msg; \
  } while (false)
