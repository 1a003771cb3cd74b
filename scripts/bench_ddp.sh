#!/usr/bin/env bash
# DistributedDataParallel benchmark: tdist's DDP (C++, `auto` backend, run by tdistrun) beside
# PyTorch's Python DDP over gloo, on the same models and batches, OMP_NUM_THREADS=1:
#   mlp  784-2048-2048-10, batch 32 per rank (communication-heavy: 23 MB of gradients)
#   cnn  torch_ddp.py's MNIST network (1.2M parameters), batch 64 per rank
# and, tdist only, train_fashion_mnist's FashionNet at batch 64 per rank. World 1 is the
# plain model in one process (no DDP), as in the anchors. For each model the variants
# run interleaved (tdist w1, torch w1, tdist w2, torch w2, ...) R times, so drifting load
# hits every variant alike; the table gives medians of step time and samples/s, the
# scaling efficiency (world-2 samples/s / (2 x world-1 samples/s)) and tdist's peak RSS
# per process (the largest over the ranks), also for world 2 with the `tcp` backend
# (loopback TCP instead of shared memory), with gradient_as_bucket_view, with the buckets
# launched during backward (--overlap during; the default decides by the cores, see
# DDPOptions::overlap) and, for the MLP, without DDP: the plain model with each gradient
# all_reduced in place after backward (no buckets, no overlap, no copies: the baseline for
# DDP), and two plain world-1 processes at once (no communication: the scaling ceiling of
# this machine). "vs torch" is the samples/s of a world-2 row over PyTorch DDP's.
# Then, because separate runs on a busy machine disagree more than the variants do, each
# round also runs `ddp_bench --interleave 4` for the MLP and the CNN: in one job the
# variants take turns (no communication, all_reduce after backward, DDP with buckets
# after / during backward, bucket view), and the table gives the median over rounds of
# each variant's median step relative to the job's own no-communication steps.
# PyTorch's side is ../shared/anchors/torch_ddp_mlp.py and torch_ddp.py (ANCHORS=dir to
# point elsewhere), run with /usr/bin/python3 (python3-torch).
# Needs: a build with the ddp_bench and tdistrun targets (LibTorch found).
# Usage: bash scripts/bench_ddp.sh [BUILD_DIR] [R] [STEPS]   (defaults: build 3 20)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
rounds=${2:-3}
steps=${3:-20}
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_ddp.sh [BUILD_DIR] [R] [STEPS]" >&2
  exit 2
}
anchors=${ANCHORS:-$(realpath ../shared/anchors)}
python=/usr/bin/python3
bench="$build/benchmarks/ddp_bench"
tdistrun="$build/tools/tdistrun"
for f in "$bench" "$tdistrun" "$anchors/torch_ddp.py" "$anchors/torch_ddp_mlp.py"; do
  [[ -e $f ]] || {
    echo "bench_ddp: $f not found (build the targets ddp_bench and tdistrun)" >&2
    exit 1
  }
done

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results="$tmp/results"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

# Runs one variant; appends "variant model world step_ms samples_per_s rss_mb" to $results.
# A failed run prints its output and ends the benchmark.
run() {
  local variant=$1 model=$2 world=$3 out
  shift 3
  if ! out=$(timeout 600 "$@" 2>&1); then
    echo "bench_ddp: failed: $*" >&2
    echo "$out" >&2
    exit 1
  fi
  local line
  line=$(grep -E '^(tdist-ddp|torch-ddp)' <<<"$out" | tail -1)
  [[ -n $line ]] || {
    echo "bench_ddp: no result line from: $*" >&2
    echo "$out" >&2
    exit 1
  }
  local step rate rss
  step=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' <<<"$line")
  rate=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' <<<"$line")
  rss=$(sed -n 's/.*peak_rss_mb=\([0-9.]*\).*/\1/p' <<<"$line")
  echo "$variant $model $world $step $rate ${rss:--}" >>"$results"
  echo "  $variant $model world=$world: step ${step} ms, ${rate} samples/s${rss:+, peak RSS ${rss} MB}"
}

# tdist_run MODEL WORLD [--bucket-view | --manual | --backend tcp | --overlap during]
tdist_run() {
  local model=$1 world=$2 variant=tdist
  shift 2
  case "$*" in
    --bucket-view) variant=tdist-view ;;
    --manual) variant=tdist-manual ;;
    "--backend tcp") variant=tdist-tcp ;;
    "--overlap during") variant=tdist-during ;;
  esac
  if ((world == 1)); then
    run "$variant" "$model" 1 "$bench" --model "$model" --steps "$steps" "$@"
  else
    run "$variant" "$model" "$world" "$tdistrun" --standalone --nproc-per-node "$world" \
      "$bench" --model "$model" --steps "$steps" "$@"
  fi
}

