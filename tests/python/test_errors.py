"""Errors reach Python as exceptions, not hangs."""

import os
import re
import tempfile

import pytest
import torch

from ddp_workers import device_errors, sigkill_mid_all_reduce, skipped_call_in_loop
from harness import run_ranks


@pytest.mark.parametrize("engine", ["tcp", "shm"])
def test_sigkill_mid_all_reduce_raises_within_5s(engine):
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "killed_at")
        results, codes = run_ranks(sigkill_mid_all_reduce, 3, timeout=60, expect_dead={2},
                                   engine=engine, stamp=stamp)
    assert codes[2] == -9, codes
    for r in results[:2]:
        assert r["error"] is not None, "the survivors kept going without the dead rank"
        assert r["is_dist_backend_error"], r
        assert r["seconds"] < 5.0, r


@pytest.mark.parametrize("engine", ["tcp", "shm"])
def test_a_skipped_call_is_named_by_both_lines_under_callsite(engine):
    results, codes = run_ranks(skipped_call_in_loop, 2, timeout=60, engine=engine)
    assert codes == [0, 0]
    first, second = results[0]["lines"]["first"], results[1]["lines"]["second"]
    expected = (rf"rank 0 called all_reduce #\d+ f32 x4 sum at ddp_workers.py:{first}; "
                rf"rank 1 called all_reduce #\d+ f32 x4 sum at ddp_workers.py:{second}")
    for r in results:
        assert r["error"] is not None, "the ranks went on past the skipped call"
        assert re.search(expected, r["message"]), r["message"]
        assert r["seconds"] < 5.0, r


def test_wrong_device_is_a_clear_error():
    results, codes = run_ranks(device_errors, 2, timeout=60)
    assert codes == [0, 0]
    for r in results:
        meta = r["messages"]["meta"]
        assert meta is not None and "meta" in meta.lower(), meta
        # torch 2.x hands the tensor to tdist, whose error names it; 1.13's dispatcher
        # refuses a meta tensor before any backend sees it.
        if int(torch.__version__.split(".")[0]) >= 2:
            assert meta.startswith("ValueError") and "move it to the CPU" in meta, meta
        if "cuda" in r["messages"]:
            # A tdist built against a CUDA torch takes CUDA tensors (staged through pinned
            # memory on this host backend); one without CUDA names the device it refuses.
            cuda = r["messages"]["cuda"]
            assert cuda is None or "cuda" in cuda, cuda
        assert r["sum"] == [2.0, 2.0, 2.0]
