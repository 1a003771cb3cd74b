// error_of<E>(f): the message of the E that f() throws, or a text saying what happened
// instead (another exception, or none), for tests that check what an error says. Test-only.
#pragma once

#include <exception>
#include <string>

namespace tdist::test_support {

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(another exception: ") + e.what() + ")";
  }
  return "(no exception)";
}

}  // namespace tdist::test_support
