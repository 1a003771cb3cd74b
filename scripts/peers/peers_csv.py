"""bench_peers.sh's raw lines ("sys=NAME bytes=B time_us=T", one per run and size) as one
CSV per system in DIR (DIR/NAME.csv), with tdist-bench --csv's columns, so that
scripts/plot_busbw.py draws tdist and its peers alike: the median time over the rounds
per size, algbw = bytes / time, busbw = algbw * 2(n-1)/n (all_reduce, f32 sum).
backend is the system's name (tdist-shm, tdist-tcp, openmpi-shm, openmpi-tcp, gloo);
iters is the per-size count of bench_peers.sh's schedule (the anchor's for gloo); wrong
is N/A (the peers' sweeps do not check their results).
Usage: python3 peers_csv.py WORLD RAW DIR"""
import collections
import csv
import os
import statistics
import sys

HEADER = ["collective", "backend", "nranks", "bytes", "count", "dtype", "redop", "root",
          "inplace", "iters", "time_us", "algbw_GBps", "busbw_GBps", "wrong"]


def iters(system, nbytes):
    if system == "gloo":  # ../shared/anchors/torch_allreduce.py
        return max(3, min(200, int(2e8 // max(nbytes, 1))))
    # bench_peers.sh's tdist-bench brackets and scripts/peers/mpi_allreduce_sweep.c
    return 2000 if nbytes <= 1024 else 500 if nbytes <= 256 << 10 else 20


def main():
    world, raw, out_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    times = collections.defaultdict(list)
    for line in open(raw):
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if {"sys", "bytes", "time_us"} <= fields.keys():
            times[(fields["sys"], int(fields["bytes"]))].append(float(fields["time_us"]))
    os.makedirs(out_dir, exist_ok=True)
    for system in sorted({s for s, _ in times}):
        path = os.path.join(out_dir, system + ".csv")
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(HEADER)
            for nbytes in sorted(b for s, b in times if s == system):
                us = statistics.median(times[(system, nbytes)])
                algbw = nbytes / us / 1e3 if us > 0 else 0.0
                busbw = algbw * 2.0 * (world - 1) / world
                w.writerow(["all_reduce", system, world, nbytes, nbytes // 4, "f32", "sum", -1,
                            0, iters(system, nbytes), f"{us:.3f}", f"{algbw:.6g}",
                            f"{busbw:.6g}", "N/A"])
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
