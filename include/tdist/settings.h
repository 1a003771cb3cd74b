// Settings: the one registry of TDIST_* environment variables.
//
// Every setting tdist reads is declared once, in src/core/settings.cc, with its default
// a one-line description, and what it accepts; `tdistrun --help-env` prints the table.
// Reading a name that is not declared is a programming error (InvalidArgument). A value
// that does not parse as the requested type, or lies outside the accepted range or
// choices, raises InvalidArgument naming the variable, the value and what is accepted: a
// setting is never silently clamped or wrapped.
// Thread-safe: reads the environment on every call (no caching), so tests may setenv.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tdist {

// How a setting's value is read, and so how it is checked.
enum class SettingType { kText, kInt, kSeconds, kBool };

struct Setting {
  std::string_view name;           // e.g. "TDIST_LOG_LEVEL"
  std::string_view default_value;  // as text, as it would be written in the environment
  std::string_view description;    // one line
  SettingType type = SettingType::kText;
  // The accepted values, checked whenever the setting is read and by check_settings():
  // integers and seconds within min..max (when min <= max); text one of `choices`
  // ('|'-separated, case-insensitive; empty = any text).
  int64_t min = 0;
  int64_t max = -1;
  std::string_view choices = {};

  bool ranged() const { return min <= max; }
};

// Every declared setting, sorted by name.
std::span<const Setting> all_settings();

// The declaration of `name`; throws InvalidArgument when it is not declared.
const Setting& find_setting(std::string_view name);

// Whether the environment gives `name` a value (set and not empty), which then overrides
// the declared default.
bool setting_is_set(std::string_view name);
// Whether the environment holds `name` at all, even empty (TDIST_AUTH_TOKEN= turns
// authentication off, which leaving it unset does not).
bool setting_is_present(std::string_view name);
// The value from the environment, or the declared default when unset or empty.
std::string setting_string(std::string_view name);
int64_t setting_int(std::string_view name);
double setting_double(std::string_view name);
// Accepts 1/0, true/false, yes/no, on/off (case-insensitive).
bool setting_bool(std::string_view name);
// A duration in seconds (fractions allowed, e.g. "1.5").
std::chrono::milliseconds setting_seconds(std::string_view name);

// Reads every declared setting the environment gives a value, as its type says, and
// throws InvalidArgument for the first that does not parse or is outside what it accepts,
// naming the variable, the value and the accepted range or choices. init_process_group
// and tdistrun call it before they start anything; each read checks its own value too.
void check_settings();

// "min..max" or "a, b, c": what `setting` accepts, for messages and --help-env; empty
// when it accepts any value of its type.
std::string accepted_values(const Setting& setting);

// Reads any environment variable (declared or not, e.g. RANK); empty when unset.
std::string env_string(const char* name);

}  // namespace tdist