# interleaved MODEL: ddp_bench --interleave under tdistrun; appends
# "interleaved-VARIANT MODEL vs_plain" to $results/interleaved.
interleaved() {
  local model=$1 out
  if ! out=$(timeout 600 "$tdistrun" --standalone --nproc-per-node 2 "$bench" --model "$model" \
    --interleave 4 2>&1); then
    echo "bench_ddp: failed: ddp_bench --model $model --interleave 4" >&2
    echo "$out" >&2
    exit 1
  fi
  grep '^tdist-ddp-interleaved' <<<"$out" |
    sed -n 's/.*variant=\([a-z-]*\).*median_step_ms=\([0-9.]*\) vs_plain=\([0-9.]*\).*/\1 \2 \3/p' |
    while read -r variant step ratio; do
      echo "$variant $model $step $ratio" >>"$tmp/interleaved"
      echo "  interleaved $model $variant: median step ${step} ms, ${ratio} x no communication"
    done
}

# pair MODEL: two plain world-1 processes at once, no communication at all: the ceiling of
# world-2 scaling on this machine (two ranks share the memory bandwidth and caches, and
# other work on the machine slows whichever rank it lands on). Recorded as world 2 with
# the two processes' samples/s added.
pair() {
  local model=$1 a b
  a=$(mktemp -p "$tmp") b=$(mktemp -p "$tmp")
  "$bench" --model "$model" --steps "$steps" >"$a" 2>&1 &
  local pid=$!
  "$bench" --model "$model" --steps "$steps" >"$b" 2>&1 || {
    cat "$b" >&2
    exit 1
  }
  wait "$pid" || {
    cat "$a" >&2
    exit 1
  }
  local rates steps_ms
  rates=$(sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' "$a" "$b")
  steps_ms=$(sed -n 's/.*step_ms=\([0-9.]*\).*/\1/p' "$a" "$b")
  local rate step
  rate=$(awk '{s += $1} END {print s}' <<<"$rates")
  step=$(awk '{s += $1} END {print s / NR}' <<<"$steps_ms")
  echo "ceiling $model 2 $step $rate -" >>"$results"
  echo "  two independent $model processes: step ${step} ms, ${rate} samples/s together"
}

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r of $rounds"
  for model in mlp cnn; do
    script="$anchors/torch_ddp.py"
    [[ $model == mlp ]] && script="$anchors/torch_ddp_mlp.py"
    tdist_run "$model" 1
    run torch "$model" 1 "$python" "$script" 1 "$steps"
    tdist_run "$model" 2
    run torch "$model" 2 "$python" "$script" 2 "$steps"
    tdist_run "$model" 2 --backend tcp
    pair "$model"
    tdist_run "$model" 2 --bucket-view
    tdist_run "$model" 2 --overlap during
    if [[ $model == mlp ]]; then tdist_run "$model" 2 --manual; fi
    interleaved "$model"
  done
  tdist_run fashion 1
  tdist_run fashion 2
done

echo
# Other work on the machine skews world 2 most (its ranks need a core each): say how busy
# it was.
echo "== medians of $rounds rounds, $steps timed steps each, OMP_NUM_THREADS=1," \
  "$(getconf _NPROCESSORS_ONLN) CPUs, load average at start: $load_start, at end:" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
"$python" - "$results" "$tmp/interleaved" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    variant, model, world, step, rate, rss = line.split()
    rows.setdefault((variant, model, int(world)), []).append((float(step), float(rate), rss))
names = {"tdist": "tdist DDP (auto)", "tdist-tcp": "tdist DDP (tcp)",
         "tdist-view": "tdist DDP, bucket view", "tdist-during": "tdist DDP, overlap during",
         "tdist-manual": "tdist, no DDP, all_reduce", "torch": "PyTorch DDP (gloo)",
         "ceiling": "2 processes, no comm"}
print(f"{'model':8} {'implementation':26} {'world':>5} {'step ms':>8} {'samples/s':>10} "
      f"{'scaling':>8} {'vs torch':>8} {'peak RSS MB':>12}")
for (variant, model, world), runs in rows.items():
    step = statistics.median(r[0] for r in runs)
    rate = statistics.median(r[1] for r in runs)
    rss = [float(r[2]) for r in runs if r[2] != "-"]
    base_variant = "torch" if variant == "torch" else "tdist"
    base = rows.get((base_variant, model, 1))
    scaling = ""
    if world > 1 and base:
        scaling = f"{100 * rate / (world * statistics.median(r[1] for r in base)):.0f}%"
    torch = rows.get(("torch", model, world))
    versus = ""
    if world > 1 and torch and variant not in ("torch", "ceiling"):
        versus = f"{rate / statistics.median(r[1] for r in torch):.2f}"
    rss_text = f"{statistics.median(rss):.0f}" if rss else "-"
    print(f"{model:8} {names[variant]:26} {world:>5} {step:>8.1f} {rate:>10.0f} {scaling:>8} "
          f"{versus:>8} {rss_text:>12}")
inter = {}
for line in open(sys.argv[2]):
    variant, model, step, ratio = line.split()
    inter.setdefault((model, variant), []).append((float(step), float(ratio)))
print()
print("interleaved in one job (ddp_bench --interleave 4), world 2, medians over rounds:")
print(f"{'model':8} {'variant':12} {'step ms':>8} {'x no comm':>10}")
for (model, variant), runs in inter.items():
    print(f"{model:8} {variant:12} {statistics.median(r[0] for r in runs):>8.1f} "
          f"{statistics.median(r[1] for r in runs):>10.3f}")
EOF
