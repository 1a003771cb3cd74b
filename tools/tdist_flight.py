#!/usr/bin/env python3
"""Merges tdist flight records (one JSON file per rank) and prints, per process group, the
first operation on which the ranks disagree: an operation some ranks called and others did
not, the same sequence number with other arguments (operation, dtype, count, root, reduce
op), or one that some ranks finished while others are still in it.

Usage: tdist_flight.py PATH...   (files, folders of *.json, or the prefix the files were
                                 written with, TDIST_FLIGHT_RECORDER_FILE; default
                                 /tmp/tdist_flight_rank_)
Exit status: 0 when every group agrees, 1 when some group disagrees, 2 on bad input.
"""
import glob
import json
import os
import sys


def describe(op, seq):
    text = "%s #%d" % (op.get("op", "?"), seq)
    if "dtype" in op:
        text += " " + op["dtype"]
    if "count" in op:
        text += " x%d" % op["count"]
    if "reduce_op" in op:
        text += " " + op["reduce_op"]
    if "root" in op:
        text += " root %d" % op["root"]
    return text


def fingerprint(op):
    return tuple(op.get(k) for k in ("op", "dtype", "count", "reduce_op", "root"))


def load(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(glob.glob(os.path.join(path, "*.json")))
        elif os.path.isfile(path):
            files.append(path)
        else:
            files += sorted(glob.glob(path + "*.json"))
    dumps = []
    for name in files:
        try:
            with open(name) as f:
                dumps.append(json.load(f))
        except (OSError, ValueError) as e:
            print("tdist_flight: cannot read %s: %s" % (name, e), file=sys.stderr)
            sys.exit(2)
    if not dumps:
        print("tdist_flight: no flight records found in %s" % " ".join(paths), file=sys.stderr)
        sys.exit(2)
    return dumps


def gather_groups(dumps):
    groups = {}
    for dump in dumps:
        for g in dump.get("groups", []):
            entry = groups.setdefault(g["name"], {"backend": g.get("backend", "?"),
                                                  "size": g["size"],
                                                  "global_ranks": g.get("global_ranks", []),
                                                  "ranks": {}})
            ops = {op["seq"]: op for op in g["record"]["ops"]}
            entry["ranks"][g["rank"]] = {"next_seq": g["next_seq"], "ops": ops,
                                         "dump_steady_ns": dump.get("steady_ns", 0),
                                         "host": dump.get("host", "?"), "pid": dump.get("pid")}
    return groups


def rank_line(r, info, seq):
    if info is None:
        return "rank %d: no flight record" % r
    op = info["ops"].get(seq)
    if op is None:
        if seq >= info["next_seq"]:
            last = info["ops"].get(info["next_seq"] - 1)
            if last is None:
                return "rank %d: did not call #%d (it called no collective yet)" % (r, seq)
            return "rank %d: did not call #%d (its last: %s, %s)" % (
                r, seq, describe(last, last["seq"]), last["state"])
        return "rank %d: #%d is no longer in its record" % (r, seq)
    line = "rank %d: %s, %s" % (r, describe(op, seq), op["state"])
    if op["state"] in ("started", "queued"):
        since = op.get("started_ns", op.get("enqueued_ns", 0))
        if info["dump_steady_ns"] and since:
            line += " for %.1f s" % ((info["dump_steady_ns"] - since) / 1e9)
    return line


def first_disagreement(group):
    ranks = group["ranks"]
    size = group["size"]
    lo = max((min(info["ops"]) for info in ranks.values() if info["ops"]), default=0)
    hi = max(info["next_seq"] for info in ranks.values())
    for seq in range(lo, hi):
        called = {}
        missing = []
        for r in range(size):
            info = ranks.get(r)
            op = info["ops"].get(seq) if info else None
            if op is None:
                missing.append(r)
            else:
                called[r] = op
        prints = {fingerprint(op) for op in called.values()}
        if missing or len(prints) > 1:
            kind = "different operations" if len(prints) > 1 else "not called by every rank"
            return seq, kind
        if any(op["state"] != "completed" for op in called.values()):
            return seq, "not finished by every rank"
    return None, None


def main(argv):
    paths = argv[1:] or ["/tmp/tdist_flight_rank_"]
    groups = gather_groups(load(paths))
    disagree = False
    for name in sorted(groups):
        group = groups[name]
        title = "group %s (%s, %d ranks)" % (name, group["backend"], group["size"])
        seq, kind = first_disagreement(group)
        if seq is None:
            print("%s: the ranks agree on every recorded operation" % title)
            continue
        disagree = True
        print("%s: first disagreement at #%d (%s)" % (title, seq, kind))
        for r in range(group["size"]):
            print("  " + rank_line(r, group["ranks"].get(r), seq))
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
