// tdistrun --help and --help-env (options.h), generated from the flag table and the
// settings registry so that neither can drift from what the parser accepts.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tdist/settings.h"
#include "tdistrun/option_flags.h"
#include "tdistrun/options.h"

namespace tdist::launcher {
namespace {

using namespace flags;

// Appends `text` word-wrapped to kWidth columns from column `indent`; the current line
// already holds `column` characters (a label), and text too close to it starts a new line.
void append_wrapped(std::string& out, std::string_view text, size_t indent, size_t column) {
  if (column > 0 && column + 2 > indent) {
    out += '\n';
    column = 0;
  }
  out.append(indent - column, ' ');
  column = indent;
  bool first = true;
  for (std::string_view word : split(text, ' ')) {
    if (!first && column + 1 + word.size() > kWidth) {
      out += '\n';
      out.append(indent, ' ');
      column = indent;
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  out += '\n';
}

}  // namespace

std::string help_text() {
  std::string out = "usage: tdistrun [options] PROGRAM [ARGS...]\n\n";
  auto paragraph = [&](std::string_view text) {
    append_wrapped(out, text, 0, 0);
    out += '\n';
  };
  paragraph(
      "Starts --nproc-per-node workers running PROGRAM on this node (with the agents of the "
      "other nodes, for a multi-node job), watches them, stops all of them when one fails, "
      "restarts the job while --max-restarts allows, and reports the first failure. A PROGRAM "
      "ending in .py runs with $PYTHON (default python3); anything else is executed directly, "
      "looked up on PATH. Everything from PROGRAM on is passed to it unparsed; '--' ends "
      "tdistrun's options.");
  paragraph(
      "A one-node job without --rdzv-endpoint or --master-port behaves like --standalone: its "
      "store listens on a free port and its --rdzv-id is random, so several jobs on one host "
      "never collide.");
  paragraph(
      "With --rdzv-backend etcd-v2 --rdzv-endpoint ETCD_HOST:PORT --rdzv-id ID the agents meet "
      "on an etcd that no node hosts (keys under /tdist/ID/), and so do their workers' env:// "
      "rendezvous: losing any node, even the first, costs a restart (--max-restarts, --nnodes "
      "MIN:MAX) rather than the job.");
  paragraph(
      "Flags are torchrun's: each may be spelled with underscores (--nproc_per_node), given as "
      "--flag=value, or defaulted by a PET_<FLAG> environment variable (PET_NPROC_PER_NODE=4); "
      "the command line wins.");
  std::string_view group;
  for (const Flag& f : kFlags) {
    if (f.group != group) {
      group = f.group;
      out += (group == kFlags.front().group ? "" : "\n") + std::string(group) + ":\n";
    }
    std::string label = "  ";
    if (f.short_name != 0) label += std::string("-") + f.short_name + ", ";
    label += "--" + std::string(f.name);
    if (!f.metavar.empty()) label += " " + std::string(f.metavar);
    out += label;
    append_wrapped(out, f.help, 30, label.size());
  }
  out += '\n';
  paragraph(
      "Each worker gets torchrun's environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, "
      "GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, "
      "MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID, "
      "TORCHELASTIC_ERROR_FILE, and OMP_NUM_THREADS=1 / OPENBLAS_NUM_THREADS=1 when a node runs "
      "several workers and they are unset; tdist programs also find the launcher's store in "
      "TDIST_AGENT_STORE. SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the "
      "workers. tdistrun exits with the first failed worker's exit code, or 128+signal when "
      "signalled. tdistrun --help-env lists every setting.");
  out.pop_back();
  return out;
}

std::string help_env_text() {
  std::string out;
  append_wrapped(out,
                 "TDIST_* settings, read from the environment by tdistrun and every tdist "
                 "program (unset or empty = the default):",
                 0, 0);
  out += '\n';
  size_t name_width = 0;
  for (const Setting& s : all_settings()) name_width = std::max(name_width, s.name.size());
  const size_t default_column = 2 + name_width + 2;
  const size_t description_column = default_column + 12;
  auto row = [&](std::string_view name, std::string_view value, std::string_view description) {
    std::string line = "  " + std::string(name);
    line.append(default_column - line.size(), ' ');
    line += value;
    out += line;
    append_wrapped(out, description, description_column, line.size());
  };
  row("NAME", "DEFAULT", "DESCRIPTION");
  for (const Setting& s : all_settings()) {
    const std::string accepted = accepted_values(s);
    row(s.name, s.default_value.empty() ? "\"\"" : s.default_value,
        accepted.empty() ? std::string(s.description)
                         : std::string(s.description) + " [" + accepted + "]");
  }
  out += "\nOther variables tdist honours:\n";
  constexpr std::array<std::pair<std::string_view, std::string_view>, 9> kOthers = {{
      {"PET_<FLAG>", "tdistrun: default of --<flag>, as torchrun (PET_NPROC_PER_NODE=4)"},
      {"PYTHON", "tdistrun: the interpreter for .py programs and -m; default python3"},
      {"OMP_NUM_THREADS", "tdistrun: kept when set, else 1 when a node runs several workers"},
      {"OPENBLAS_NUM_THREADS", "tdistrun: as OMP_NUM_THREADS"},
      {"MASTER_ADDR, MASTER_PORT", "env://: where the store is (torchrun)"},
      {"RANK, WORLD_SIZE", "env://: this process's rank and the job's size (torchrun)"},
      {"TORCHELASTIC_*", "env://: USE_AGENT_STORE, RESTART_COUNT (torchrun's agent store)"},
      {"OMPI_COMM_WORLD_RANK/SIZE",
       "env://: rank and size under OpenMPI's mpirun; also "
       "PMI_RANK/PMI_SIZE under a PMI launcher"},
      {"SLURM_PROCID, SLURM_NTASKS", "env://: rank and size under Slurm's srun"},
  }};
  for (const auto& [name, description] : kOthers) {
    std::string line = "  " + std::string(name);
    out += line;
    append_wrapped(out, description, 30, line.size());
  }
  return out;
}

}  // namespace tdist::launcher
