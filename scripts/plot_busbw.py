#!/usr/bin/env python3
"""Bus bandwidth against message size for several benchmark runs, one line each.

Reads CSVs with tdist-bench --csv's columns (at least collective, bytes and busbw_GBps):
tdist-bench's own, or the peers' (OpenMPI, torch.distributed/gloo) from
`bash scripts/bench_peers.sh --csv DIR`. Rows of one size are averaged by their median;
a file with several collectives (tdist-bench --coll all) needs --coll. Writes a PNG with
matplotlib's Agg backend (Debian: apt-get install python3-matplotlib, then run it with
/usr/bin/python3).

  python3 scripts/plot_busbw.py "tdist shm=shm.csv" "gloo=peers/gloo.csv" -o busbw.png
"""
import argparse
import collections
import csv
import math
import os
import statistics
import sys


def parse_run(spec):
    """LABEL=FILE (split at the first '=') or FILE, labelled by its name."""
    label, sep, path = spec.partition("=")
    if not sep:
        label, path = os.path.splitext(os.path.basename(spec))[0], spec
    if not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=FILE.csv, got '{spec}'")
    return label, path


def size_label(nbytes):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift}{unit}"
    return str(nbytes)


def read_run(path, coll):
    """{bytes: median busbw} of one CSV, and the collective it holds."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"plot_busbw: {e}")
    missing = {"collective", "bytes", "busbw_GBps"} - set(rows[0] if rows else {})
    if not rows or missing:
        sys.exit(f"plot_busbw: {path}: no rows" if not rows else
                 f"plot_busbw: {path}: no column {', '.join(sorted(missing))}")
    colls = sorted({r["collective"] for r in rows})
    if coll is None and len(colls) > 1:
        sys.exit(f"plot_busbw: {path} holds {', '.join(colls)}: pick one with --coll")
    want = coll or colls[0]
    points = collections.defaultdict(list)
    for r in rows:
        if r["collective"] == want and int(r["bytes"]) > 0:
            points[int(r["bytes"])].append(float(r["busbw_GBps"]))
    if not points:
        sys.exit(f"plot_busbw: {path}: no {want} rows with bytes > 0")
    return {b: statistics.median(v) for b, v in sorted(points.items())}, want


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=parse_run, metavar="LABEL=FILE.csv",
                   help="one line per run, in this order")
    p.add_argument("-o", "--output", required=True, metavar="OUT.png")
    p.add_argument("--title", help="the plot's title (default: the collective)")
    p.add_argument("--coll", help="the collective to draw from files that hold several")
    p.add_argument("--logy", action="store_true", help="logarithmic busbw axis")
    args = p.parse_args(argv)

    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_busbw: no matplotlib in this Python: apt-get install -y "
                 "python3-matplotlib, then run it with /usr/bin/python3")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=110)
    markers = "osD^vP*Xh<>"
    sizes, colls = set(), set()
    for i, (label, path) in enumerate(args.runs):
        points, coll = read_run(path, args.coll)
        sizes.update(points)
        colls.add(coll)
        ax.plot(list(points), list(points.values()), marker=markers[i % len(markers)],
                markersize=5, linewidth=1.5, label=label)

    lo, hi = int(math.log2(min(sizes))), math.ceil(math.log2(max(sizes)))
    step = 1 if hi - lo <= 12 else 2
    # Every other power when the range is wide: those on which more of the points lie
    # (8, 32, ... for tdist-bench -b 8 -f 4; 1K, 4K, ... for the peers' sweeps).
    exps = [int(math.log2(b)) for b in sizes if b & (b - 1) == 0]
    parity = max((0, 1), key=lambda q: (sum(e % 2 == q for e in exps), q == hi % 2))
    first = lo + ((parity - lo) % 2 if step == 2 else 0)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator([2**e for e in range(first, hi + 1, step)]))
    ax.xaxis.set_minor_locator(FixedLocator([2**e for e in range(lo, hi + 1)]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_label(int(round(x)))))
    ax.set_xlim(2**lo / 1.3, 2**hi * 1.3)
    if args.logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("message size (bytes per rank)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(args.title or " / ".join(sorted(colls)))
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", axis="x", alpha=0.12)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
