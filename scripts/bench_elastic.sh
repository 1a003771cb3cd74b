#!/usr/bin/env bash
# Time lost per failure, all in one run (issue 34's yardsticks), OMP_NUM_THREADS=1: a 4-rank
# DDP job (examples/train_elastic: an MLP of ~23 MB, SGD with momentum, batch 32 per rank,
# 60 steps), one worker SIGKILLed in step K (after its forward: the others wait in
# backward's all_reduce). Time lost = from the SIGKILL to the completion of the step it
# interrupted (the same step number), read from the workers' per-step completion times:
#   spare     tdistrun --elastic --elastic-spares 1 --max-restarts 1: a spare worker, started
#             with the job and waiting, takes the dead rank's slot; the survivors reconfigure
#             with it and a survivor sends it the state (tdist::elastic::recover);
#   replace   the same without a spare: the replacement process starts after the death;
#   shrink    tdistrun --elastic --max-restarts 0: the survivors go on as 3;
#   restart   tdistrun --max-restarts 1 with train_elastic --restart: the whole job restarts
#             and resumes from its last checkpoint (tdist::checkpoint, every 10 steps);
#   torchrun  torchrun --max-restarts 1 with PyTorch DDP over gloo, the same model and data,
#             resuming from torch.save'd checkpoints every 10 steps
#             (benchmarks/python/elastic_torchrun.py); and the same Python job restarted by
#             tdistrun (torchrun's restart of it can fail here: see below).
# Also: whether the replaced job's final parameters equal those of the job without a failure
# (bit for bit), and the cost of the per-step vote on a healthy job (mean step time with
# --vote none, group (ElasticGroup::commit) and ddp (DDPOptions::commit_vote), R rounds).
# Needs a build with train_elastic and tdistrun (LibTorch found), and python3 with torch
# (torchrun) for the last row.
# Usage: bash scripts/bench_elastic.sh [BUILD_DIR] [R] [K]   (defaults: build 3 25)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
rounds=${2:-3}
kill_step=${3:-25}
[[ $rounds =~ ^[1-9][0-9]*$ && $kill_step =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: bash scripts/bench_elastic.sh [BUILD_DIR] [R] [K]" >&2
  exit 2
}
for bin in examples/train_elastic tools/tdistrun; do
  [[ -x $build/$bin ]] || {
    echo "bench_elastic: $build/$bin is missing (cmake --build $build --target" \
      "$(basename "$bin"))" >&2
    exit 1
  }
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONWARNINGS=ignore
work=$(mktemp -d /tmp/bench_elastic.XXXXXX)
trap 'rm -rf "$work"' EXIT
job="$build/examples/train_elastic --steps 60"
tdistrun="$build/tools/tdistrun --standalone --nproc-per-node 4"

# run NAME COMMAND...: runs it in a fresh folder $work/NAME (reports r.<slot>, marks there);
# a failure ends the benchmark. try NAME COMMAND...: the same, returning its status instead.
try() {
  local name=$1
  shift
  rm -rf "${work:?}/$name"
  mkdir -p "$work/$name/ck"
  (cd "$work/$name" && timeout -s KILL 300 "$@" --out "$work/$name/r" --marks "$work/$name" \
    >"$work/$name/log" 2>&1)
}
run() {
  try "$@" || {
    echo "bench_elastic: $1 failed:" >&2
    tail -20 "$work/$1/log" >&2
    exit 1
  }
}

# lost NAME: "seconds lost, step time before" from the mark and the reports.
lost() {
  python3 - "$work/$1" <<'EOF'
import glob, statistics, sys
d = sys.argv[1]
t0, _, k = (int(x) for x in open(d + "/died-0").read().split()[:3])
done, before = [], []
for f in glob.glob(d + "/r.*"):
    ts = [tuple(int(x) for x in l.split()[1:]) for l in open(f) if l.startswith("done")]
    done += [t for s, t in ts if s == k + 1 and t > t0]
    times = [t for s, t in ts]
    before += [b - a for a, b in zip(times, times[1:])]
step = statistics.median(before) / 1e9 if before else float("nan")
print(f"{(min(done) - t0) / 1e9:.2f} {step * 1e3:.0f}")
EOF
}

hash_of() { head -1 "$work/$1/r.0" | cut -d' ' -f2; }

echo "bench_elastic: 4 ranks, 60 steps, a worker SIGKILLed in step $((kill_step + 1)) ($(nproc --all) cores)"
run clean $tdistrun --elastic $job
run replace $tdistrun --elastic --max-restarts 1 $job --die "2@$kill_step"
run spare $tdistrun --elastic --elastic-spares 1 --max-restarts 1 $job --die "2@$kill_step"
run shrink $tdistrun --elastic --max-restarts 0 $job --die "2@$kill_step"
run restart $tdistrun --max-restarts 1 $job --restart --checkpoint "$work/restart/ck" \
  --checkpoint-every 10 --die "2@$kill_step"
# PyTorch's job: under torchrun; its restarted workers may fail to connect (gloo's
# connectFullMesh: "Connection refused", pytorch/pytorch#167288, seen with torch 2.15 here),
# and then under tdistrun's restart, which starts Python workers as torchrun does.
torch_rows=()
if command -v torchrun >/dev/null && python3 -c "import torch" 2>/dev/null; then
  peer=("$PWD/benchmarks/python/elastic_torchrun.py" --checkpoint-every 10 --die "2@$kill_step")
  if try torchrun torchrun --standalone --nproc-per-node 4 --max-restarts 1 "${peer[@]}" \
    --checkpoint "$work/torchrun/ck"; then
    torch_rows+=(torchrun)
  else
    torchrun_failed=$(grep -m1 -o "Connection refused\|connectFullMesh failed" \
      "$work/torchrun/log" || echo "see its log")
  fi
  run pytorch $tdistrun --max-restarts 1 "${peer[@]}" --checkpoint "$work/pytorch/ck"
  torch_rows+=(pytorch)
fi

printf '\n| recovery | time lost per failure, s | step, ms (median) |\n|---|---:|---:|\n'
for name in spare replace shrink restart "${torch_rows[@]}"; do
  read -r secs step <<<"$(lost "$name")"
  case $name in
    spare) what="tdist live replacement by a waiting spare (--elastic-spares 1)" ;;
    replace) what="tdist live replacement, started then (tdistrun --elastic)" ;;
    shrink) what="tdist shrink to 3 (tdistrun --elastic, no restart left)" ;;
    restart) what="tdist whole-job restart from a checkpoint (every 10 steps)" ;;
    torchrun) what="torchrun restart, PyTorch DDP over gloo (checkpoint every 10 steps)" ;;
    pytorch) what="tdistrun restart, PyTorch DDP over gloo (checkpoint every 10 steps)" ;;
  esac
  printf '| %s | %s | %s |\n' "$what" "$secs" "$step"
