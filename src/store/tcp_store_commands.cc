// StoreServer, part 2: decoding requests, applying them to the map, parking and
// releasing GET/WAIT/MULTI_GET until their keys exist.
#include <algorithm>

#include "store/store_internal.h"
#include "store/tcp_store_server.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::store_internal {

using store_wire::Command;
using store_wire::FrameWriter;
using store_wire::PayloadReader;
using store_wire::Status;

FrameWriter StoreServer::reply(Connection& c, uint32_t request_id, Status status) {
  mark_dirty(c);
  return FrameWriter(c.out, static_cast<uint8_t>(status), request_id);
}

void StoreServer::handle(Connection& c, const store_wire::FrameHeader& h,
                         std::span<const uint8_t> payload) {
  PayloadReader r(payload, limits_);
  const uint32_t id = h.request_id;
  if (!decoding_fits(c, h, payload)) return;
  switch (static_cast<Command>(h.code)) {
    case Command::kSet: {
      std::string key = r.key();
      Bytes value = r.value();
      r.expect_end();
      put(key, std::move(value));
      reply(c, id).finish();
      return;
    }
    case Command::kGet:
    case Command::kWait:
    case Command::kMultiGet: {
      std::vector<std::string> keys;
      if (static_cast<Command>(h.code) == Command::kGet) {
        keys.push_back(r.key());
      } else {
        keys = r.keys();
      }
      r.expect_end();
      park_or_complete(c, id, static_cast<Command>(h.code), std::move(keys));
      return;
    }
    case Command::kAdd: {
      std::string key = r.key();
      int64_t delta = r.i64();
      r.expect_end();
      auto it = data_.find(key);
      int64_t sum = 0;
      try {
        sum = add_to_counter("TCPStore", key, it == data_.end() ? nullptr : &it->second, delta);
      } catch (const InvalidArgument& e) {
        reply(c, id, Status::kError).bytes(std::string_view(e.what())).finish();
        return;
      }
      put(key, to_bytes(std::to_string(sum)));
      reply(c, id).i64(sum).finish();
      return;
    }
    case Command::kCompareSet: {
      std::string key = r.key();
      Bytes expected = r.value();
      Bytes desired = r.value();
      r.expect_end();
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (expected.empty()) {
          reply(c, id).bytes(desired).finish();
          put(key, std::move(desired));
        } else {
          reply(c, id).bytes(expected).finish();
        }
      } else if (it->second == expected) {
        it->second = std::move(desired);
        reply(c, id).bytes(it->second).finish();
      } else {
        reply(c, id).bytes(it->second).finish();
      }
      return;
    }
    case Command::kCheck: {
      std::vector<std::string> keys = r.keys();
      r.expect_end();
      bool all = std::all_of(keys.begin(), keys.end(),
                             [this](const std::string& k) { return data_.contains(k); });
      reply(c, id).u8(all ? 1 : 0).finish();
      return;
    }
    case Command::kDelete: {
      std::string key = r.key();
      r.expect_end();
      reply(c, id).u8(data_.erase(key) > 0 ? 1 : 0).finish();
      return;
    }
    case Command::kNumKeys:
      r.expect_end();
      reply(c, id).i64(static_cast<int64_t>(data_.size())).finish();
      return;
    case Command::kAppend: {
      std::string key = r.key();
      Bytes value = r.value();
      r.expect_end();
      auto it = data_.find(key);
      if (it != data_.end()) {
        // The value limit holds for what APPEND builds too; refused, nothing changes.
        const size_t total = it->second.size() + value.size();
        if (total > limits_.max_value_bytes) {
          reply(c, id, Status::kError)
              .bytes(std::string_view(detail::str_cat(
                  "append to '", key, "' would make its value ", total,
                  " bytes, over TDIST_STORE_MAX_VALUE_BYTES=", limits_.max_value_bytes)))
              .finish();
          return;
        }
        it->second.insert(it->second.end(), value.begin(), value.end());
      } else {
        put(key, std::move(value));
      }
      reply(c, id).finish();
      return;
    }
    case Command::kMultiSet: {
      uint32_t n = r.count(8);
      std::vector<std::pair<std::string, Bytes>> items;
      items.reserve(n);
      for (uint32_t i = 0; i < n; ++i) {
        std::string key = r.key();
        items.emplace_back(std::move(key), r.value());
      }
      r.expect_end();  // apply nothing from a malformed request
      for (auto& [key, value] : items) put(key, std::move(value));
      reply(c, id).finish();
      return;
    }
    case Command::kPing:
      r.expect_end();
      reply(c, id).finish();
      return;
    case Command::kAuthHello:
    case Command::kAuthProof:
      if (key_.enabled()) TDIST_THROW(PeerError, "the connection authenticated already");
      reply(c, id, Status::kError)
          .bytes(std::string_view(
              detail::str_cat("this store has no authentication token, and the client has one (",
                              net::auth::kTokenHint, ")")))
          .finish();
      return;
    case Command::kCancel: {
      uint32_t wait_id = r.u32();
      r.expect_end();
      std::vector<std::string> missing;
      auto it = c.waits.find(wait_id);
      bool parked = it != c.waits.end();
      if (parked) {
        for (const auto& k : it->second->keys) {
          if (!data_.contains(k)) missing.push_back(k);
        }
        unpark(*it->second);
        erase_wait(c, it);
      }
      reply(c, id).u8(parked ? 1 : 0).keys(missing).finish();
      return;
    }
  }
  TDIST_THROW(PeerError, "unknown command code ", static_cast<int>(h.code));
}

