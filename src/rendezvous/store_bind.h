// Where a rank that hosts the rendezvous store listens. Internal to tdist.
//
// Not on every interface unless asked: TDIST_STORE_BIND when set ("0.0.0.0" or "::" for
// every interface, or one address); else the address the rendezvous host (MASTER_ADDR, or
// the tcp:// init_method's host) resolves to when this host has it, so a loopback
// MASTER_ADDR is served on loopback only; else (a name for this host that resolves to an
// address it does not have, as behind NAT or a service address) every interface, said in
// one log line. Blocking: resolves `host`. Throws Error when `host` does not resolve.
#pragma once

#include <string>

namespace tdist::rendezvous_detail {

std::string store_listen_host(const std::string& host);

}  // namespace tdist::rendezvous_detail
