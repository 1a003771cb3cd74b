// PrefixStore: forwards every call to the base store with each key rewritten to
// "<prefix>/<key>". Blocking calls pass their deadline through unchanged; num_keys is the
// base store's count. The store's own timeout starts as the base store's.
#include "tdist/prefix_store.h"

#include <utility>

#include "tdist/error.h"

namespace tdist {
namespace {

std::chrono::milliseconds timeout_of(const std::shared_ptr<Store>& base) {
  TDIST_CHECK(base != nullptr, InvalidArgument, "PrefixStore: the base store is null");
  return base->timeout();
}

}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(timeout_of(base)), prefix_(std::move(prefix)), base_(std::move(base)) {}

PrefixStore::~PrefixStore() = default;

std::string PrefixStore::key_of(const std::string& key) const {
  std::string full;
  full.reserve(prefix_.size() + 1 + key.size());
  full.append(prefix_).append("/").append(key);
  return full;
}

std::vector<std::string> PrefixStore::keys_of(const std::vector<std::string>& keys) const {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& key : keys) full.push_back(key_of(key));
  return full;
}

void PrefixStore::do_set(const std::string& key, const Bytes& value) {
  base_->set(key_of(key), value);
}

Bytes PrefixStore::do_get(const std::string& key, Deadline deadline) {
  return base_->get(key_of(key), deadline);
}

int64_t PrefixStore::do_add(const std::string& key, int64_t delta) {
  return base_->add(key_of(key), delta);
}

Bytes PrefixStore::do_compare_set(const std::string& key, const Bytes& expected,
                                  const Bytes& desired) {
  return base_->compare_set(key_of(key), expected, desired);
}

bool PrefixStore::do_check(const std::vector<std::string>& keys) {
  return base_->check(keys_of(keys));
}

void PrefixStore::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  base_->wait(keys_of(keys), deadline);
}

bool PrefixStore::do_delete_key(const std::string& key) { return base_->delete_key(key_of(key)); }

int64_t PrefixStore::do_num_keys() { return base_->num_keys(); }

void PrefixStore::do_append(const std::string& key, const Bytes& value) {
  base_->append(key_of(key), value);
}

std::vector<Bytes> PrefixStore::do_multi_get(const std::vector<std::string>& keys,
                                             Deadline deadline) {
  return base_->multi_get(keys_of(keys), deadline);
}

void PrefixStore::do_multi_set(const std::vector<std::string>& keys,
                               const std::vector<Bytes>& values) {
  TDIST_CHECK(keys.size() == values.size(), InvalidArgument,
              "PrefixStore::multi_set: ", keys.size(), " keys but ", values.size(), " values");
  base_->multi_set(keys_of(keys), values);
}

}  // namespace tdist
