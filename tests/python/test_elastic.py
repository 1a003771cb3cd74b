"""Fault tolerance on tdist groups through torch 2.x's API: shrink_group after a rank died,
the reconfigure API (elastic_workers.py), and tdist.elastic: a store-hosted job, and PyTorch
DDP under tdistrun --elastic (elastic_train.py) surviving a SIGKILLed rank with a
replacement (bit for bit the parameters of a run without the failure) or without one."""

import json
import os
import subprocess
import sys
import tempfile

import pytest
import torch
import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler

from conftest import HERE, ROOT
from elastic_workers import (elastic_on_store, reconfigure_api, sampler_mismatch,
                             shrink_after_death)
from harness import run_ranks

pytestmark = pytest.mark.skipif(
    not hasattr(torch.distributed.distributed_c10d, "_reconfigure"),
    reason="torch.distributed has no shrink_group/_reconfigure (torch 2.x with them)")


@pytest.mark.parametrize("abort_flag", [True, False])
def test_shrink_group_after_a_rank_died(abort_flag):
    results, codes = run_ranks(shrink_after_death, 3, timeout=90, expect_dead=(2,),
                               abort_flag=abort_flag)
    assert codes[:2] == [0, 0]
    for rank in (0, 1):
        r = results[rank]
        assert r["before"] == 6.0, r
        assert r["failed"] is not None and "DistBackendError" in r["failed"], r
        assert r["supports"] and r["same_as_default"], r
        assert (r["rank"], r["size"], r["backend"]) == (rank, 2, "tdist"), r
        assert r["after"] == 3.0, r
    assert results[0]["alone"] == (1, 1.0), results[0]


@pytest.mark.parametrize("deferred", [False, True], ids=["eager", "enable_reconfigure"])
def test_reconfigure_with_handles_from_the_store(deferred):
    results, codes = run_ranks(reconfigure_api, 3, timeout=90, deferred=deferred)
    assert codes == [0, 0, 0]
    for rank, r in enumerate(results):
        assert r["supports"] and r["handle_stable"] and r["handles_distinct"], r
        if deferred:
            assert "enable_reconfigure" in r["before"], r
        else:
            assert r["before"] == 6.0, r
        assert r["reversed"] == (2 - rank, 3, 6.0), r
        assert r["set"][0] == r["set"][1] and r["set"][2] == 6.0, r
        assert r["smaller"] == ((rank, 2, 3.0) if rank < 2 else (0, 1, 1.0)), r
        assert "ValueError" in r["reused"] and f"uuid {103 if rank < 2 else 104}" in r["reused"], r
        assert "ValueError" in r["stranger"] and "not among" in r["stranger"], r
        assert r["again"] == (rank, 3, 6.0), r


def test_elastic_job_on_a_store_shrinks_after_a_death():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    results, codes = run_ranks(elastic_on_store, 3, timeout=120, expect_dead=(2,),
                               port=store.port)
    assert codes[:2] == [0, 0]
    for rank in (0, 1):
        r = results[rank]
        assert r["first"] == (0, rank, 3, rank, 3), r
        assert "failure" in r and r["recovery"] == (1, 3, []), r
        assert r["last"] == (1, rank, 2, rank, 2, [0, 1]), r
        assert r["seen"] == [1, 2, 3, 4, 5, 6], r
    assert results[0]["w"] == results[1]["w"]
    # The epoch: slot 2 trained on its first 6 samples (torch's DistributedSampler's), the
    # survivors on theirs and then on the rest between them: every sample once.
    slot2 = list(DistributedSampler(range(30), 3, 2, seed=3))[:6]
    trained = results[0]["indices"] + results[1]["indices"] + slot2
    assert sorted(trained) == list(range(30)), (results[0]["indices"], results[1]["indices"])


def test_a_member_with_another_dataset_is_refused():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    results, codes = run_ranks(sampler_mismatch, 2, timeout=60, port=store.port)
    assert codes == [0, 0]
    assert results[1].startswith("ValueError") and "dataset has 31 samples" in results[1], results
    assert results[0].startswith("DistBackendError") and "cannot take" in results[0], results


def tdistrun():
    for path in (os.environ.get("TDIST_TDISTRUN"),
                 os.path.join(ROOT, "build-torch2", "tools", "tdistrun"),
                 os.path.join(ROOT, "build", "tools", "tdistrun")):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip("tdistrun is not built (build-torch2/tools/tdistrun; or set TDIST_TDISTRUN)")


def train(tmp, name, restarts, die=None, timeout=240):
    """elastic_train.py under tdistrun --elastic with 4 workers; the ranks' reports."""
    out = os.path.join(tmp, name)
    cmd = [tdistrun(), "--standalone", "--nproc-per-node", "4", "--elastic", "--max-restarts",
           str(restarts), sys.executable, os.path.join(HERE, "elastic_train.py"), "--out", out,
           "--marks", tmp]
    if die:
        cmd += ["--die", die]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{log[-6000:]}"
    reports = {}
    for slot in range(4):
        path = f"{out}.{slot}"
        if os.path.exists(path):
            with open(path) as f:
                reports[slot] = json.load(f)
    return reports, log


@pytest.fixture(scope="module")
def reference():
    with tempfile.TemporaryDirectory() as tmp:
        reports, log = train(tmp, "clean", restarts=0)
    assert sorted(reports) == [0, 1, 2, 3], log
    hashes = {r["hash"] for r in reports.values()}
    assert len(hashes) == 1, reports
    assert all(r["step"] == 12 and r["world"] == 4 and r["generation"] == 0
               for r in reports.values()), reports
    return hashes.pop()


@pytest.mark.parametrize("die", ["1@5", "2@7:after-vote"])
def test_ddp_replacement_matches_a_run_without_the_failure_bit_for_bit(reference, die):
    dead = int(die[0])
    with tempfile.TemporaryDirectory() as tmp:
        reports, log = train(tmp, "replaced", restarts=1, die=die)
        assert os.path.exists(os.path.join(tmp, "died")), log
    assert sorted(reports) == [0, 1, 2, 3], log
    for slot, r in reports.items():
        assert (r["step"], r["world"], r["generation"]) == (12, 4, 1), (slot, r, log[-3000:])
        assert r["hash"] == reference, (slot, r)
        assert r["default_is_job_group"], r
    # The replacement took a survivor's state (after the vote: at the step the vote committed).
    assert any(e[0] == "recovered" and e[3] == [dead] for e in reports[dead]["events"]), reports
    assert any(e[0] == "rejoined" for e in reports[0]["events"]), reports[0]


def test_ddp_without_restarts_shrinks_to_three_and_finishes():
    with tempfile.TemporaryDirectory() as tmp:
        reports, log = train(tmp, "shrunk", restarts=0, die="3@4")
    assert sorted(reports) == [0, 1, 2], log
    assert "no restarts left: the job goes on without rank 3" in log, log[-3000:]
    assert len({r["hash"] for r in reports.values()}) == 1, reports
    for r in reports.values():
        assert (r["step"], r["world"], r["generation"]) == (12, 3, 1), r
