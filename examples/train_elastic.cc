// An elastic DDP job: an MLP (~23 MB of parameters at the default width) trained with SGD
// and momentum on a synthetic classification task, that survives dead ranks. Run it under
// tdistrun --elastic: when a worker dies, the others catch the error, form a new generation
// of the group (tdist::ElasticGroup) with a replacement tdistrun started, and the
// replacement receives the model, the optimizer's state, the step and the sampler's place
// from a survivor (tdist::elastic::recover). With no restart left, the job goes on without
// the dead rank, the rest of the epoch dealt over the survivors.
//
//   tdistrun --standalone --nproc-per-node 4 --elastic --max-restarts 3 train_elastic
//
// Each step is committed by a vote (ElasticGroup::commit, or DDPOptions::commit_vote with
// --vote ddp): a step interrupted by a failure is applied on no rank, or on ranks whose vote
// completed, whose state the others then take; a rank whose loss is not finite vetoes it.
// --restart trains the same job the classic way instead (init_process_group, a checkpoint
// every --checkpoint-every steps, tdistrun --max-restarts restarting the whole job), for
// comparison (scripts/bench_elastic.sh).
//
// For tests and benchmarks: --die SLOT@STEP makes the process holding slot SLOT SIGKILL
// itself in step STEP (after its forward, so the others are left in backward's all_reduce;
// SLOT@STEP:after-vote: after its vote, before its optimizer step), once per job (a file in
// --marks DIR records it and the time). --out PREFIX: each rank writes PREFIX.<slot> with the
// final parameters' hash, the step, the world and the generation, and each step's completion
// time (ns since the epoch) for the benchmark.
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdist/distributed.h"
#include "tdist/elastic.h"
#include "tdist/error.h"
#include "tdist/torch/checkpoint.h"
#include "tdist/torch/ddp.h"
#include "tdist/torch/elastic.h"
#include "tdist/torch/sampler.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: train_elastic [--width N] [--steps N] [--batch-size N (per rank)] [--dataset N]\n"
    "         [--lr X] [--backend NAME] [--join-window SEC] [--die SLOT@STEP[:after-vote]]...\n"
    "         [--marks DIR] [--out PREFIX] [--newcomer-width N] [--vote group|ddp|none]\n"
    "         [--restart --checkpoint DIR --checkpoint-every K]\n";

// Where a --die (or --freeze) strikes.
enum class When { kBeforeBackward, kAfterVote, kInRecover };

struct Death {
  int slot = -1;
  int64_t step = -1;
  When when = When::kBeforeBackward;
  bool freeze = false;  // SIGSTOP instead of SIGKILL
};

struct Flags {
  int64_t width = 2048;
  int64_t steps = 60;
  int64_t batch_size = 32;
  int64_t dataset = 8192;
  double lr = 0.01;
  std::string backend = "auto";
  double join_window = -1;  // seconds; -1: TDIST_ELASTIC_JOIN_WINDOW
  std::vector<Death> deaths;
  std::string marks = ".";
  std::string out;
  int64_t newcomer_width = 0;  // a replacement builds this width instead (bad-input tests)
  std::string vote = "group";  // group (ElasticGroup::commit), ddp (DDPOptions), none
  bool restart = false;
  std::string checkpoint;
  int64_t checkpoint_every = 0;
};

bool parse_death(const std::string& text, Death& d) {
  const size_t at = text.find('@');
  if (at == std::string::npos) return false;
  d.slot = std::atoi(text.substr(0, at).c_str());
  std::string rest = text.substr(at + 1);
  const size_t colon = rest.find(':');
  if (colon != std::string::npos) {
    const std::string when = rest.substr(colon + 1);
    if (when == "after-vote") {
      d.when = When::kAfterVote;
    } else if (when == "in-recover") {
      d.when = When::kInRecover;
    } else {
      return false;
    }
    rest = rest.substr(0, colon);
  }
  d.step = std::atoll(rest.c_str());
  return d.slot >= 0 && d.step >= 0;
}

