// Settings: the one registry of TDIST_* environment variables.
//
// Every setting tdist reads is declared once, in src/core/settings.cc, with its default
// and a one-line description; `tdistrun --help-env` prints the table. Reading a name
// that is not declared is a programming error (InvalidArgument). A value that does not
// parse as the requested type raises InvalidArgument naming the variable and value.
// Thread-safe: reads the environment on every call (no caching), so tests may setenv.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tdist {

struct Setting {
  std::string_view name;           // e.g. "TDIST_LOG_LEVEL"
  std::string_view default_value;  // as text, as it would be written in the environment
  std::string_view description;    // one line
};

// Every declared setting, sorted by name.
std::span<const Setting> all_settings();

// The declaration of `name`; throws InvalidArgument when it is not declared.
const Setting& find_setting(std::string_view name);

// Whether the environment gives `name` a value (set and not empty), which then overrides
// the declared default.
bool setting_is_set(std::string_view name);
// The value from the environment, or the declared default when unset or empty.
std::string setting_string(std::string_view name);
int64_t setting_int(std::string_view name);
double setting_double(std::string_view name);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
bool setting_bool(std::string_view name);
// A duration in seconds (fractions allowed, e.g. "1.5").
std::chrono::milliseconds setting_seconds(std::string_view name);

// Reads any environment variable (declared or not, e.g. RANK); empty when unset.
std::string env_string(const char* name);

}  // namespace tdist
