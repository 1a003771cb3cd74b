"""pytest configuration of the Python backend's tests: ranks run single-threaded, and
this folder is importable by the spawned ranks (multiprocessing passes sys.path on)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_collection_modifyitems(items):
    """The seed example first: the slowest test by far (it trains twice), and pytest-xdist
    hands tests out in this order, so started last it would end the run late."""
    items.sort(key=lambda item: item.name != "test_seed_example_reaches_gloo_accuracy")