bool parse_flags(int argc, char** argv, Flags& f) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--restart") {
      f.restart = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (flag == "--width") {
      f.width = std::atoll(v.c_str());
    } else if (flag == "--steps") {
      f.steps = std::atoll(v.c_str());
    } else if (flag == "--batch-size") {
      f.batch_size = std::atoll(v.c_str());
    } else if (flag == "--dataset") {
      f.dataset = std::atoll(v.c_str());
    } else if (flag == "--lr") {
      f.lr = std::atof(v.c_str());
    } else if (flag == "--backend") {
      f.backend = v;
    } else if (flag == "--join-window") {
      f.join_window = std::atof(v.c_str());
    } else if (flag == "--die" || flag == "--freeze") {
      Death d;
      if (!parse_death(v, d)) return false;
      d.freeze = flag == "--freeze";
      f.deaths.push_back(d);
    } else if (flag == "--marks") {
      f.marks = v;
    } else if (flag == "--out") {
      f.out = v;
    } else if (flag == "--newcomer-width") {
      f.newcomer_width = std::atoll(v.c_str());
    } else if (flag == "--vote") {
      f.vote = v;
    } else if (flag == "--checkpoint") {
      f.checkpoint = v;
    } else if (flag == "--checkpoint-every") {
      f.checkpoint_every = std::atoll(v.c_str());
    } else {
      return false;
    }
  }
  return f.width > 0 && f.steps > 0 && f.batch_size > 0 && f.dataset > 0 && f.lr > 0 &&
         (f.vote == "group" || f.vote == "ddp" || f.vote == "none") &&
         (!f.restart || (!f.checkpoint.empty() && f.checkpoint_every > 0));
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Sample i of the synthetic task: a deterministic 784-vector and its class.
torch::Tensor inputs(const std::vector<size_t>& indices) {
  auto idx = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kFloat32);
  auto cols = torch::arange(784, torch::kFloat32);
  return torch::sin(idx.unsqueeze(1) * 0.37 + cols.unsqueeze(0) * (0.01 + idx.unsqueeze(1) * 1e-5));
}

torch::Tensor labels(const std::vector<size_t>& indices) {
  std::vector<int64_t> out;
  for (size_t i : indices) out.push_back(static_cast<int64_t>((i * 7 + i / 13) % 10));
  return torch::tensor(out, torch::kInt64);
}

torch::nn::Sequential make_model(int64_t width) {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(784, width), torch::nn::ReLU(),
                               torch::nn::Linear(width, width), torch::nn::ReLU(),
                               torch::nn::Linear(width, 10));
}

