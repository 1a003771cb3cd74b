// The job's authentication token (job_token.h).
#include "tdistrun/job_token.h"

#include <cstdio>
#include <cstdlib>

#include "net/auth.h"
#include "tdist/settings.h"

namespace tdist::launcher {

std::string ensure_job_token(const Options& options) {
  if (setting_is_present("TDIST_AUTH_TOKEN"))
    return setting_is_set("TDIST_AUTH_TOKEN") ? "given" : "off";
  if (setting_is_set("TDIST_AUTH_TOKEN_FILE")) {
    net::auth::Key::from_settings();  // a bad file is an error now, not in every worker
    return "given";
  }
  if (options.max_nodes > 1) {
    std::fprintf(stderr,
                 "tdistrun: warning: this job may span nodes and has no authentication token: "
                 "whoever reaches its store or its ranks' ports can join or disturb it (give "
                 "every node the same TDIST_AUTH_TOKEN or TDIST_AUTH_TOKEN_FILE)\n");
    return "none";
  }
  std::string token;
  for (int i = 0; i < 2; ++i) {
    for (uint8_t byte : net::auth::random_nonce()) {
      char hex[3];
      std::snprintf(hex, sizeof(hex), "%02x", byte);
      token += hex;
    }
  }
  ::setenv("TDIST_AUTH_TOKEN", token.c_str(), 1);
  return "fresh";
}

}  // namespace tdist::launcher
