// The backends built into tdist, registered by name on the registry's first use.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tdist/backend.h"

namespace tdist::backends {

// (name, factory) of every built-in backend of this build.
std::vector<std::pair<std::string, BackendFactory>> builtin_backends();

}  // namespace tdist::backends

namespace tdist {
using backends::builtin_backends;
}  // namespace tdist