done
if [[ -n ${torchrun_failed:-} ]]; then
  echo "torchrun --max-restarts 1: the restarted PyTorch job failed ($torchrun_failed;" \
    "pytorch/pytorch#167288), so torchrun has no row"
fi
grep -h "^event generation 1" "$work"/spare/r.* | sed 's/ at [0-9]*$//' | sort | uniq |
  sed 's/^event /  spare: /' | head -4
for name in spare replace; do
  if [[ $(hash_of $name) == $(hash_of clean) ]]; then
    echo "final parameters ($name): equal bit for bit to the job without a failure"
  else
    echo "final parameters ($name): DIFFER from the job without a failure"
  fi
done

# The vote's cost: mean step time of a healthy job, R interleaved rounds.
declare -A total
for ((r = 0; r < rounds; r++)); do
  for vote in none group ddp; do
    run "vote_$vote" $tdistrun --elastic $job --vote "$vote"
    ms=$(python3 - "$work/vote_$vote" <<'EOF'
import glob, sys
d = sys.argv[1]
ts = [int(l.split()[2]) for l in open(glob.glob(d + "/r.0")[0]) if l.startswith("done")]
print((ts[-1] - ts[9]) / (len(ts) - 10) / 1e6)
EOF
)
    total[$vote]=$(python3 -c "print(${total[$vote]:-0} + $ms)")
  done
done
printf '\n| vote | step, ms (mean of steps 11-60, %d rounds) | ratio to none |\n|---|---:|---:|\n' "$rounds"
for vote in none group ddp; do
  python3 -c "n=${total[none]}; v=${total[$vote]}; print(f'| $vote | {v / $rounds:.1f} | {v / n:.3f}x |')"
done
