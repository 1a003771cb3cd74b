// StoreLossGuard: forwarding with the lost-store message (store_loss.h).
#include "tdistrun/store_loss.h"

#include <utility>

#include "tdist/error.h"

namespace tdist::launcher {

StoreLossGuard::StoreLossGuard(std::shared_ptr<Store> base, std::string what, std::string hint)
    : Store(base->timeout()),
      base_(std::move(base)),
      what_(std::move(what)),
      hint_(std::move(hint)) {}

template <typename F>
auto StoreLossGuard::guarded(F&& call) -> decltype(call()) {
  base_->set_timeout(timeout());  // set_timeout on the guard reaches the store
  try {
    return call();
  } catch (const PeerError& e) {
    TDIST_THROW(PeerError, what_, " was lost (", e.what(), ")", hint_.empty() ? "" : "; ", hint_);
  }
}

void StoreLossGuard::do_set(const std::string& key, const Bytes& value) {
  guarded([&] { base_->set(key, value); });
}
Bytes StoreLossGuard::do_get(const std::string& key, Deadline deadline) {
  return guarded([&] { return base_->get(key, deadline); });
}
int64_t StoreLossGuard::do_add(const std::string& key, int64_t delta) {
  return guarded([&] { return base_->add(key, delta); });
}
Bytes StoreLossGuard::do_compare_set(const std::string& key, const Bytes& expected,
                                     const Bytes& desired) {
  return guarded([&] { return base_->compare_set(key, expected, desired); });
}
bool StoreLossGuard::do_check(const std::vector<std::string>& keys) {
  return guarded([&] { return base_->check(keys); });
}
void StoreLossGuard::do_wait(const std::vector<std::string>& keys, Deadline deadline) {
  guarded([&] { base_->wait(keys, deadline); });
}
bool StoreLossGuard::do_delete_key(const std::string& key) {
  return guarded([&] { return base_->delete_key(key); });
}
int64_t StoreLossGuard::do_num_keys() {
  return guarded([&] { return base_->num_keys(); });
}
void StoreLossGuard::do_append(const std::string& key, const Bytes& value) {
  guarded([&] { base_->append(key, value); });
}
std::vector<Bytes> StoreLossGuard::do_multi_get(const std::vector<std::string>& keys,
                                                Deadline deadline) {
  return guarded([&] { return base_->multi_get(keys, deadline); });
}
void StoreLossGuard::do_multi_set(const std::vector<std::string>& keys,
                                  const std::vector<Bytes>& values) {
  guarded([&] { base_->multi_set(keys, values); });
}

}  // namespace tdist::launcher