// FNV-1a over every parameter's bytes.
uint64_t params_hash(const torch::nn::Module& m) {
  uint64_t h = 1469598103934665603ULL;
  for (const auto& p : m.parameters()) {
    torch::Tensor t = p.detach().contiguous();
    const auto* b = static_cast<const unsigned char*>(t.data_ptr());
    for (size_t i = 0; i < static_cast<size_t>(t.nbytes()); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}

// --die / --freeze: SIGKILLs (SIGSTOPs) this process when it holds `slot` in `step` at
// `when`, once per job. The mark file has the time and the pid.
void maybe_die(const Flags& flags, int slot, int64_t step, When when) {
  for (size_t i = 0; i < flags.deaths.size(); ++i) {
    const Death& d = flags.deaths[i];
    if (d.slot != slot || d.step != step || d.when != when) continue;
    const fs::path mark = fs::path(flags.marks) / ("died-" + std::to_string(i));
    if (fs::exists(mark)) continue;
    std::ofstream(mark) << now_ns() << " " << slot << " " << step << " " << ::getpid() << "\n";
    std::fprintf(stderr, "train_elastic: slot %d %s in step %lld\n", slot,
                 d.freeze ? "freezes" : "dies", static_cast<long long>(step));
    std::fflush(stderr);
    ::kill(::getpid(), d.freeze ? SIGSTOP : SIGKILL);
  }
}

struct Report {
  std::vector<std::pair<int64_t, int64_t>> steps;  // (step, completion time ns)
  std::vector<std::string> events;
};

void write_report(const Flags& flags, int slot, const torch::nn::Module& model, int64_t step,
                  int world, int generation, const Report& report) {
  if (flags.out.empty()) return;
  std::ofstream out(flags.out + "." + std::to_string(slot));
  out << "hash " << params_hash(model) << " step " << step << " world " << world << " generation "
      << generation << "\n";
  for (const std::string& e : report.events) out << "event " << e << "\n";
  for (const auto& [s, t] : report.steps) out << "done " << s << " " << t << "\n";
}

// True for the errors a dead or frozen peer causes, as they come out of backward too.
bool peer_failure(const std::exception& e) {
  if (dynamic_cast<const tdist::PeerError*>(&e) || dynamic_cast<const tdist::TimeoutError*>(&e)) {
    return true;
  }
  const std::string what = e.what();
  return what.find("PeerError") != std::string::npos ||
         what.find("TimeoutError") != std::string::npos ||
         what.find("aborted") != std::string::npos;
}

int train_elastic(const Flags& flags, int64_t started) {
  tdist::ElasticOptions options;
  options.backend = flags.backend;
  if (flags.join_window >= 0) {
    options.join_window = std::chrono::milliseconds(static_cast<int64_t>(flags.join_window * 1e3));
  }
  // The model first: a spare (tdistrun --elastic-spares) has it built while it waits in join.
  auto model = make_model(flags.width);
  std::unique_ptr<tdist::ElasticGroup> job = tdist::ElasticGroup::join(options);
  const int64_t joined = now_ns();
  const int slot = job->slot();
  if (job->newcomer() && flags.newcomer_width > 0) model = make_model(flags.newcomer_width);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9));
  tdist::torch::DistributedSampler sampler(
      static_cast<size_t>(flags.dataset),
      {.num_replicas = job->size(), .rank = job->rank(), .shuffle = true, .seed = 1});
  tdist::checkpoint::State state;
  state.module(*model.ptr()).optimizer(optimizer, *model.ptr());
  tdist::elastic::Progress progress;
  if (!job->newcomer()) progress.step = 0;
  Report report;
  report.events.push_back("process started " + std::to_string(started) + " joined " +
                          std::to_string(joined));
  auto recover = [&] {
    maybe_die(flags, slot, progress.step, When::kInRecover);
    const tdist::elastic::Recovery r = tdist::elastic::recover(*job, state, progress, &sampler);
    report.events.push_back("generation " + std::to_string(r.generation) + " world " +
                            std::to_string(job->size()) + " step " + std::to_string(r.step) +
                            " reconfigure_us " + std::to_string(job->last_reconfigure().count()) +
                            " recover_us " + std::to_string(r.took.count()) + " received " +
                            std::to_string(r.received) + " at " + std::to_string(now_ns()));
  };
  // After a failure: the next generation, and its state, as often as failures come.
  auto rejoin = [&](const std::exception& first) {
    std::string why = first.what();
    for (;;) {
      std::fprintf(stderr, "train_elastic: slot %d: step %lld failed (%s); reconfiguring\n", slot,
                   static_cast<long long>(progress.step), why.c_str());
      try {
        job->reconfigure();
        recover();
        return;
      } catch (const std::exception& e) {
        if (!peer_failure(e)) throw;
        why = e.what();
      }
    }
  };
  try {
    recover();
  } catch (const std::exception& e) {
    if (!peer_failure(e)) throw;
    rejoin(e);
  }
  auto make_ddp = [&] {
    tdist::torch::DDPOptions o;
    o.process_group = job->group();
    o.commit_vote = flags.vote == "ddp";
    return std::make_unique<tdist::torch::DistributedDataParallel<torch::nn::Sequential>>(model, o);
  };
  std::unique_ptr<tdist::torch::DistributedDataParallel<torch::nn::Sequential>> ddp = make_ddp();
  while (progress.step < flags.steps) {
    try {
      auto batch = sampler.next(static_cast<size_t>(flags.batch_size));
      if (!batch) {
        sampler.set_epoch(progress.epoch + 1);
        progress.next_epoch(progress.epoch + 1);
        continue;
      }
      optimizer.zero_grad();
      torch::Tensor loss =
          torch::nn::functional::cross_entropy(ddp->forward(inputs(*batch)), labels(*batch));
      maybe_die(flags, slot, progress.step, When::kBeforeBackward);
      loss.backward();
      // The vote: every rank holds the step's whole reduction, and its loss is finite.
      const bool ok = std::isfinite(loss.item<float>());
      if (flags.vote == "group" ? job->commit(ok) : ok) {
        maybe_die(flags, slot, progress.step, When::kAfterVote);
        optimizer.step();
        progress.advance(static_cast<int64_t>(batch->size()));
        report.steps.emplace_back(progress.step, now_ns());
      }
    } catch (const std::exception& e) {
      if (!peer_failure(e)) throw;
      const int64_t caught = now_ns();
      job->group()->abort();
      ddp.reset();
      const int64_t released = now_ns();
      rejoin(e);
      ddp = make_ddp();
      report.events.push_back("failure caught " + std::to_string(caught) + " released " +
                              std::to_string(released) + " ddp_ready " + std::to_string(now_ns()));
    }
  }
  write_report(flags, slot, *model.ptr(), progress.step, job->size(), job->generation(), report);
  if (job->rank() == 0) {
    std::printf("train_elastic: %lld steps, world %d, generation %d, params %016llx\n",
                static_cast<long long>(progress.step), job->size(), job->generation(),
                static_cast<unsigned long long>(params_hash(*model.ptr())));
  }
  return 0;
}

