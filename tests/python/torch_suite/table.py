"""Side-by-side table of harness runs (run.py --json files): passed/failed/skipped per
backend and world size, then every test that failed on tdist but passed on gloo at the same
world size, grouped by cause.

    python3 tests/python/torch_suite/table.py RESULT.json...
"""

import json
import re
import sys
import textwrap
from collections import defaultdict


def load(paths):
    runs = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        runs[(run["backend"], run["world"])] = run
    return runs


def counts(run):
    tests = run["tests"]
    skipped = [t for t in tests if t["outcome"] in ("skipped", "expected_skip")]
    return (sum(t["outcome"] == "passed" for t in tests),
            sum(t["outcome"] == "failed" for t in tests),
            f"{len(skipped)} ({sum(t['outcome'] == 'expected_skip' for t in tests)})",
            f"{run['seconds']:.0f}")


def print_table(runs):
    header = ("backend", "world", "passed", "failed", "skipped (expected)", "seconds")
    rows = [header] + [(b, str(w), *map(str, counts(runs[b, w])))
                       for b, w in sorted(runs, key=lambda k: (k[1], k[0]))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


def cause_key(reason):
    """A failure's cause without what varies between tests: ranks, times, counts."""
    reason = re.sub(r"^rank [\d,]+: ", "", reason.split(" | ")[0])
    reason = re.sub(r"\[distributed_test\.py:\d+: ", "[", reason)
    return re.sub(r"\d+", "N", reason)


def print_regressions(runs):
    for world in sorted({w for _, w in runs}):
        if ("gloo", world) not in runs or ("tdist", world) not in runs:
            continue
        gloo = {t["name"]: t for t in runs["gloo", world]["tests"]}
        groups = defaultdict(list)
        for t in runs["tdist", world]["tests"]:
            if t["outcome"] == "failed" and gloo.get(t["name"], {}).get("outcome") == "passed":
                groups[cause_key(t["reason"])].append(t)
        total = sum(len(g) for g in groups.values())
        print(f"\nworld {world}: {total} tests fail on tdist and pass on gloo")
        for tests in sorted(groups.values(), key=len, reverse=True):
            print(f"\n  {len(tests)} x {tests[0]['reason']}")
            print(textwrap.fill(" ".join(t["name"] for t in tests), width=100,
                                initial_indent="    ", subsequent_indent="    "))


def main(paths):
    runs = load(paths)
    print_table(runs)
    print_regressions(runs)


if __name__ == "__main__":
    main(sys.argv[1:])
