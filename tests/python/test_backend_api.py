"""The c10d Backend API beyond the collectives (backend_api_workers.py), on tdist."""

import re

import pytest
import torch

from backend_api_workers import any_source, coalesced, group_api, join_uneven, sparse
from harness import run_ranks

# torch 1.13 has none of the coalescing manager, split_group, collective timing or plugin
# flight-recorder hooks these use; its backend API is the 1.13 ProcessGroup's.
torch2_only = pytest.mark.skipif(int(torch.__version__.split(".")[0]) < 2,
                                 reason="torch 2.x's c10d Backend API")


def test_any_source_receive_reports_each_sender():
    results, codes = run_ranks(any_source, 3, timeout=90)
    assert codes == [0, 0, 0]
    assert results[0]["blocking"] == [(1, [1.0] * 3), (2, [2.0] * 3)], results[0]
    assert results[0]["large"] == (2, 2.0, 2.0), results[0]


@torch2_only
def test_coalesced_calls_and_coalescing_manager():
    results, codes = run_ranks(coalesced, 3, timeout=90)
    assert codes == [0, 0, 0]
    for r in results:
        for key in ("gather_ok", "reduce_ok", "into_ok", "scatter_ok", "batch_ok",
                    "batch_future_ok"):
            assert r[key], (key, r)
        assert r["mixed"] is not None and "dtype" in r["mixed"], r["mixed"]
        assert r["after"] == 3.0


def test_sparse_all_reduce_sums_and_refuses_clearly():
    results, codes = run_ranks(sparse, 2, timeout=90)
    assert codes == [0, 0]
    for r in results:
        assert r["ok"], r
        assert r["max"] is not None and "summed" in r["max"], r["max"]
        assert r["shape"] is not None and "shape" in r["shape"], r["shape"]
        assert r["after"] == 2.0


@torch2_only
def test_split_monitored_barrier_sequence_names_and_timeouts():
    results, codes = run_ranks(group_api, 3, timeout=120)
    assert codes == [0, 0, 0]
    for rank, r in enumerate(results):
        assert r["supports_splitting"] and r["supports_coalescing"], r
        assert r["split_sum"] == (1.0 if rank < 2 else float(rank)), r
        assert r["split_size"] == (2 if rank < 2 else 1), r
        assert r["split_backend"] == "tdist", r
        assert r["seq_step"] == 1, r
        assert r["waited_work"] == "None" and r["waited_sum"] == [3.0] * 3, r
        assert r["async_work"], r
        assert r["ddp_backend"] == "tdist", r
        assert 0.0 < r["duration_ms"] < 10000.0, r
    assert re.search("Rank 2 failed to pass monitoredBarrier", results[0]["monitored"])
    assert re.search("Rank 1 successfully reached monitoredBarrier, but received errors while "
                     "waiting for send/recv from rank 0", results[1]["monitored"])
    assert re.search(" (Timed out|closed|timeout) ", results[0]["timeout"]), results[0]


def test_join_for_uneven_inputs_matches_gloo():
    runs = {}
    for backend in ("gloo", "tdist"):
        results, codes = run_ranks(join_uneven, 2, timeout=90, backend=backend)
        assert codes == [0, 0]
        assert results[0] == results[1], (backend, results)
        runs[backend] = results[0]
    assert runs["tdist"] == runs["gloo"], runs
