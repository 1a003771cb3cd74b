// TLS of the TCPStore (internal to src/store): which net::tls::Context a client or server
// uses. The server's TLS I/O lives in tcp_store_tls.cc (StoreServer's members); the
// client's in tcp_store_client.cc.
//
// Thread-safety: a free function over immutable, shared Contexts; callable from any thread.
#pragma once

#include <memory>
#include <optional>

#include "net/tls.h"
#include "tdist/tcp_store.h"

namespace tdist::store_internal {

// nullopt: from TDIST_TLS_CERT/KEY/CA (Context::from_settings); TlsFiles: those files, or
// null when all three are empty (no TLS). Throws InvalidArgument when only some are set or
// a file cannot be loaded (naming it).
std::shared_ptr<const net::tls::Context> tls_context(const std::optional<TlsFiles>& files);

}  // namespace tdist::store_internal
