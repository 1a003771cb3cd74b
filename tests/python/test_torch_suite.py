"""PyTorch's own distributed test suite on tdist, the CI subset (the whole suite, gloo and
tdist side by side: scripts/torch_suite.sh): collectives, point-to-point (any source too),
subgroups, DDP, monitored barrier, timeouts and profiler events, at world size 2, and a few
at world size 3. Every test listed must pass, or be skipped as expected_skips_tdist.txt
says. Each world size is one run of torch_suite/run.py (its ranks forked from it): both
together about 65 s on 2 idle cores, 50 s under pytest -n 2. Timeouts: each suite test
TEST_TIMEOUT_S, each run RUN_TIMEOUT_S[world] (then its processes are killed and the test
fails with what had run)."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "torch_suite", "run.py")
TEST_TIMEOUT_S = 30
RUN_TIMEOUT_S = {2: 150, 3: 90}

SUBSETS = {
    2: [
        # collectives
        "test_all_reduce_sum", "test_all_reduce_max", "test_all_reduce_sum_async",
        "test_all_reduce_coalesced_sum", "test_all_reduce_complex_unsupported_ops",
        "test_broadcast", "test_reduce_sum", "test_all_gather", "test_all_gather_coalesced_simple",
        "test_gather", "test_scatter", "test_barrier", "test_sparse_all_reduce_sum",
        "test_all_gather_object_default_pg", "test_scatter_object_list", "test_get_future",
        # point-to-point
        "test_send_recv", "test_send_recv_any_source", "test_isend", "test_irecv",
        "test_send_recv_with_tag", "test_batch_isend_irecv_gloo",
        "test_send_recv_autograd_profiler",
        # subgroups
        "test_get_rank_size_group", "test_destroy_group", "test_all_gather_object_subgroup",
        "test_all_reduce_full_group_sum", "test_monitored_barrier_gloo_subgroup",
        # DDP
        "test_DistributedDataParallelCPU", "test_accumulate_gradients_no_sync_allreduce_hook",
        "test_ddp_logging_data_cpu", "test_static_graph_api_cpu",
        "test_grads_same_across_ranks_with_no_sync",
        # monitored barrier, timeouts, names
        "test_monitored_barrier_gloo", "test_monitored_barrier_gloo_rank_0_timeout",
        "test_barrier_timeout_global", "test_barrier_timeout_full_group", "test_get_backend",
    ],
    3: [
        "test_all_reduce_sum", "test_broadcast", "test_all_gather_coalesced_simple",
        "test_send_recv_any_source", "test_isend", "test_get_rank_size_group",
        "test_all_gather_object_subgroup", "test_monitored_barrier_gloo_subgroup",
        "test_DistributedDataParallelCPU", "test_barrier_timeout_full_group",
    ],
}


def run_suite(world, names, tmp_path):
    """The records of run.py's tests (those it finished, should it time out) and, when
    it timed out, a line saying so."""
    result = tmp_path / "result.json"
    cmd = [sys.executable, RUN, "--backend", "tdist", "--world", str(world),
           "--timeout", str(TEST_TIMEOUT_S), "--json", str(result),
           "--logs", str(tmp_path / "logs")]
    for name in names:
        cmd += ["-k", f"^{name}$"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    timed_out = ""
    try:
        proc.communicate(timeout=RUN_TIMEOUT_S[world])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # run.py and the ranks it forked
        proc.communicate()
        timed_out = f"run.py timed out after {RUN_TIMEOUT_S[world]} s"
    records = json.loads(result.read_text())["tests"] if result.exists() else []
    return {r["name"]: r for r in records}, timed_out


@pytest.mark.skipif(not torch.__version__.startswith("2."),
                    reason="the harness runs torch 2.x's suite (torch_suite/gates.py)")
@pytest.mark.parametrize("world", sorted(SUBSETS))
def test_torch_suite_on_tdist(world, tmp_path):
    records, timed_out = run_suite(world, SUBSETS[world], tmp_path)
    problems = [timed_out] if timed_out else []
    for name in SUBSETS[world]:
        record = records.get(name)
        if record is None:
            problems.append(f"{name}: did not run")
        elif record["outcome"] not in ("passed", "expected_skip"):
            problems.append(f"{name}: {record['outcome']}: {record['reason']}")
    assert not problems, (f"{len(problems)} of {len(SUBSETS[world])} tests, world {world} "
                          f"(logs: {tmp_path / 'logs'}):\n" + "\n".join(problems))
