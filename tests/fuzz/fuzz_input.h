// Reading a fuzz input as fields: the next T in host layout, or `fallback` when fewer than
// sizeof(T) bytes are left (then nothing is consumed). Test-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tdist::fuzz {

template <typename T>
T take(const uint8_t*& data, size_t& size, T fallback) {
  if (size < sizeof(T)) return fallback;
  T value;
  std::memcpy(&value, data, sizeof(T));
  data += sizeof(T);
  size -= sizeof(T);
  return value;
}

}  // namespace tdist::fuzz
