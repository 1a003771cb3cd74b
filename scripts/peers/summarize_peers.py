"""Medians of bench_peers.sh's raw lines ("sys=NAME bytes=B time_us=T", one per run and
size) and tdist's ratio to OpenMPI on the same transport: latency ratio (tdist time /
OpenMPI time: below 1 is faster) up to 1 KiB, busbw ratio (OpenMPI time / tdist time:
above 1 is faster) from 4 KiB. With membw lines ("membw threads= T add_GBps= X ...",
scripts/peers/membw.c, one per round) it also prints the memory limit of a one-host
all_reduce and each shm busbw's share of it: the ranks together must read every input and
write every output, 2 * world * bytes through memory, so busbw <= (world - 1) * B_mem /
world^2 (B_mem / 4 for two ranks), B_mem being STREAM's add bandwidth of world cores."""
import collections
import statistics
import sys

world = int(sys.argv[1])
times = collections.defaultdict(list)
membw = []
for line in open(sys.argv[2]):
    if line.startswith("membw "):
        membw.append(float(line.split("add_GBps=")[1].split()[0]))
        continue
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    if {"sys", "bytes", "time_us"} <= fields.keys():
        times[(fields["sys"], int(fields["bytes"]))].append(float(fields["time_us"]))

def med(sys_name, b):
    v = times.get((sys_name, b))
    return statistics.median(v) if v else None

def busbw(b, us):
    return 2.0 * (world - 1) / world * b / (us * 1e-6) / 1e9

sizes = sorted({b for (_, b) in times})
limit = None
if membw:
    b_mem = statistics.median(membw)
    limit = (world - 1) * b_mem / world**2
    print(f"memory: STREAM add {b_mem:.2f} GB/s on {world} cores (median of {len(membw)}); "
          f"an all_reduce's busbw limit here is {limit:.2f} GB/s")
for ours, theirs in (("tdist-shm", "openmpi-shm"), ("tdist-tcp", "openmpi-tcp")):
    print(f"\n{ours} vs {theirs}, world {world}, all_reduce f32 sum (medians of "
          f"{len(times.get((ours, sizes[0]), []))} runs)")
    shares = limit is not None and ours == "tdist-shm"
    print(f"{'bytes':>10} {'tdist us':>10} {'mpi us':>10} {'tdist GB/s':>11} {'mpi GB/s':>9}"
          f" {'ratio':>7}" + (f" {'of limit':>9}" if shares else ""))
    for b in sizes:
        t, m = med(ours, b), med(theirs, b)
        if t is None or m is None:
            continue
        if b <= 1024:
            print(f"{b:>10} {t:>10.2f} {m:>10.2f} {'':>11} {'':>9} {t / m:>6.2f}x  (latency)")
        else:
            print(f"{b:>10} {t:>10.1f} {m:>10.1f} {busbw(b, t):>11.2f} {busbw(b, m):>9.2f}"
                  f" {m / t:>6.2f}x" + (f" {busbw(b, t) / limit:>8.0%}" if shares else ""))
g = [(b, med("gloo", b)) for b in sizes if med("gloo", b)]
if g:
    print("\ntorch.distributed gloo (same run): " +
          ", ".join(f"{b}: {t:.1f} us" for b, t in g))
