// Checkpointer (checkpoint.h): saving. Each rank writes the tensors it owns to its file in a
// temporary folder; the ranks report through the group's store; rank 0 writes the index and
// renames the folder into place (docs/checkpoint.md: "The commit").
#include "checkpoint_save.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "checkpoint_files.h"
#include "safetensors.h"
#include "tdist/bytes_collectives.h"
#include "tdist/distributed.h"
#include "tdist/error.h"
#include "tdist/logging.h"

namespace tdist::checkpoint {
namespace {

using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

int64_t bytes_of(const TensorEntry& e) {
  return static_cast<int64_t>(e.data.numel()) * static_cast<int64_t>(e.data.element_size());
}

// What this rank writes: its rows of every sharded tensor, and its share of the replicated
// ones (largest first, each to the rank with the fewest bytes so far: every rank computes
// the same from the same entries).
std::vector<size_t> plan_writes(const std::vector<TensorEntry>& tensors, int rank, int world) {
  std::vector<size_t> mine, shared;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].replicated) {
      if (tensors[i].data.numel() > 0) mine.push_back(i);
    } else {
      shared.push_back(i);
    }
  }
  std::sort(shared.begin(), shared.end(), [&](size_t a, size_t b) {
    const int64_t x = bytes_of(tensors[a]), y = bytes_of(tensors[b]);
    return x != y ? x > y : tensors[a].name < tensors[b].name;
  });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  for (size_t i : shared) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    load[static_cast<size_t>(least)] += std::max<int64_t>(1, bytes_of(tensors[i]));
    if (least == rank) mine.push_back(i);
  }
  return mine;
}

// The entries' names, dtypes, global shapes and kinds, and the values' names, as one text
// (the same on every rank of a consistent save).
std::string signature(const State::Snapshot& s) {
  std::vector<std::string> lines;
  for (const TensorEntry& t : s.tensors) {
    std::ostringstream line;
    line << t.name << ' ' << c10::toString(t.data.scalar_type()) << ' '
         << c10::IntArrayRef(t.global_shape) << (t.replicated ? " r" : " s");
    lines.push_back(line.str());
  }
  for (const auto& [name, v] : s.values) lines.push_back(name + " value");
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

void check_names(const State::Snapshot& s) {
  std::set<std::string> seen;
  for (const TensorEntry& t : s.tensors) {
    TDIST_CHECK(seen.insert(t.name).second, InvalidArgument, "checkpoint: the state names '",
                t.name, "' twice");
  }
  for (const auto& [name, v] : s.values) {
    TDIST_CHECK(seen.insert(name).second, InvalidArgument, "checkpoint: the state names '", name,
                "' twice");
  }
}

}  // namespace

Checkpointer::Impl::Image::Image(size_t cap) : capacity(cap) {
  // Its own mapping, faulted in at once (MAP_POPULATE: in bulk, several times faster than a
  // fault per page), of small pages: huge ones are compacted on fault where THP is in
  // madvise mode, which measured 4x slower here.
  void* p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
  TDIST_CHECK(p != MAP_FAILED, Error, "checkpoint: cannot map ", cap,
              " bytes of staging memory: ", std::strerror(errno));
  data = static_cast<char*>(p);
}

Checkpointer::Impl::Image::~Image() { ::munmap(data, capacity); }

Checkpointer::Impl::Impl(std::string d, CheckpointOptions o)
    : dir(std::move(d)), options(std::move(o)) {
  TDIST_CHECK(!dir.empty(), InvalidArgument, "checkpoint: the folder name is empty");
  TDIST_CHECK(options.keep_last >= 0 && options.timeout.count() > 0, InvalidArgument,
              "checkpoint: keep_last must be >= 0 and the timeout positive");
  group = options.group;
  if (!group && is_initialized()) group = get_default_group();
  if (group) {
    rank = group->rank();
    world = group->size();
  }
}

void Checkpointer::Impl::wait() {
  if (writer.joinable()) writer.join();
  if (failed) {
    std::exception_ptr e = std::exchange(failed, nullptr);
    std::rethrow_exception(e);
  }
}

// What this rank saves: the entries, the index's part, and the items it writes (staged into
// the file's image when `stage`).
void Checkpointer::Impl::prepare(Job& job, const State& state, bool stage) {
  State::Snapshot snap = state.snapshot(rank, world);
  check_names(snap);
  job.signature = "step " + std::to_string(job.step) + "\n" + signature(snap);
  job.values = snap.values;
  for (const TensorEntry& t : snap.tensors) {
    job.tensors[t.name] = {safetensors::dtype_name(t.data.scalar_type(), t.name), t.global_shape,
                           t.replicated};
  }
  const std::vector<size_t> mine = plan_writes(snap.tensors, rank, world);
  ::torch::NoGradGuard no_grad;
  for (size_t i : mine) {
    const TensorEntry& t = snap.tensors[i];
    std::vector<int64_t> offsets(t.global_shape.size(), 0);
    if (!offsets.empty() && !t.replicated) offsets[0] = t.offset;
    ::torch::Tensor data = t.data.detach();
    if (t.global_shape.empty()) data = data.reshape({});
    if (!stage && (!data.device().is_cpu() || !data.is_contiguous())) {
      data = data.contiguous().cpu();
    }
    job.items.push_back({t.name, data, offsets});
  }
  if (stage && !job.items.empty()) {
    // The file's image: the header, then each tensor copied to its place (a buffer kept
    // between saves, so only the first save faults its pages in).
    const safetensors::Layout l = safetensors::layout(job.items);
    const size_t need = (l.size + safetensors::kImageAlign - 1) / safetensors::kImageAlign *
                        safetensors::kImageAlign;
    if (!image || image->capacity < need) image = std::make_shared<Image>(need);
    std::memcpy(image->data, l.head.data(), l.head.size());
    for (size_t k = 0; k < job.items.size(); ++k) {
      const ::torch::Tensor& src = job.items[k].data;
      ::torch::from_blob(image->data + l.begin[k], src.sizes(), src.options().device(::torch::kCPU))
          .copy_(src);
    }
    job.image = image;
    job.image_size = l.size;
    job.items.clear();
  }
}

