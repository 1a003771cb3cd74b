// The launcher's JSON value: strict parser and escaping writer (json.h).
#include "tdistrun/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/json_string.h"
#include "tdist/error.h"

namespace tdist::launcher {
namespace {

constexpr double kMaxExactInt = 9007199254740992.0;  // 2^53
constexpr int kMaxDepth = 256;

const char* kind_name(Json::Kind kind) {
  static constexpr const char* kNames[] = {"null",     "a bool",   "a number",
                                           "a string", "an array", "an object"};
  return kNames[static_cast<int>(kind)];
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void dump_string(std::string& out, std::string_view s) {
  out += '"';
  detail::append_json_string(out, s);
  out += '"';
}

void dump_number(std::string& out, double v) {
  if (v == std::trunc(v) && std::fabs(v) <= kMaxExactInt) {
    out += std::to_string(static_cast<int64_t>(v));
    return;
  }
  char buf[32];  // the shortest text that reads back as the same double
  out.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

void dump_value(std::string& out, const Json& value) {
  switch (value.kind()) {
    case Json::Kind::kNull:
      out += "null";
      return;
    case Json::Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return;
    case Json::Kind::kNumber:
      dump_number(out, value.as_number());
      return;
    case Json::Kind::kString:
      dump_string(out, value.as_string());
      return;
    case Json::Kind::kArray: {
      out += '[';
      const char* sep = "";
      for (const Json& item : value.as_array()) {
        out += sep;
        dump_value(out, item);
        sep = ", ";
      }
      out += ']';
      return;
    }
    case Json::Kind::kObject: {
      out += '{';
      const char* sep = "";
      for (const auto& [key, item] : value.as_object()) {
        out += sep;
        dump_string(out, key);
        out += ": ";
        dump_value(out, item);
        sep = ", ";
      }
      out += '}';
      return;
    }
  }
}

// Recursive descent over the whole text; every error names the byte offset.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    skip_space();
    Json value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("expected the end of the text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    std::string found = "the end of the text";
    if (pos_ < text_.size()) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      char buf[16];
      std::snprintf(buf, sizeof(buf), c >= 0x20 && c < 0x7F ? "'%c'" : "byte 0x%02x", c);
      found = buf;
    }
    TDIST_THROW(InvalidArgument, "invalid JSON at byte ", pos_, ": ", what, ", found ", found);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  // '\0' at the end, which no rule accepts.
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) {
      ++pos_;
    }
  }

  void expect(char c, std::string_view what) {
    if (peek() != c) fail(what);
    ++pos_;
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than 256 levels");
    switch (peek()) {
      case '{':
        return parse_object(depth);
      case '[':
        return parse_array(depth);
      case '"':
        return parse_string();
      case 't':
        return parse_literal("true", true);
      case 'f':
        return parse_literal("false", false);
      case 'n':
        return parse_literal("null", nullptr);
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        fail("expected a value (object, array, string, number, true, false or null)");
    }
  }

  Json parse_literal(std::string_view word, Json value) {
    if (text_.substr(pos_, word.size()) != word) fail(detail::str_cat("expected '", word, "'"));
    pos_ += word.size();
    return value;
  }

  Json parse_object(int depth) {
    ++pos_;  // '{'
    Json::Object members;
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return members;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("expected a string key");
      const size_t key_pos = pos_;
      std::string key = parse_string().as_string();
      for (const auto& member : members) {
        if (member.first == key) {
          pos_ = key_pos;
          fail(detail::str_cat("duplicate key \"", key, "\""));
        }
      }
      skip_space();
      expect(':', "expected ':' after an object key");
      skip_space();
      members.emplace_back(std::move(key), parse_value(depth + 1));
      skip_space();
      if (peek() == '}') {
        ++pos_;
        return members;
      }
      expect(',', "expected ',' or '}' after an object member");
    }
  }

