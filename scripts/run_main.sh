#!/usr/bin/env bash
# The main job: sets up (installs the missing Debian packages, LibTorch and the
# Fashion-MNIST data among them), builds only the three programs it runs (not the tests),
# then
#  1. two processes meet through a TCPStore (env:// rendezvous) and exchange greetings;
#  2. tdistrun starts 2 workers (torchrun's flags and environment) that train a small CNN
#     on Fashion-MNIST for one epoch with DistributedDataParallel over the tcp backend,
#     each on its half of the data; rank 0 shows progress and ends with the test
#     accuracy (about 88%).
# Usage: bash scripts/run_main.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target hello_rendezvous --target tdistrun --target train_fashion_mnist
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
echo "== two processes meet through the store"
build/examples/hello_rendezvous --nproc 2
echo "== Fashion-MNIST, one epoch: tdistrun starts 2 workers, DDP over the tcp backend"
build/tools/tdistrun --standalone --nproc-per-node 2 \
  build/examples/train_fashion_mnist --epochs 1 --checkpoint build/fashion_mnist_ckpt