// A save this rank could not start: its error where the others wait for it (rank 0's
// folder, or this rank's report), so that every rank raises it instead of timing out.
void Checkpointer::Impl::abandon(const Job& job, const std::string& error) noexcept {
  try {
    Store& store = *group->store();
    if (rank == 0) {
      store.set(job.keys + "tmp", "error " + error);
    } else {
      store.set(job.keys + "done/" + std::to_string(rank), ordered_json{{"error", error}}.dump());
      store.add(job.keys + "reported", 1);
    }
  } catch (const std::exception& e) {
    TDIST_LOG(kError) << "checkpoint: could not tell the other ranks that this one failed: "
                      << e.what();
  }
}

void Checkpointer::Impl::start(int64_t step, const State& state, bool stage) {
  wait();
  const auto t0 = Clock::now();
  Job job;
  job.step = step;
  // The save's number first (every rank adds 1; the same number on every rank): a rank
  // that fails below still has its place, and puts its error where the others look.
  if (group && world > 1) {
    const int64_t n = group->store()->add("tdist_checkpoint/saves", 1);
    job.keys = "tdist_checkpoint/" + std::to_string((n - 1) / world) + "/";
  }
  try {
    TDIST_CHECK(step >= 0, InvalidArgument, "checkpoint: step ", step, " must be >= 0");
    prepare(job, state, stage);
  } catch (const std::exception& e) {
    if (!job.keys.empty()) abandon(job, e.what());
    throw;
  }
  blocking = std::chrono::duration<double>(Clock::now() - t0).count();
  if (stage) {
    writer = std::thread([this, job = std::move(job)]() mutable {
      try {
        run(job);
      } catch (...) {
        failed = std::current_exception();
      }
    });
  } else {
    run(job);
  }
}

