// Runs the Store conformance suite against the local stores: HashStore, FileStore (a fresh
// temporary file per test; connect() opens the same file again, also from forked
// children), and PrefixStore over each. Also checks what is particular to PrefixStore:
// where its keys land in the base store.
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>

#include "store/conformance.h"
#include "tdist/error.h"
#include "tdist/file_store.h"
#include "tdist/hash_store.h"
#include "tdist/prefix_store.h"

namespace tdist_test {
namespace {

using tdist::Deadline;
using tdist::FileStore;
using tdist::HashStore;
using tdist::PrefixStore;
using tdist::Store;
using tdist::to_bytes;

// The temporary file of the FileStore a factory made last.
struct TempFile {
  std::string path;
  void remove() {
    if (!path.empty()) ::unlink(path.c_str());
    path.clear();
  }
};

StoreFactory hash_factory() {
  return {"Hash", [] { return std::make_shared<HashStore>(); }, nullptr, nullptr};
}

StoreFactory prefix_over_hash_factory() {
  auto create = [] { return std::make_shared<PrefixStore>("job", std::make_shared<HashStore>()); };
  return {"PrefixOverHash", create, nullptr, nullptr};
}

// `wrap` turns a FileStore client into the store under test.
StoreFactory file_factory(std::string name,
                          std::function<std::shared_ptr<Store>(std::shared_ptr<Store>)> wrap) {
  auto file = std::make_shared<TempFile>();
  auto open = [file, wrap] { return wrap(std::make_shared<FileStore>(file->path)); };
  auto create = [file, open] {
    file->remove();
    file->path = temp_store_path();
    return open();
  };
  return {std::move(name), create, open, [file] { file->remove(); }};
}

std::vector<StoreFactory> file_factories() {
  return {file_factory("File", [](std::shared_ptr<Store> s) { return s; }),
          file_factory("PrefixOverFile",
                       [](std::shared_ptr<Store> s) {
                         return std::make_shared<PrefixStore>("job", std::move(s));
                       }),
          file_factory("NestedPrefixOverFile", [](std::shared_ptr<Store> s) {
            auto inner = std::make_shared<PrefixStore>("outer", std::move(s));
            return std::make_shared<PrefixStore>("inner", std::move(inner));
          })};
}

std::vector<StoreFactory> local_factories() {
  std::vector<StoreFactory> all = {hash_factory(), prefix_over_hash_factory()};
  for (StoreFactory& f : file_factories()) all.push_back(std::move(f));
  return all;
}

INSTANTIATE_TEST_SUITE_P(Local, StoreConformance, ::testing::ValuesIn(local_factories()),
                         StoreFactoryName());
INSTANTIATE_TEST_SUITE_P(Local, StoreCrossProcess, ::testing::ValuesIn(file_factories()),
                         StoreFactoryName());

TEST(PrefixStore, KeysLandUnderThePrefix) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base);
  PrefixStore b("b", base);
  EXPECT_EQ(a.prefix(), "a");
  EXPECT_EQ(a.base(), base);

  a.set("key", std::string_view("from a"));
  b.set("key", std::string_view("from b"));
  EXPECT_EQ(base->get("a/key", Deadline::after(kReleaseWait)), to_bytes("from a"));
  EXPECT_EQ(base->get("b/key", Deadline::after(kReleaseWait)), to_bytes("from b"));
  EXPECT_FALSE(base->check({"key"}));

  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
  EXPECT_EQ(base->add("a/n", 0), 2);
  EXPECT_TRUE(a.delete_key("n"));
  EXPECT_TRUE(b.check({"n"}));
  EXPECT_EQ(a.num_keys(), base->num_keys());  // counts every prefix, as torch does
  EXPECT_EQ(base->num_keys(), 3);
}

TEST(PrefixStore, TakesTheBaseTimeoutAndRejectsNull) {
  auto base = std::make_shared<HashStore>(std::chrono::milliseconds(1234));
  PrefixStore prefixed("p", base);
  EXPECT_EQ(prefixed.timeout(), std::chrono::milliseconds(1234));
  EXPECT_THROW(PrefixStore("p", nullptr), tdist::InvalidArgument);
}

TEST(HashStore, AddRejectsNonIntegerValues) {
  HashStore store;
  store.set("text", std::string_view("twelve"));
  EXPECT_THROW(store.add("text", 1), tdist::InvalidArgument);
  store.set("max", std::string_view(std::to_string(INT64_MAX)));
  EXPECT_THROW(store.add("max", 1), tdist::InvalidArgument);
  EXPECT_EQ(store.get("max", Deadline::after(kReleaseWait)),
            to_bytes(std::to_string(INT64_MAX)));  // unchanged
}

}  // namespace
}  // namespace tdist_test
