// Errors: the one small exception hierarchy every tdist call throws from.
//
// Error            anything tdist reports (base class; catch this to catch all)
//  InvalidArgument bad input found before anything was sent: a wrong rank, dtype, op,
//                  size or setting; the message says what was expected and what found
//  TimeoutError    a deadline passed: the message names the operation, the peer or
//                  address waited on, and the timeout
//  PeerError       a peer died, a connection broke or sent nonsense (I/O failure)
//  DesyncError     ranks disagree on what they are doing (different op, size, dtype)
//  AuthError       a peer did not prove it knows the job's token, or refused this
//                  process's (TDIST_AUTH_TOKEN); retrying cannot help
//
// Messages are built with TDIST_THROW, which appends the source location. Thread-safe:
// these are plain value types.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tdist {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InvalidArgument : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class PeerError : public Error {
 public:
  using Error::Error;
};

class DesyncError : public Error {
 public:
  using Error::Error;
};

class AuthError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// Concatenates anything with an operator<< into one string.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// The exception's what() ("unknown error" for one not derived from std::exception).
inline std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// Strips the directories from a __FILE__ path.
constexpr const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

}  // namespace detail
}  // namespace tdist

// Throws `Type` with the concatenated message and " (file.cc:123)" appended.
#define TDIST_THROW(Type, ...)                                                                 \
  throw Type(::tdist::detail::str_cat(__VA_ARGS__, " (", ::tdist::detail::base_name(__FILE__), \
                                      ":", __LINE__, ")"))

// Throws `Type` with the message when `cond` is false.
#define TDIST_CHECK(cond, Type, ...)             \
  do {                                           \
    if (!(cond)) TDIST_THROW(Type, __VA_ARGS__); \
  } while (false)
