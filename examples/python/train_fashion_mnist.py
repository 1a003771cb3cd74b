"""The seed document's DDP training loop, on CPU, with backend="tdist" (or any other).

Each process trains the same small CNN on its share of Fashion-MNIST (DistributedSampler)
with PyTorch's DistributedDataParallel; the gradients are averaged over the group's
backend. Run it under a launcher that sets torchrun's environment:

    tdistrun --standalone --nproc-per-node 2 examples/python/train_fashion_mnist.py
    torchrun --standalone --nproc-per-node 2 examples/python/train_fashion_mnist.py --backend gloo

The data is Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist).
Rank 0 prints the loss per epoch and the test accuracy; --result FILE writes it as JSON.
"""

import argparse
import gzip
import json
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import tdist  # noqa: F401  (registers the "tdist" backend)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """A gzipped IDX file (the MNIST format) as a uint8 tensor of its shape."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    shape = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def load(split, limit, data_dir):
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (images.float().div(255) - 0.2860) / 0.3530  # Fashion-MNIST's mean and std
    return TensorDataset(x.unsqueeze(1), labels.long())


class FashionNet(nn.Module):
    """The C++ example's CNN (examples/fashion_mnist_net.h)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def setup(backend, rank, world_size):
    dist.init_process_group(backend=backend, init_method="env://",
                            world_size=world_size, rank=rank)


def train(args, rank, world_size):
    torch.manual_seed(args.seed)
    model = DDP(FashionNet())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    train_set = load("train", args.limit, args.data)
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        total, batches = torch.zeros(1), 0
        for data, target in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            batches += 1
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: mean loss "
                  f"{total.item() / max(batches, 1) / world_size:.4f}", flush=True)
    return model, time.perf_counter() - start


def evaluate(model, args, rank, world_size):
    """Test accuracy over the whole test set, each rank scoring its share."""
    test_set = load("t10k", args.test_limit, args.data)
    indices = list(range(rank, len(test_set), world_size))
    model.eval()
    correct = torch.zeros(2, dtype=torch.int64)
    with torch.no_grad():
        for i in range(0, len(indices), 1000):
            data, target = test_set[indices[i:i + 1000]]
            correct[0] += (model(data).argmax(1) == target).sum()
            correct[1] += len(target)
    dist.all_reduce(correct)
    return 100.0 * correct[0].item() / correct[1].item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tdist")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="train on the first N images")
    parser.add_argument("--test-limit", type=int, default=0, help="test on the first N images")
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--result", help="write rank 0's figures to this JSON file")
    args = parser.parse_args()

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    setup(args.backend, rank, world_size)
    model, seconds = train(args, rank, world_size)
    accuracy = evaluate(model, args, rank, world_size)
    if rank == 0:
        print(f"test accuracy: {accuracy:.2f}% ({args.backend}, {world_size} processes, "
              f"{seconds:.1f} s of training)", flush=True)
        if args.result:
            with open(args.result, "w") as f:
                json.dump({"backend": args.backend, "accuracy": accuracy,
                           "train_seconds": seconds, "world_size": world_size}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
