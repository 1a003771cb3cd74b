"""Runs PyTorch's distributed test suite (DistributedTest._DistTestBase) on gloo or tdist
and prints each test's outcome and a summary; exits 1 when a test failed, 2 when the run
stopped early (tdist reinstalled during it).

    python3 tests/python/torch_suite/run.py --backend tdist --world 2 [-k REGEX]...
        [--timeout S] [--start fork|spawn] [--json FILE] [--logs DIR] [--list]
        [--no-profiler-checks]

-k selects the tests whose name matches any of the regular expressions (re.search); each
test fails after --timeout seconds (the suite's own longer allowance for its slowest DDP
tests stands); ranks' output goes to --logs (default: a new folder under /tmp, printed).
--json writes the outcomes (rewritten after each test). GPUs are hidden from the suite.
Reinstalling tdist during a run ends it: ranks forked from a process that has the old
extension loaded crash (SIGSEGV) once the file is overwritten.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree (spawned ranks: the env)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("gloo", "tdist"), default="tdist")
    p.add_argument("--world", type=int, default=2, help="ranks per test (>= 2)")
    p.add_argument("-k", dest="patterns", action="append", default=[], metavar="REGEX")
    p.add_argument("--timeout", type=int, default=120, help="seconds per test (120)")
    p.add_argument("--start", choices=("fork", "spawn"), default="fork")
    p.add_argument("--json", help="write the outcomes to this file")
    p.add_argument("--logs", help="folder for the ranks' output")
    p.add_argument("--no-profiler-checks", action="store_true",
                   help="tdist: skip the checks of profiler events (see gates.py)")
    p.add_argument("--list", action="store_true", help="list the selected tests and exit")
    args = p.parse_args(argv)
    if args.world < 2 or args.timeout < 1:
        p.error("--world must be 2 or more, --timeout 1 or more")
    return args


def configure(args):
    """The environment the suite reads at import (and its ranks inherit)."""
    logs = args.logs or tempfile.mkdtemp(prefix=f"torch_suite_{args.backend}_w{args.world}_")
    os.makedirs(logs, exist_ok=True)
    os.environ.update({
        "BACKEND": args.backend,
        "WORLD_SIZE": str(args.world),
        "TEMP_DIR": tempfile.gettempdir(),  # each test makes its own under it (setUp)
        # file:// lets the suite's file-only tests run; each test gets a file of its own.
        "INIT_METHOD": "file://" + os.path.join(tempfile.gettempdir(), "torch_suite_init"),
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(args.timeout),
        "TORCH_SUITE_LOGS": os.path.abspath(logs),
        "TORCH_SUITE_START": args.start,
        "TORCH_SUITE_PROFILER": "0" if args.no_profiler_checks else "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    # The suite's CPU tests only: with fewer GPUs than ranks the suite would skip every test
    # (TestDistBackend._run), and tdist serves CPU tensors.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.argv = sys.argv[:1]  # torch's common_utils parses the command line too
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return logs


def main(argv=None):
    args = parse_args(argv)
    logs = configure(args)
    import outcomes
    import suite

    names = unittest.TestLoader().getTestCaseNames(suite.TorchSuite)
    if args.patterns:
        names = [n for n in names if any(re.search(p, n) for p in args.patterns)]
    if args.list:
        print("\n".join(names))
        return 0
    print(f"torch_suite: {len(names)} tests, backend {args.backend}, world {args.world}, "
          f"{args.start}, timeout {args.timeout} s, logs in {logs}", flush=True)
    records = []
    start = time.monotonic()
    extension = extension_stamp()
    stopped = False
    for name in names:
        if extension_stamp() != extension:
            print("torch_suite: tdist's extension changed on disk (reinstalled?) during the "
                  "run; stopping: ranks forked from here would crash on the replaced file",
                  flush=True)
            stopped = True
            break
        record = outcomes.run_one(suite.TorchSuite(name), logs)
        records.append(record)
        print(outcomes.line(record), flush=True)
        write_json(args, records, time.monotonic() - start)  # so far, should this be killed
    elapsed = time.monotonic() - start
    print(outcomes.summary(records, f"{args.backend} world {args.world}", elapsed))
    write_json(args, records, elapsed)
    if stopped:
        return 2
    return 1 if any(r["outcome"] == "failed" for r in records) else 0


def extension_stamp():
    """Inode, size and time of the tdist extension this process has loaded (None on gloo)."""
    module = sys.modules.get("tdist._C")
    if module is None:
        return None
    try:
        st = os.stat(module.__file__)
    except OSError:  # removed, on its way to being replaced
        return "missing"
    return st.st_ino, st.st_size, st.st_mtime_ns


def write_json(args, records, seconds):
    if args.json:
        with open(args.json + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"backend": args.backend, "world": args.world, "seconds": seconds,
                       "tests": records}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    sys.exit(main())
