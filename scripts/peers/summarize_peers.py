"""Medians of bench_peers.sh's raw lines ("sys=NAME bytes=B time_us=T", one per run and
size) and tdist's ratio to OpenMPI on the same transport: latency ratio (tdist time /
OpenMPI time: below 1 is faster) up to 1 KiB, busbw ratio (OpenMPI time / tdist time:
above 1 is faster) from 4 KiB."""
import collections
import statistics
import sys

world = int(sys.argv[1])
times = collections.defaultdict(list)
for line in open(sys.argv[2]):
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if {"sys", "bytes", "time_us"} <= fields.keys():
        times[(fields["sys"], int(fields["bytes"]))].append(float(fields["time_us"]))

def med(sys_name, b):
    v = times.get((sys_name, b))
    return statistics.median(v) if v else None

def busbw(b, us):
    return 2.0 * (world - 1) / world * b / (us * 1e-6) / 1e9

sizes = sorted({b for (_, b) in times})
for ours, theirs in (("tdist-shm", "openmpi-shm"), ("tdist-tcp", "openmpi-tcp")):
    print(f"\n{ours} vs {theirs}, world {world}, all_reduce f32 sum (medians of "
          f"{len(times.get((ours, sizes[0]), []))} runs)")
    print(f"{'bytes':>10} {'tdist us':>10} {'mpi us':>10} {'tdist GB/s':>11} {'mpi GB/s':>9}"
          f" {'ratio':>7}")
    for b in sizes:
        t, m = med(ours, b), med(theirs, b)
        if t is None or m is None:
            continue
        if b <= 1024:
            print(f"{b:>10} {t:>10.2f} {m:>10.2f} {'':>11} {'':>9} {t / m:>6.2f}x  (latency)")
        else:
            print(f"{b:>10} {t:>10.1f} {m:>10.1f} {busbw(b, t):>11.2f} {busbw(b, m):>9.2f}"
                  f" {m / t:>6.2f}x")
g = [(b, med("gloo", b)) for b in sizes if med("gloo", b)]
if g:
    print("\ntorch.distributed gloo (same run): " +
          ", ".join(f"{b}: {t:.1f} us" for b, t in g))