bool StoreServer::decoding_fits(Connection& c, const store_wire::FrameHeader& h,
                                std::span<const uint8_t> payload) {
  const auto command = static_cast<Command>(h.code);
  size_t item = 0;  // decoded bytes per listed key, besides the key's own bytes
  if (command == Command::kWait || command == Command::kMultiGet || command == Command::kCheck) {
    item = sizeof(std::string);
  } else if (command == Command::kMultiSet) {
    item = sizeof(std::pair<std::string, Bytes>);
  }
  if (item == 0 || payload.size() < 4) return true;  // no list, or malformed: handle() says
  const size_t n = PayloadReader(payload, limits_).u32();
  const size_t cost = payload.size() + n * item;
  if (fits_budget(cost)) return true;
  reply(c, h.request_id, Status::kError)
      .bytes(std::string_view(detail::str_cat(
          "the server's buffers are full: a ", store_wire::command_name(h.code), " naming ", n,
          " keys takes ", cost, " bytes decoded (", buffered_, " of ", buffer_budget_,
          " bytes in use; TDIST_STORE_MAX_BUFFER_BYTES); try again later")))
      .finish();
  return false;
}

bool StoreServer::handle_auth(Connection& c, const store_wire::FrameHeader& h,
                              std::span<const uint8_t> payload) {
  using Auth = Connection::Auth;
  const auto command = static_cast<Command>(h.code);
  const Command expected = c.auth == Auth::kAwaitHello ? Command::kAuthHello : Command::kAuthProof;
  if (command != expected) {
    refuse(c, detail::str_cat("authentication required, and the client sent ",
                              store_wire::command_name(h.code), " instead of ",
                              store_wire::command_name(static_cast<uint8_t>(expected)), " (",
                              net::auth::kTokenHint, ")"));
    return false;
  }
  const size_t want =
      command == Command::kAuthHello ? net::auth::kNonceBytes : net::auth::kMacBytes;
  Bytes field;
  try {
    PayloadReader r(payload, limits_);
    field = r.value();
    r.expect_end();
  } catch (const PeerError&) {
  }
  if (field.size() != want) {
    refuse(c, detail::str_cat("malformed ", store_wire::command_name(h.code)));
    return false;
  }
  if (command == Command::kAuthHello) {
    c.responder.emplace(key_, "tcp-store", field.data());
    auto challenge = c.responder->challenge();
    reply(c, h.request_id).bytes(std::span<const uint8_t>(challenge)).finish();
    c.auth = Auth::kAwaitProof;
    return true;
  }
  if (!c.responder->check(field.data())) {
    refuse(c, detail::str_cat("wrong authentication token (", net::auth::kTokenHint, ")"));
    return false;
  }
  c.responder.reset();
  c.auth = Auth::kDone;
  reply(c, h.request_id).finish();
  TDIST_LOG(kTrace) << "TCPStore server: " << c.peer << " authenticated";
  return true;
}

void StoreServer::put(const std::string& key, Bytes value) {
  auto [it, created] = data_.insert_or_assign(key, std::move(value));
  (void)it;
  if (created) key_created(key);
}

