// Uses the installed headers and library: a store round trip and a dtype lookup.
#include <tdist/dtype.h>
#include <tdist/hash_store.h>

#include <cstdio>

int main() {
  tdist::HashStore store;
  store.set("answer", "42");
  int64_t n = store.add("answer", 1);
  auto f16 = tdist::parse_dtype("half");
  if (n != 43 || !f16 || tdist::dtype_size(*f16) != 2) return 1;
  std::printf("consumer ok: %lld\n", static_cast<long long>(n));
  return 0;
}