// The classic way, for comparison: one group for the job, a checkpoint every K steps, and
// tdistrun restarting every worker after a failure.
int train_restart(const Flags& flags) {
  tdist::init_process_group(flags.backend);
  auto group = tdist::get_default_group();
  const int slot = group->rank();
  auto model = make_model(flags.width);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(flags.lr).momentum(0.9));
  tdist::torch::DistributedSampler sampler(static_cast<size_t>(flags.dataset),
                                           {.shuffle = true, .seed = 1});
  int64_t step = 0;
  tdist::checkpoint::State state;
  state.module(*model.ptr())
      .optimizer(optimizer, *model.ptr())
      .sampler(sampler)
      .value("step", &step);
  tdist::checkpoint::Checkpointer ckpt(flags.checkpoint, {.keep_last = 1});
  Report report;
  if (auto resumed = ckpt.resume(state)) {
    report.events.push_back("resumed step " + std::to_string(step) + " at " +
                            std::to_string(now_ns()));
  }
  tdist::torch::DistributedDataParallel<torch::nn::Sequential> ddp(model);
  while (step < flags.steps) {
    auto batch = sampler.next(static_cast<size_t>(flags.batch_size));
    if (!batch) {
      sampler.set_epoch(sampler.epoch() + 1);
      continue;
    }
    optimizer.zero_grad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(ddp.forward(inputs(*batch)), labels(*batch));
    maybe_die(flags, slot, step, When::kBeforeBackward);
    loss.backward();
    optimizer.step();
    ++step;
    report.steps.emplace_back(step, now_ns());
    if (step % flags.checkpoint_every == 0) ckpt.async_save(step, state);
  }
  ckpt.wait();
  write_report(flags, slot, *model.ptr(), step, group->size(), 0, report);
  if (group->rank() == 0) {
    std::printf("train_elastic --restart: %lld steps, world %d, params %016llx\n",
                static_cast<long long>(step), group->size(),
                static_cast<unsigned long long>(params_hash(*model.ptr())));
  }
  tdist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t started = now_ns();
  Flags flags;
  if (!parse_flags(argc, argv, flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (const char* t = std::getenv("OMP_NUM_THREADS"); t != nullptr && std::atoi(t) > 0) {
    torch::set_num_threads(std::atoi(t));
  }
  try {
    return flags.restart ? train_restart(flags) : train_elastic(flags, started);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_elastic: %s\n", e.what());
    return 1;
  }
}