void StoreServer::park_or_complete(Connection& c, uint32_t request_id, Command command,
                                   std::vector<std::string> keys) {
  if (c.waits.contains(request_id)) {
    TDIST_THROW(PeerError, "request id ", request_id, " is already waiting");
  }
  const bool ready = std::all_of(keys.begin(), keys.end(),
                                 [this](const std::string& k) { return data_.contains(k); });
  if (c.waits.size() >= max_waits_per_connection_ && !ready) {
    reply(c, request_id, Status::kError)
        .bytes(
            std::string_view(detail::str_cat(c.waits.size(),
                                             " requests already wait on this connection, the most "
                                             "TDIST_STORE_MAX_WAITS_PER_CONNECTION=",
                                             max_waits_per_connection_, " allows")))
        .finish();
    return;
  }
  // A parked request's keys are the server's memory too (a WAIT naming millions of short
  // keys is several times its frame): they count against the buffer budget while it waits.
  size_t cost = sizeof(Waiter) + 2 * sizeof(std::shared_ptr<Waiter>) + 64;
  for (const auto& k : keys) cost += sizeof(std::string) + k.size();
  if (!ready && !fits_budget(cost)) {
    reply(c, request_id, Status::kError)
        .bytes(std::string_view(detail::str_cat(
            "the server's buffers are full: a request waiting on ", keys.size(), " keys (", cost,
            " bytes) does not fit (", buffered_, " of ", buffer_budget_,
            " bytes in use; TDIST_STORE_MAX_BUFFER_BYTES); try again later")))
        .finish();
    return;
  }
  auto w = std::make_shared<Waiter>(Waiter{c.id, request_id, command, std::move(keys)});
  w->cost = cost;
  buffered_ += cost;
  c.waits.emplace(request_id, w);
  advance(w);
}

void StoreServer::key_created(const std::string& key) {
  auto it = parked_.find(key);
  if (it == parked_.end()) return;
  WaiterList waiters = std::move(it->second);
  parked_.erase(it);
  for (const auto& w : waiters) {
    w->parked = false;
    advance(w);
  }
}

void StoreServer::advance(const std::shared_ptr<Waiter>& w) {
  const size_t n = w->keys.size();
  while (w->next < n && data_.contains(w->keys[w->next])) ++w->next;
  if (w->next == n) {
    // Keys seen earlier may have been deleted since; complete only when all exist now.
    for (size_t i = 0; i < n; ++i) {
      if (!data_.contains(w->keys[i])) {
        w->next = i;
        break;
      }
    }
  }
  if (w->next < n) {
    WaiterList& list = parked_[w->keys[w->next]];
    w->slot = list.insert(list.end(), w);
    w->parked = true;
    return;
  }
  Connection* c = find(w->conn_id);
  if (c == nullptr) return;
  complete(*c, *w);
  erase_wait(*c, c->waits.find(w->request_id));  // may free *w
}

void StoreServer::complete(Connection& c, const Waiter& w) {
  // The reply's size is known before it is built: one too large for a frame (a MULTI_GET
  // naming a large value many times), or for the server's buffers while they are full, is
  // refused instead, and nothing is built.
  size_t bytes = store_wire::kHeaderBytes;
  if (w.command == Command::kGet) bytes += 4 + data_.at(w.keys[0]).size();
  if (w.command == Command::kMultiGet) {
    bytes += 4;
    for (const auto& k : w.keys) bytes += 4 + data_.at(k).size();
  }
  std::string refusal;
  if (bytes - store_wire::kLengthBytes > limits_.max_frame_bytes()) {
    refusal = detail::str_cat("the reply to this multi_get of ", w.keys.size(), " keys would be ",
                              bytes, " bytes, over the frame limit of ", limits_.max_frame_bytes(),
                              " (TDIST_STORE_MAX_VALUE_BYTES + 1 MiB)");
  } else if (!fits_budget(bytes)) {
    refusal = detail::str_cat("the server's buffers are full: a reply of ", bytes,
                              " bytes does not fit (", buffered_, " of ", buffer_budget_,
                              " bytes in use; TDIST_STORE_MAX_BUFFER_BYTES); try again later");
  }
  if (!refusal.empty()) {
    reply(c, w.request_id, Status::kError).bytes(std::string_view(refusal)).finish();
    account(c);
    return;
  }
  FrameWriter out = reply(c, w.request_id);
  if (w.command == Command::kGet) {
    out.bytes(data_.at(w.keys[0]));
  } else if (w.command == Command::kMultiGet) {
    out.u32(static_cast<uint32_t>(w.keys.size()));
    for (const auto& k : w.keys) out.bytes(data_.at(k));
  }
  out.finish();
  account(c);
}

void StoreServer::unpark(Waiter& w) {
  if (!w.parked) return;
  w.parked = false;
  auto it = parked_.find(w.keys[w.next]);
  if (it == parked_.end()) return;
  it->second.erase(w.slot);
  if (it->second.empty()) parked_.erase(it);
}

void StoreServer::drop_waits(Connection& c) {
  for (auto& [id, w] : c.waits) {
    unpark(*w);
    buffered_ -= w->cost;
  }
  c.waits.clear();
}

void StoreServer::erase_wait(Connection& c,
                             std::unordered_map<uint32_t, std::shared_ptr<Waiter>>::iterator it) {
  buffered_ -= it->second->cost;
  c.waits.erase(it);
}

}  // namespace tdist::store_internal
