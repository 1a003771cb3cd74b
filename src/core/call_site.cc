// Call-site ids (call_site.h): the hash, and the texts of the ids this process made.
#include "core/call_site.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "tdist/thread_annotations.h"

namespace tdist::core {
namespace {

constexpr size_t kIds = size_t{1} << 16;

struct Registry {
  std::array<std::atomic<bool>, kIds> known{};  // the text of the id is in `texts`
  Mutex mu;
  std::unordered_map<uint16_t, std::string> texts TDIST_GUARDED_BY(mu);
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: collectives may run at exit
  return *r;
}

std::string_view base_name(std::string_view file) {
  const size_t slash = file.find_last_of("/\\");
  return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

}  // namespace

uint16_t call_site_id(std::string_view file, uint32_t line) {
  const std::string_view name = base_name(file);
  uint32_t h = 2166136261u;
  auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 16777619u; };
  for (char c : name) mix(static_cast<uint8_t>(c));
  for (int shift = 0; shift < 32; shift += 8) mix(static_cast<uint8_t>(line >> shift));
  auto id = static_cast<uint16_t>((h >> 16) ^ (h & 0xFFFF));
  if (id == 0) id = 1;
  Registry& r = registry();
  if (!r.known[id].load(std::memory_order_acquire)) {
    MutexLock lock(r.mu);
    r.texts.try_emplace(id, std::string(name) + ":" + std::to_string(line));
    r.known[id].store(true, std::memory_order_release);
  }
  return id;
}

uint16_t call_site_id_of_literal(const char* file, uint32_t line) {
  struct Entry {
    const char* file = nullptr;
    uint32_t line = 0;
    uint16_t id = 0;
  };
  thread_local std::array<Entry, 16> cache;
  Entry& e = cache[(reinterpret_cast<uintptr_t>(file) ^ line) % cache.size()];
  if (e.file != file || e.line != line) e = Entry{file, line, call_site_id(file, line)};
  return e.id;
}

std::string call_site_text(uint16_t id) {
  if (id == 0) return {};
  Registry& r = registry();
  if (r.known[id].load(std::memory_order_acquire)) {
    MutexLock lock(r.mu);
    return r.texts.at(id);
  }
  char text[32];
  std::snprintf(text, sizeof(text), "call site 0x%04x", id);
  return text;
}

}  // namespace tdist::core
