#!/usr/bin/env bash
# CI check of the main job on a subset: tdistrun starts 2 train_fashion_mnist workers for
# 2 epochs of STEPS steps each, the second epoch resumed from the first one's checkpoint
# (and, before that, one epoch whose worker is SIGKILLed mid-epoch: tdistrun --max-restarts
# restarts the job, which resumes from its last checkpoint of every 20 steps and must end
# with the accuracy of the uninterrupted epoch, to the digit);
# the final test accuracy (the last line of stdout) must reach MIN_ACCURACY percent and
# count every one of the 10000 test images once. Also checks that 3 ranks (the test set
# then needs padding) count them once too, and that a missing dataset fails with status 1
# and names the Debian package.
# Usage: train_fashion_mnist_subset.sh TDISTRUN TRAIN_FASHION_MNIST STEPS MIN_ACCURACY
set -euo pipefail
tdistrun=$1 train=$2 steps=$3 min_accuracy=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

status=0
"$train" --data "$tmp/no-such-dir" >"$tmp/missing.out" 2>&1 || status=$?
((status == 1)) || fail "missing dataset: exit status $status, want 1"
grep -q dataset-fashion-mnist "$tmp/missing.out" || fail "missing dataset: message does not \
name the package: $(cat "$tmp/missing.out")"

# run NPROC EPOCHS [FLAGS...]: one job; stdout to $tmp/out (and shown), stderr to the log.
run() {
  local nproc=$1 epochs=$2
  shift 2
  "$tdistrun" --standalone --nproc-per-node "$nproc" "$train" --epochs "$epochs" \
    --checkpoint "$tmp/ckpt" "$@" | tee "$tmp/out"
}
run 3 1 --max-steps 2 || fail "3 ranks: exit status $?"
grep -q "(10000 images)" "$tmp/out" || fail "3 ranks did not count 10000 test images"
rm -rf "$tmp/ckpt"

"$tdistrun" --standalone --nproc-per-node 2 --max-restarts 1 "$train" --epochs 1 \
  --max-steps "$steps" --checkpoint-every 20 --checkpoint "$tmp/ckpt" --resume \
  >"$tmp/out" 2>"$tmp/err" &
agent=$!
for _ in $(seq 1200); do
  ls "$tmp"/ckpt/step-*/tdist.json >/dev/null 2>&1 && break
  sleep 0.05
done
pkill -9 -n -P "$agent" || fail "no worker to kill"
wait "$agent" || fail "killed and restarted job: exit status $? ($(tail -5 "$tmp/err"))"
cat "$tmp/out"
grep -q "resumed from $tmp/ckpt at step" "$tmp/out" || fail "the restarted job did not resume"
grep -q "(10000 images)" "$tmp/out" || fail "the restarted job did not finish the epoch"
killed=$(tail -n 1 "$tmp/out")
rm -rf "$tmp/ckpt"

run 2 1 --max-steps "$steps" || fail "first epoch: exit status $?"
# Resumed exactly (parameters, optimizer, sampler position, generator): the same result.
[[ $(tail -n 1 "$tmp/out") == "$killed" ]] ||
  fail "killed and resumed: '$killed'; uninterrupted: '$(tail -n 1 "$tmp/out")'"
ls "$tmp"/ckpt/step-*/tdist.json >/dev/null 2>&1 || fail "no checkpoint written"
run 2 2 --max-steps "$steps" --resume || fail "resumed run: exit status $?"
grep -q "resumed from $tmp/ckpt at step $steps: 1 epoch(s) and 0 step(s) done" "$tmp/out" ||
  fail "did not resume"
grep -q "(10000 images)" "$tmp/out" || fail "2 ranks did not count 10000 test images"
last=$(tail -n 1 "$tmp/out")
[[ $last =~ ^test\ accuracy:\ ([0-9]+\.[0-9])%$ ]] || fail "last line is not the accuracy: $last"
accuracy=${BASH_REMATCH[1]}
awk -v a="$accuracy" -v m="$min_accuracy" 'BEGIN { exit !(a >= m) }' ||
  fail "accuracy $accuracy% below $min_accuracy%"
echo "PASSED: accuracy $accuracy% >= $min_accuracy%"
