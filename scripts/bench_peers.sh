#!/usr/bin/env bash
# Side-by-side all_reduce (f32 sum) of tdist's shm and tcp backends and OpenMPI over shared
# memory (vader) and over TCP (--mca btl self,tcp), R rounds interleaved (tdist shm, MPI
# shm, tdist tcp, MPI tcp, ...) so that drifting load hits every system alike; prints the
# medians and tdist's ratio to OpenMPI per size (docs/performance.md), then one
# torch.distributed gloo run for reference. Iterations per size are the same for both:
# 2000 up to 1 KiB, 500 up to 256 KiB, 20 from 1 MiB.
# Both bind each rank to a core (mpirun's default; BIND=none leaves tdist's unbound).
# Each round also measures the memory bandwidth of WORLD cores (scripts/peers/membw.c,
# STREAM's add kernel) and the summary prints each shm busbw's share of the memory limit.
# Needs: a build (BUILD=dir, default build), openmpi-bin, libopenmpi-dev; python3-torch
# for the gloo line (skipped without it).
# --csv DIR also writes DIR/SYSTEM.csv for each system (tdist-shm, tdist-tcp, openmpi-shm,
# openmpi-tcp, gloo): the medians with tdist-bench --csv's columns, for
# scripts/plot_busbw.py (scripts/peers/peers_csv.py).
# Usage: bash scripts/bench_peers.sh [--csv DIR] [WORLD] [MAX_BYTES] [ROUNDS]   (2 67108864 3)
set -euo pipefail
csv_dir=
if [[ ${1:-} == --csv ]]; then
  csv_dir=$(realpath -m "${2:?--csv needs a directory}")
  shift 2
fi
cd "$(dirname "$0")/.."
world=${1:-2}
max=${2:-67108864}
rounds=${3:-3}
build=${BUILD:-build}
bind=${BIND:-core}  # tdist-bench pins its ranks as mpirun does by default (BIND=none: not)
anchors=../shared/anchors
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_sweep" scripts/peers/mpi_allreduce_sweep.c
cc -O2 -pthread -o "$tmp/membw" scripts/peers/membw.c
bench="$build/tools/tdist-bench"
raw="$tmp/raw.txt"

tdist() {  # BACKEND: tdist-bench over the three size brackets, as "sys= bytes= time_us="
  local backend=$1
  {
    "$bench" --nproc "$world" --bind "$bind" --backend "$backend" -b 8 -e 1K -f 2 -n 2000 -w 200 -c 0
    "$bench" --nproc "$world" --bind "$bind" --backend "$backend" -b 4K -e 256K -f 4 -n 500 -w 50 -c 0
    if ((max >= 1048576)); then
      "$bench" --nproc "$world" --bind "$bind" --backend "$backend" -b 1M -e "$max" -f 4 -n 20 -w 2 -c 0
    fi
  } | awk -v s="tdist-$backend" '$1 ~ /^[0-9]+$/ { print "sys=" s, "bytes=" $1, "time_us=" $6 }'
}
mpi() {  # NAME [MCA...]
  local name=$1
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$world" "$@" "$tmp/mpi_sweep" "$max" |
    sed "s/^/sys=$name /"
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  tdist shm >>"$raw"
  mpi openmpi-shm >>"$raw"
  tdist tcp >>"$raw"
  mpi openmpi-tcp --mca btl self,tcp >>"$raw"
  "$tmp/membw" "$world" 128 8 >>"$raw"
done
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$anchors/torch_allreduce.py" "$world" "$max" 2>&1 |
    awk '/torch-gloo/ { for (i = 1; i <= NF; i++) if ($i ~ /^(bytes|time_us)=/) l = l " " $i;
                        print "sys=gloo" l; l = "" }' >>"$raw"
fi
python3 scripts/peers/summarize_peers.py "$world" "$raw"
if [[ -n $csv_dir ]]; then
  python3 scripts/peers/peers_csv.py "$world" "$raw" "$csv_dir"
fi
