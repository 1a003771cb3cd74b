#!/usr/bin/env bash
# GPU check of the main job (CTest configuration `gpu`): train_fashion_mnist --device cuda
# for a few steps, 2 ranks on one GPU over shm (staging through pinned memory) and 1 rank
# over nccl; each must print its test accuracy. Exit 77 (skipped) without the dataset.
# Usage: train_fashion_mnist_cuda.sh TDISTRUN TRAIN_FASHION_MNIST
set -euo pipefail
tdistrun=$1 train=$2
data=/usr/share/datasets/fashion-mnist
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "no dataset in $data; skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tdistrun" --standalone --nproc-per-node 2 "$train" --device cuda --backend shm --max-steps 20 \
  --checkpoint "$tmp/ckpt" | tee "$tmp/out"
grep -q '^test accuracy: ' "$tmp/out" || { echo "FAILED: shm, 2 ranks"; exit 1; }
"$tdistrun" --standalone --nproc-per-node 1 "$train" --device cuda --backend nccl --max-steps 20 \
  --checkpoint "$tmp/ckpt2" | tee "$tmp/out"
grep -q '^test accuracy: ' "$tmp/out" || { echo "FAILED: nccl, 1 rank"; exit 1; }
echo "PASSED"
