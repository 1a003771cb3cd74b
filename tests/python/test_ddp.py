"""PyTorch's own DistributedDataParallel over tdist and over gloo: same seed and data,
5 steps; the parameters must agree within 1e-6 relative."""

import pytest

from ddp_workers import ddp_parity
from harness import run_ranks


@pytest.mark.parametrize("engine", ["auto", "tcp"])
def test_ddp_matches_gloo(engine):
    results, codes = run_ranks(ddp_parity, 2, timeout=180, engine=engine)
    assert codes == [0, 0]
    for r in results:
        assert r["worst_relative"] <= 1e-6, r
        assert r["replicas_equal"], r
        assert r["moved"], r