// Store keys: <keys>tmp (rank 0: the temporary folder, or an error), <keys>done/<r> (rank
// r's report), <keys>reported (a count), <keys>commit (rank 0: "ok" or the error).
void Checkpointer::Impl::run(const Job& job) {
  const std::string final_dir = dir + "/" + files::step_name(job.step);
  Store* store = job.keys.empty() ? nullptr : group->store().get();
  const auto deadline = Clock::now() + options.timeout;
  // Polls `key` until it exists (sleeping 1 ms growing to 20 ms); its value.
  auto await = [&](const std::string& key, const char* what) {
    auto pause = std::chrono::milliseconds(1);
    while (!store->check({key})) {
      TDIST_CHECK(Clock::now() < deadline, TimeoutError, "checkpoint of step ", job.step, ": ",
                  what, " within ", options.timeout.count(), " ms");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
    return to_string(store->get(key));
  };

  // 1. The temporary folder: made by rank 0, named to the others.
  std::string tmp;
  if (rank == 0) {
    std::string made;
    try {
      files::make_dirs(dir);
      tmp = final_dir + ".tmp." + std::to_string(::getpid()) + "." +
            std::to_string(Clock::now().time_since_epoch().count());
      files::remove_tree(tmp);
      files::make_dirs(tmp);
      made = "ok " + tmp;
    } catch (const std::exception& e) {
      made = std::string("error ") + e.what();
      if (store) store->set(job.keys + "tmp", made);
      throw;
    }
    if (store) store->set(job.keys + "tmp", made);
  } else {
    const std::string got = await(job.keys + "tmp", "rank 0 made no folder");
    TDIST_CHECK(got.rfind("ok ", 0) == 0, Error, "checkpoint of step ", job.step,
                ": rank 0 failed: ", got.substr(6));
    tmp = got.substr(3);
  }

  // 2. This rank's file, then its report.
  ordered_json report = {{"signature", job.signature}};
  std::string error;
  try {
    const std::string name = files::rank_file(rank);
    if (job.image) {
      safetensors::write_image(tmp + "/" + name, job.image->data, job.image_size);
      report["file"] = name;
      report["bytes"] = job.image_size;
    } else if (!job.items.empty()) {
      report["file"] = name;
      report["bytes"] = safetensors::write_file(tmp + "/" + name, job.items);
    }
  } catch (const std::exception& e) {
    error = e.what();
    report["error"] = error;
  }
  if (rank != 0) {
    store->set(job.keys + "done/" + std::to_string(rank), report.dump());
    store->add(job.keys + "reported", 1);
    TDIST_CHECK(error.empty(), Error, error);
    const std::string commit = await(job.keys + "commit", "rank 0 did not commit");
    TDIST_CHECK(commit == "ok", Error, commit);
    return;
  }

  // 3. Rank 0: every report, then the index and the rename.
  std::string commit = "ok";
  try {
    std::vector<ordered_json> reports = {report};
    if (store) {
      auto pause = std::chrono::milliseconds(1);
      while (store->add(job.keys + "reported", 0) < world - 1) {
        TDIST_CHECK(Clock::now() < deadline, TimeoutError, "checkpoint of step ", job.step, ": ",
                    world - 1 - store->add(job.keys + "reported", 0),
                    " ranks did not report within ", options.timeout.count(),
                    " ms (a rank died or hangs)");
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(20));
      }
      std::vector<std::string> keys;
      for (int r = 1; r < world; ++r) keys.push_back(job.keys + "done/" + std::to_string(r));
      for (const Bytes& b : store->multi_get(keys)) {
        reports.push_back(ordered_json::parse(to_string(b)));
      }
    }
    files::Index index;
    index.step = job.step;
    index.world = world;
    index.tensors = job.tensors;
    index.values = job.values;
    for (size_t r = 0; r < reports.size(); ++r) {
      const ordered_json& rep = reports[r];
      TDIST_CHECK(!rep.contains("error"), Error, "rank ", r, ": ",
                  rep.value("error", std::string()));
      TDIST_CHECK(rep.value("signature", std::string()) == job.signature, InvalidArgument, "rank ",
                  r,
                  " saves other entries than rank 0 (names, dtypes or shapes differ, or "
                  "another step): every rank must build the same State and save the same step");
      if (rep.contains("file")) index.files[rep["file"]] = rep["bytes"].get<uint64_t>();
    }
    files::write_synced(tmp + "/" + files::kIndex, files::to_json(index));
    files::fsync_path(tmp);
    files::commit_rename(tmp, final_dir);
  } catch (const std::exception& e) {
    commit = std::string("checkpoint of step ") + std::to_string(job.step) + " failed: " + e.what();
    files::remove_tree(tmp);
  }
  if (store) store->set(job.keys + "commit", commit);
  TDIST_CHECK(commit == "ok", Error, commit);
  try {
    prune(final_dir);  // committed: the other ranks need not wait for this
  } catch (const std::exception& e) {
    TDIST_LOG(kWarn) << "checkpoint: removing old checkpoints of " << dir << ": " << e.what();
  }
}

// After a commit: temporary folders of earlier saves that never finished, and the oldest
// complete checkpoints beyond keep_last.
void Checkpointer::Impl::prune(const std::string& committed) {
  for (const std::string& name : files::list_dir(dir)) {
    if (name.rfind("step-", 0) == 0 && name.find(".tmp.") != std::string::npos) {
      files::remove_tree(dir + "/" + name);
    }
  }
  if (options.keep_last <= 0) return;
  std::map<int64_t, std::string> done = files::complete(dir);
  while (static_cast<int>(done.size()) > options.keep_last) {
    if (done.begin()->second != committed) files::remove_tree(done.begin()->second);
    done.erase(done.begin());
  }
}

Checkpointer::Checkpointer(std::string dir, CheckpointOptions options)
    : impl_(std::make_unique<Impl>(std::move(dir), std::move(options))) {}

Checkpointer::~Checkpointer() {
  try {
    impl_->wait();
  } catch (const std::exception& e) {
    TDIST_LOG(kError) << "checkpoint: the last save failed: " << e.what();
  }
}

void Checkpointer::save(int64_t step, const State& state) { impl_->start(step, state, false); }

void Checkpointer::async_save(int64_t step, const State& state) { impl_->start(step, state, true); }

void Checkpointer::wait() { impl_->wait(); }

double Checkpointer::last_blocking_seconds() const { return impl_->blocking; }

std::optional<int64_t> Checkpointer::resume(const State& state) {
  impl_->wait();
  // Every rank must pick the same folder: rank 0's choice, when there is a group.
  std::optional<std::string> path = latest(impl_->dir);
  if (impl_->group && impl_->world > 1) {
    std::string chosen = path.value_or("");
    broadcast_bytes(*impl_->group, chosen, 0);
    path = chosen.empty() ? std::nullopt : std::optional<std::string>(chosen);
  }
  if (!path) return std::nullopt;
  return load(*path, state, impl_->group);
}

std::optional<std::string> latest(const std::string& dir) {
  std::map<int64_t, std::string> done = files::complete(dir);
  if (done.empty()) return std::nullopt;
  return done.rbegin()->second;
}

void save(const std::string& dir, int64_t step, const State& state) {
  Checkpointer(dir).save(step, state);
}

std::optional<int64_t> resume(const std::string& dir, const State& state) {
  return Checkpointer(dir).resume(state);
}

}  // namespace tdist::checkpoint
