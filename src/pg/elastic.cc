// ElasticGroup (tdist/elastic.h): generations of a job's group, formed through its store.
#include "tdist/elastic.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "rendezvous/init_method.h"
#include "tdist/backend.h"
#include "tdist/logging.h"
#include "tdist/prefix_store.h"
#include "tdist/settings.h"

namespace tdist {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr char kPrefix[] = "tdist/elastic";
constexpr std::chrono::hours kHour{1};

std::string gen_key(int generation, const std::string& name) {
  return "g/" + std::to_string(generation) + "/" + name;
}

std::vector<int> parse_slots(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(std::stoi(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

std::string join_slots(const std::vector<int>& slots) {
  std::string out;
  for (int s : slots) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

// The value of `key`, or "" when it does not exist (never blocks).
std::string peek(Store& store, const std::string& key) {
  if (!store.check({key})) return "";
  return to_string(store.get(key));
}

// Unique per process and join: tells a slot's two claimants apart.
std::string claim_tag(bool survivor) {
  static const uint64_t seed = std::random_device{}();
  static std::atomic<uint64_t> joins{0};
  return std::string(survivor ? "s" : "n") + ":" + std::to_string(::getpid()) + ":" +
         std::to_string(seed) + ":" + std::to_string(joins++);
}

}  // namespace

std::unique_ptr<ElasticGroup> ElasticGroup::join(ElasticOptions options,
                                                 const std::string& init_method) {
  JobStore job;
  try {
    job = open_job_store(init_method, -1, -1, options.timeout, "ElasticGroup::join",
                         /*must_survive_ranks=*/true);
  } catch (const AuthError& e) {  // another job's token, or none: name who was refused
    const int slot = rendezvous_detail::parse_init_method(init_method, -1, -1).rank;
    TDIST_THROW(AuthError, "elastic: slot ", slot,
                " was refused by the job's store, so it joins no generation: ", e.what());
  }
  if (const std::string spare = setting_string("TDIST_ELASTIC_SPARE"); !spare.empty()) {
    PrefixStore elastic(kPrefix, job.store);
    for (;;) {  // until tdistrun gives this spare a slot (or stops it with the job)
      try {
        const std::string slot = to_string(elastic.get("spare/" + spare, Deadline::after(kHour)));
        TDIST_LOG(kInfo) << "elastic: spare " << spare << " takes slot " << slot;
        return join(std::move(job.store), std::stoi(slot), job.world_size, std::move(options));
      } catch (const TimeoutError&) {
      }
    }
  }
  return join(std::move(job.store), job.rank, job.world_size, std::move(options));
}

std::unique_ptr<ElasticGroup> ElasticGroup::join(std::shared_ptr<Store> store, int slot, int slots,
                                                 ElasticOptions options) {
  TDIST_CHECK(store != nullptr, InvalidArgument, "ElasticGroup::join: the store is null");
  TDIST_CHECK(slots >= 1 && slot >= 0 && slot < slots, InvalidArgument, "ElasticGroup::join: slot ",
              slot, " of ", slots, " is invalid; pass a slot in 0..", slots - 1);
  TDIST_CHECK(options.min_size >= 1 && options.min_size <= slots, InvalidArgument,
              "ElasticGroup::join: min_size ", options.min_size, " must be in 1..", slots);
  (void)backend_factory(options.backend);  // InvalidArgument naming the registered ones
  if (options.join_window.count() < 0) {
    options.join_window = setting_seconds("TDIST_ELASTIC_JOIN_WINDOW");
  }
  std::unique_ptr<ElasticGroup> job(new ElasticGroup(std::move(store), slot, slots, options));
  const std::string closed = peek(*job->store_, "closed");
  job->newcomer_ = !closed.empty();
  job->enter(closed.empty() ? 0 : std::stoi(closed) + 1, /*survivor=*/closed.empty());
  return job;
}

ElasticGroup::ElasticGroup(std::shared_ptr<Store> store, int slot, int slots,
                           ElasticOptions options)
    : store_(std::make_shared<PrefixStore>(kPrefix, std::move(store))),
      slot_(slot),
      slots_(slots),
      options_(std::move(options)) {}

ElasticGroup::~ElasticGroup() = default;

void ElasticGroup::enter(int generation, bool survivor) {
  const Clock::time_point start = Clock::now();
  const Deadline deadline = Deadline::after(options_.timeout);
  for (int g = generation;; ++g) {
    const std::string tag = claim_tag(survivor);
    const std::string held = to_string(
        store_->compare_set(gen_key(g, "in/" + std::to_string(slot_)), {}, to_bytes(tag)));
    if (held != tag) {
      TDIST_THROW(StaleMemberError, "elastic: slot ", slot_, " was already taken in generation ", g,
                  " by another process (a replacement started while this one hung?); this ",
                  !survivor ? std::string("newcomer")
                  : g > 0   ? "member of generation " + std::to_string(g - 1)
                            : std::string("process"),
                  " must exit");
    }
    store_->add(gen_key(g, "arrived"), 1);
    std::vector<int> members = close(g, survivor);
    const auto me = std::find(members.begin(), members.end(), slot_);
    if (me == members.end()) {
      if (survivor) {
        TDIST_THROW(StaleMemberError, "elastic: slot ", slot_, " (rank of generation ", g - 1,
                    ") arrived after generation ", g, " closed without it (members: slots ",
                    join_slots(members), "); this process must exit");
      }
      TDIST_CHECK(!deadline.expired(), TimeoutError, "elastic: slot ", slot_,
                  " found no generation to join within ", options_.timeout.count(), " ms");
      continue;  // a newcomer that came late: the next generation
    }
    const int rank = static_cast<int>(me - members.begin());
    auto pg_store = std::make_shared<PrefixStore>(gen_key(g, "pg"), store_);
    pg_store->set_timeout(options_.timeout);
    group_ = backend_factory(options_.backend)(std::move(pg_store), rank,
                                               static_cast<int>(members.size()), options_.timeout);
    TDIST_CHECK(group_ != nullptr, Error, "elastic: backend '", options_.backend,
                "' made no group");
    store_->set("closed", std::to_string(g));
    generation_ = g;
    members_ = std::move(members);
    last_reconfigure_ = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    TDIST_LOG(kInfo) << "elastic: slot " << slot_ << " is rank " << rank << " of "
                     << members_.size() << " in generation " << g << " (slots "
                     << join_slots(members_) << ")";
    return;
  }
}

std::vector<int> ElasticGroup::close(int generation, bool survivor) {
  const Clock::time_point window_end = Clock::now() + options_.join_window;
  const Deadline deadline = Deadline::after(options_.timeout);
  const bool may_close_early = survivor && generation > 0;
  milliseconds pause{1};
  for (;;) {
    const std::string decided = peek(*store_, gen_key(generation, "members"));
    if (!decided.empty()) return parse_slots(decided);
    const int64_t arrived = store_->add(gen_key(generation, "arrived"), 0);
    std::vector<int> gone = parse_slots(peek(*store_, "gone"));
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    const int64_t expected = slots_ - static_cast<int64_t>(gone.size());
    const bool everyone = arrived >= expected;
    if (everyone || (may_close_early && Clock::now() >= window_end)) {
      std::vector<int> members;
      for (int s = 0; s < slots_; ++s) {
        if (store_->check({gen_key(generation, "in/" + std::to_string(s))})) members.push_back(s);
      }
      TDIST_CHECK(static_cast<int>(members.size()) >= options_.min_size, Error,
                  "elastic: generation ", generation, " would have ", members.size(),
                  " members (slots ", join_slots(members), "), fewer than min_size ",
                  options_.min_size);
      const std::string csv = join_slots(members);
      return parse_slots(
          to_string(store_->compare_set(gen_key(generation, "members"), {}, to_bytes(csv))));
    }
    if (deadline.expired()) {
      TDIST_THROW(TimeoutError, "elastic: generation ", generation, " did not form within ",
                  options_.timeout.count(), " ms: ", arrived, " of ", expected,
                  " slots arrived (slot ", slot_, " waiting)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(8));
  }
}

void ElasticGroup::reconfigure() {
  if (group_) group_->abort();
  group_.reset();
  enter(generation_ + 1, /*survivor=*/true);
}

bool ElasticGroup::commit(bool ok) {
  int32_t vote = ok ? 1 : 0;
  {
    WaitsAtOnce at_once;
    group_->all_reduce(&vote, 1, DType::kI32, ReduceOpKind::kMin)->wait();
  }
  return vote == 1;
}

void ElasticGroup::assign_spare(Store& store, const std::string& spare, int slot) {
  store.set(std::string(kPrefix) + "/spare/" + spare, std::to_string(slot));
}

void ElasticGroup::mark_slot_gone(Store& store, int slot) {
  store.append(std::string(kPrefix) + "/gone", to_bytes(std::to_string(slot) + ","));
}

}  // namespace tdist
