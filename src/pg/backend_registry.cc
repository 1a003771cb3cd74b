// The registry of backend factories (backend.h).
#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "backends/builtin.h"
#include "tdist/backend.h"
#include "tdist/error.h"
#include "tdist/thread_annotations.h"

namespace tdist {
namespace {

struct Registry {
  Mutex mu;
  std::map<std::string, BackendFactory> factories TDIST_GUARDED_BY(mu);  // keys lower-case
};

Registry& registry() {
  // Never destroyed: usable from static destructors. The built-in backends are added on
  // first use (not by static initialisers, which a static library would drop).
  static Registry* r = [] {
    auto* reg = new Registry();
    MutexLock lock(reg->mu);  // not shared yet; taken for the analysis
    for (auto& [name, factory] : builtin_backends()) reg->factories.emplace(name, factory);
    return reg;
  }();
  return *r;
}

std::string normalize(const std::string& name) {
  std::string out;
  for (char c : name) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string list(const std::map<std::string, BackendFactory>& factories) {
  if (factories.empty()) return "(none)";
  std::string out;
  for (const auto& [name, factory] : factories) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  const bool bad_char = std::any_of(name.begin(), name.end(), [](char c) {
    return c == ':' || c == ',' || std::isspace(static_cast<unsigned char>(c)) != 0;
  });
  TDIST_CHECK(!name.empty() && !bad_char, InvalidArgument, "register_backend: name '", name,
              "' is invalid; use a non-empty name without spaces, ':' or ','");
  TDIST_CHECK(factory != nullptr, InvalidArgument, "register_backend: the factory of '", name,
              "' is empty");
  Registry& r = registry();
  MutexLock lock(r.mu);
  const std::string key = normalize(name);
  TDIST_CHECK(r.factories.count(key) == 0, InvalidArgument, "register_backend: backend '", key,
              "' is already registered");
  r.factories.emplace(key, std::move(factory));
}

bool has_backend(const std::string& name) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  return r.factories.count(normalize(name)) != 0;
}

std::vector<std::string> registered_backends() {
  Registry& r = registry();
  MutexLock lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

BackendFactory backend_factory(const std::string& name) {
  Registry& r = registry();
  MutexLock lock(r.mu);
  auto it = r.factories.find(normalize(name));
  if (it == r.factories.end()) {
    // The built-in backends a build can lack say how to get them.
    const char* hint = "";
    if (normalize(name) == "mpi" && !TDIST_HAVE_MPI) {
      hint =
          "; this tdist was built without MPI: rebuild with libopenmpi-dev installed "
          "(apt-get install libopenmpi-dev openmpi-bin)";
    } else if (normalize(name) == "nccl" && !TDIST_HAVE_NCCL) {
      hint =
          "; this tdist was built without CUDA and NCCL: rebuild with the CUDA toolkit and NCCL "
          "installed (nvcc on PATH or CUDAToolkit_ROOT; NCCL in the toolkit or NCCL_ROOT) and "
          "-DTDIST_CUDA=AUTO or ON";
    }
    TDIST_THROW(InvalidArgument, "backend '", name,
                "' is not available; registered backends: ", list(r.factories), hint);
  }
  return it->second;
}

}  // namespace tdist
