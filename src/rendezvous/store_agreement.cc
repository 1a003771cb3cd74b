// The installed store-address agreement (store_agreement.h).
#include "rendezvous/store_agreement.h"

#include <mutex>
#include <utility>

namespace tdist::rendezvous_detail {
namespace {

struct Installed {
  std::mutex mu;
  std::optional<StoreAgreement> agreement;  // guarded by mu
};

Installed& installed() {
  static Installed* i = new Installed();  // never destroyed: usable from static destructors
  return *i;
}

}  // namespace

void install_store_agreement(StoreAgreement agreement) {
  Installed& i = installed();
  std::lock_guard<std::mutex> lock(i.mu);
  i.agreement = std::move(agreement);
}

std::optional<StoreAgreement> applicable_store_agreement() {
  std::optional<StoreAgreement> copy;
  {
    Installed& i = installed();
    std::lock_guard<std::mutex> lock(i.mu);
    copy = i.agreement;
  }
  // Asked outside the lock: applies() belongs to the module that installed it.
  if (copy && copy->applies && copy->applies()) return copy;
  return std::nullopt;
}

}  // namespace tdist::rendezvous_detail