  Json parse_array(int depth) {
    ++pos_;  // '['
    Json::Array items;
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return items;
    }
    while (true) {
      skip_space();
      items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ']') {
        ++pos_;
        return items;
      }
      expect(',', "expected ',' or ']' after an array item");
    }
  }

  uint32_t parse_hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      uint32_t digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        fail("expected 4 hex digits after \\u");
      }
      v = v * 16 + digit;
      ++pos_;
    }
    return v;
  }

  // After "\u": one code point, joining a surrogate pair.
  uint32_t parse_unicode_escape() {
    const size_t start = pos_ - 2;
    uint32_t cp = parse_hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
      pos_ = start;
      fail("a low surrogate \\u escape without a high one before it");
    }
    if (cp < 0xD800 || cp > 0xDBFF) return cp;
    if (text_.substr(pos_, 2) != "\\u") {
      pos_ = start;
      fail("a high surrogate \\u escape without a low one after it");
    }
    pos_ += 2;
    uint32_t low = parse_hex4();
    if (low < 0xDC00 || low > 0xDFFF) {
      pos_ = start;
      fail("a high surrogate \\u escape without a low one after it");
    }
    return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
  }

  Json parse_string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail("expected '\"' to end the string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("expected an escape (\\n, \\u00XX, ...) for a control character");
      if (c >= 0x80) {
        size_t n = detail::utf8_length(text_, pos_);
        if (n == 0) fail("invalid UTF-8 in a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, parse_unicode_escape());
          break;
        default:
          --pos_;
          fail("expected an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
      }
    }
  }

  Json parse_number() {
    const size_t start = pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("a number may not have a leading zero");
    } else if (digits() == 0) {
      fail("expected a digit in a number");
    }
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("expected a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    double value = 0;
    auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc() || end != text_.data() + pos_ || !std::isfinite(value)) {
      pos_ = start;
      fail("expected a number within the range of a double");
    }
    return value;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Json::Json(int64_t value) : value_(static_cast<double>(value)) {
  TDIST_CHECK(
      value >= -static_cast<int64_t>(kMaxExactInt) && value <= static_cast<int64_t>(kMaxExactInt),
      InvalidArgument, "JSON integer ", value, " is beyond 2^53 and would lose precision");
}

Json::Json(double value) : value_(value) {
  TDIST_CHECK(std::isfinite(value), InvalidArgument, "JSON cannot hold the number ", value);
}

bool Json::as_bool() const {
  TDIST_CHECK(kind() == Kind::kBool, InvalidArgument, "JSON: expected a bool, found ",
              kind_name(kind()));
  return std::get<bool>(value_);
}

double Json::as_number() const {
  TDIST_CHECK(kind() == Kind::kNumber, InvalidArgument, "JSON: expected a number, found ",
              kind_name(kind()));
  return std::get<double>(value_);
}

int64_t Json::as_int() const {
  const double v = as_number();
  TDIST_CHECK(v == std::trunc(v) && std::fabs(v) <= kMaxExactInt, InvalidArgument,
              "JSON: expected a whole number within 2^53, found ", v);
  return static_cast<int64_t>(v);
}

const std::string& Json::as_string() const {
  TDIST_CHECK(kind() == Kind::kString, InvalidArgument, "JSON: expected a string, found ",
              kind_name(kind()));
  return std::get<std::string>(value_);
}

const Json::Array& Json::as_array() const {
  TDIST_CHECK(kind() == Kind::kArray, InvalidArgument, "JSON: expected an array, found ",
              kind_name(kind()));
  return std::get<Array>(value_);
}

const Json::Object& Json::as_object() const {
  TDIST_CHECK(kind() == Kind::kObject, InvalidArgument, "JSON: expected an object, found ",
              kind_name(kind()));
  return std::get<Object>(value_);
}

const Json* Json::find(std::string_view key) const {
  if (kind() != Kind::kObject) return nullptr;
  for (const auto& [name, value] : std::get<Object>(value_)) {
    if (name == key) return &value;
  }
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  const Json* value = find(key);
  TDIST_CHECK(value != nullptr, InvalidArgument, "JSON: expected an object with the key \"", key,
              "\", found ", kind() == Kind::kObject ? "none" : kind_name(kind()));
  return *value;
}

std::string Json::dump() const {
  std::string out;
  dump_value(out, *this);
  return out;
}

Json Json::parse(std::string_view text) { return Parser(text).document(); }

}  // namespace tdist::launcher
