// ContextComm and make_context_comm (context_comm.h).
#include "transport/context_comm.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "tdist/error.h"
#include "transport/core/engine.h"

namespace tdist::transport {
namespace {

// A receive of a ContextComm: the sender named as the group's rank.
class OurRequest final : public Request {
 public:
  OurRequest(RequestPtr inner, const std::vector<int>& ours)
      : inner_(std::move(inner)), ours_(ours) {}
  void wait(Deadline deadline) override { inner_->wait(deadline); }
  bool test() override { return inner_->test(); }
  int source() const override {
    const int engine_rank = inner_->source();
    return engine_rank < 0 ? -1 : ours_[static_cast<size_t>(engine_rank)];
  }

 private:
  RequestPtr inner_;
  const std::vector<int>& ours_;  // the ContextComm's, which outlives its requests
};

}  // namespace

std::unique_ptr<Comm> make_context_comm(const std::shared_ptr<Comm>& parent,
                                        const std::vector<int>& members, Store& store,
                                        Deadline deadline) {
  // The Engine under `parent`, and its rank of each member.
  std::shared_ptr<Comm> owner = parent;
  std::vector<int> ranks = members;
  if (const auto* context = dynamic_cast<const ContextComm*>(parent.get())) {
    owner = context->engine_comm();
    for (int& r : ranks) r = context->engine_ranks()[static_cast<size_t>(r)];
  }
  auto* engine = dynamic_cast<core::Engine*>(owner.get());
  if (engine == nullptr) return nullptr;
  const auto me = std::find(members.begin(), members.end(), parent->rank());
  TDIST_CHECK(me != members.end(), InvalidArgument, "rank ", parent->rank(),
              ": a split's Comm made on a rank that is not a member");

  // Each member's lowest unused context, and whether shared memory joins it to the others.
  bool shm = true;
  for (int r : ranks) {
    const char* kind = engine->channel_kind(r);
    shm = shm && (kind == nullptr || std::strcmp(kind, "shm") == 0);
  }
  std::vector<std::string> keys;
  for (size_t i = 0; i < members.size(); ++i) keys.push_back("context/" + std::to_string(i));
  store.set(keys[static_cast<size_t>(me - members.begin())],
            std::to_string(engine->free_context()) + (shm ? ",shm" : ",other"));
  uint64_t context = 0;
  for (const Bytes& value : store.multi_get(keys, deadline)) {
    const std::string text = to_string(value);
    context = std::max<uint64_t>(context, std::stoull(text));
    shm = shm && text.ends_with(",shm");
  }
  if (context > kMaxContext) return nullptr;
  engine->claim_context(static_cast<uint32_t>(context));

  Topology topology = parent->topology().of_ranks(members);
  if (shm) topology.link = LinkClass::kShm;
  auto comm = std::make_unique<ContextComm>(std::move(owner), std::move(ranks),
                                            static_cast<uint32_t>(context));
  comm->set_topology(std::move(topology));
  return comm;
}

ContextComm::ContextComm(std::shared_ptr<Comm> engine, std::vector<int> ranks, uint32_t context)
    : owner_(std::move(engine)),
      engine_(dynamic_cast<core::Engine&>(*owner_)),
      ranks_(std::move(ranks)),
      ours_(static_cast<size_t>(engine_.size()), -1),
      context_(context) {
  TDIST_CHECK(context >= 1 && context <= kMaxContext, InvalidArgument, "transport: context ",
              context, " is outside 1..", kMaxContext);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const int r = ranks_[i];
    TDIST_CHECK(r >= 0 && r < engine_.size() && ours_[static_cast<size_t>(r)] < 0, InvalidArgument,
                "transport: context ", context, ": rank ", r,
                " is not a rank of the Comm, or is listed twice");
    ours_[static_cast<size_t>(r)] = static_cast<int>(i);
  }
  rank_ = ours_[static_cast<size_t>(engine_.rank())];
  TDIST_CHECK(rank_ >= 0, InvalidArgument, "transport: context ", context, ": rank ",
              engine_.rank(), " is not a member");
  engine_.open_context(context, ranks_);
}

int ContextComm::engine_rank(int peer) const {
  TDIST_CHECK(peer >= 0 && peer < size() && peer != rank_, InvalidArgument, "rank ", rank_,
              ": rank ", peer, ": not another rank of this group (size ", size(), ")");
  return ranks_[static_cast<size_t>(peer)];
}

uint64_t ContextComm::tag_in_context(uint64_t tag) const {
  TDIST_CHECK(tag_context(tag) == 0, InvalidArgument, "rank ", rank_, ": tag 0x", std::hex, tag,
              " is reserved by the transport");
  return in_context(tag, context_);
}

RequestPtr ContextComm::ours(RequestPtr request) const {
  return std::make_unique<OurRequest>(std::move(request), ours_);
}

RequestPtr ContextComm::isend(int peer, uint64_t tag, const void* data, size_t bytes) {
  return engine_.isend(engine_rank(peer), tag_in_context(tag), data, bytes);
}

RequestPtr ContextComm::irecv(int peer, uint64_t tag, void* data, size_t bytes) {
  return ours(engine_.irecv(engine_rank(peer), tag_in_context(tag), data, bytes));
}

bool ContextComm::carries_device(int peer) const {
  return peer >= 0 && peer < size() && engine_.carries_device(ranks_[static_cast<size_t>(peer)]);
}

RequestPtr ContextComm::isend_device(int peer, uint64_t tag, const void* data, size_t bytes) {
  return engine_.isend_device(engine_rank(peer), tag_in_context(tag), data, bytes);
}

RequestPtr ContextComm::irecv_device(int peer, uint64_t tag, void* data, size_t bytes) {
  return ours(engine_.irecv_device(engine_rank(peer), tag_in_context(tag), data, bytes));
}

RequestPtr ContextComm::irecv_any(uint64_t tag, void* data, size_t bytes) {
  return ours(engine_.irecv_any(tag_in_context(tag), data, bytes));
}

RequestPtr ContextComm::irecv_any_device(uint64_t tag, void* data, size_t bytes) {
  return ours(engine_.irecv_any_device(tag_in_context(tag), data, bytes));
}

void ContextComm::begin_collective(uint64_t seq, const tdist::core::OpFingerprint& fp) {
  engine_.begin_context_collective(context_, seq, fp);
}

void ContextComm::check_arrivals() {
  engine_.read_arrivals();
  if (std::exception_ptr failed = error()) std::rethrow_exception(failed);
}

void ContextComm::abort(std::exception_ptr reason) {
  if (!reason) {
    reason = std::make_exception_ptr(
        PeerError(detail::str_cat("rank ", rank_, ": the Comm was aborted")));
  }
  engine_.abort_context(context_, std::move(reason));
}

std::exception_ptr ContextComm::error() const { return engine_.context_error(context_); }

}  // namespace tdist::transport
