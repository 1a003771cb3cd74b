"""Runs a test's ranks as real processes, each fresh as torch.multiprocessing's spawn makes
them, but forked from a forkserver that has imported torch once: importing torch costs a
spawned rank about 3 s of CPU on torch 2.x (1.9 s on 1.13), most of what these tests cost.

run_ranks(fn, world, ...) starts `world` processes, each calling fn(rank, world, init, **kw)
with `init` a fresh file:// rendezvous (no ports to collide), and returns their results
by rank. A rank that raises fails the test with its traceback; every run has a timeout,
after which the processes are killed and the test fails, so a hang costs seconds.
"""

import multiprocessing
import os
import queue
import tempfile
import time
import traceback

import torch


class RankFailure(AssertionError):
    pass


def _entry(fn, rank, world, init, results, kwargs):
    try:
        torch.set_num_threads(1)
        results.put((rank, True, fn(rank, world, init, **kwargs)))
    except BaseException:  # reported to the parent, which fails the test
        results.put((rank, False, traceback.format_exc()))


def run_ranks(fn, world, timeout=120, expect_dead=(), **kwargs):
    """Results of fn on ranks 0..world-1; ranks in expect_dead may die without one."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch"])  # the server imports torch, the ranks inherit it
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/rendezvous"
        results = ctx.Queue()
        procs = [ctx.Process(target=_entry, args=(fn, r, world, init, results, kwargs))
                 for r in range(world)]
        for p in procs:
            p.start()
        got = {}
        deadline = time.monotonic() + timeout
        try:
            while len(got) < world - len(expect_dead):
                if time.monotonic() > deadline:
                    missing = sorted(set(range(world)) - set(got))
                    raise RankFailure(f"timed out after {timeout} s waiting for ranks {missing}")
                try:
                    rank, ok, value = results.get(timeout=0.5)
                except queue.Empty:
                    dead = [r for r, p in enumerate(procs)
                            if p.exitcode is not None and r not in got and r not in expect_dead]
                    if dead and results.empty():
                        time.sleep(0.5)  # a result may still be in the pipe
                        if results.empty():
                            codes = {r: procs[r].exitcode for r in dead}
                            raise RankFailure(f"ranks died without a result: {codes}")
                    continue
                if not ok:
                    raise RankFailure(f"rank {rank} failed:\n{value}")
                got[rank] = value
        finally:
            # Ranks that reported exit by themselves (a rank stuck at exit is a failure,
            # its exit code -9); after a failure the rest are killed sooner.
            end = time.monotonic() + (30 if len(got) == world - len(expect_dead) else 3)
            for p in procs:
                p.join(timeout=max(0.1, end - time.monotonic()))
                if p.is_alive():
                    p.kill()
                    p.join()
        return [got.get(r) for r in range(world)], [p.exitcode for p in procs]


def env_for_children():
    """The environment multi-process tests run their ranks with."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
