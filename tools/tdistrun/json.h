// JSON: a small value type for the launcher's failure records and torch's error files.
//
// A Json is null, a bool, a number (a double: integers are exact up to 2^53), a UTF-8
// string, an array, or an object (members keep their insertion order; keys are unique).
//
// Json::parse is strict RFC 8259: one value with optional whitespace around it; no
// comments, trailing commas, NaN or Infinity; strings must be valid UTF-8 with no raw
// control characters, and \u escapes must pair surrogates; an object may not repeat a
// key; nesting is limited to 256 levels. Anything else raises InvalidArgument saying what
// was expected, what was found, and the byte offset.
//
// dump() writes one line with Python's separators (", " and ": "), escaping '"', '\' and
// control characters (\n, \t, ... or \u00XX) and keeping all other UTF-8 as is; invalid
// UTF-8 in a string becomes U+FFFD, so the output always parses.
//
// Accessors of the wrong kind (as_string on a number, at() of a missing key) raise
// InvalidArgument naming what was expected. A plain value type: const use is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tdist::launcher {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool value) : value_(value) {}
  Json(int value) : value_(static_cast<double>(value)) {}
  Json(int64_t value);  // InvalidArgument when |value| > 2^53 (it would not round-trip)
  Json(double value);   // InvalidArgument when not finite
  Json(const char* value) : value_(std::string(value)) {}
  Json(std::string value) : value_(std::move(value)) {}
  Json(Array value) : value_(std::move(value)) {}
  Json(Object value) : value_(std::move(value)) {}

  Kind kind() const { return static_cast<Kind>(value_.index()); }
  bool is_null() const { return kind() == Kind::kNull; }

  bool as_bool() const;
  double as_number() const;
  int64_t as_int() const;  // the number, which must be a whole number within +-2^53
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // The member `key` of an object; nullptr when it has none or is not an object.
  const Json* find(std::string_view key) const;
  // The member `key` of an object; InvalidArgument when it has none.
  const Json& at(std::string_view key) const;

  std::string dump() const;
  static Json parse(std::string_view text);

  friend bool operator==(const Json& a, const Json& b) { return a.value_ == b.value_; }

 private:
  std::variant<std::nullptr_t, bool, double, std::string, Array, Object> value_;
};

}  // namespace tdist::launcher
