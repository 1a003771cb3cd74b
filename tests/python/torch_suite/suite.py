"""The test case class of the harness: PyTorch's DistributedTest._DistTestBase on the
backend named by BACKEND (gloo or tdist), with the gloo gates opened to tdist (gates.py).

Each test starts WORLD_SIZE rank processes (forked from this process by default, which has
imported torch, the suite and tdist once; TORCH_SUITE_START=spawn starts fresh interpreters
that import this module again) that meet through a file:// rendezvous of their own. A rank's
stdout and stderr go to $TORCH_SUITE_LOGS/<test>.rank<N>.log. Every test has a timeout
(common_distributed's get_timeout, from DISTRIBUTED_TESTS_DEFAULT_TIMEOUT), after which
its ranks are killed and it fails. Tests listed in expected_skips_<backend>.txt are skipped
with the reason given there.
"""

import logging
import os
import sys

import torch.multiprocessing

import gates

dt = gates.load()
from torch.testing._internal import common_distributed  # noqa: E402  (after gates.load)

HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.environ["BACKEND"]
START = os.environ.get("TORCH_SUITE_START", "fork")
EXPECTED_SKIP_PREFIX = "expected for "


def expected_skips(backend):
    """{test: reason} from expected_skips_<backend>.txt: `test_name  reason` per line;
    what follows a `#`, and blank lines, are ignored."""
    path = os.path.join(HERE, f"expected_skips_{backend}.txt")
    skips = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    name, _, reason = line.partition(" ")
                    skips[name] = reason.strip() or "no reason given"
    return skips


EXPECTED_SKIPS = expected_skips(BACKEND)
# The suite's log lines ("Started process 0 with pid ...") go to the test's main log only.
common_distributed.logger.propagate = False


def log_path(test_name, who):
    return os.path.join(os.environ["TORCH_SUITE_LOGS"], f"{test_name}.{who}.log")


def _redirect_output(path):
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class TorchSuite(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
    """One test of PyTorch's distributed suite, run by WORLD_SIZE rank processes."""

    def setUp(self):
        name = self._testMethodName
        if name in EXPECTED_SKIPS:
            self.skipTest(f"{EXPECTED_SKIP_PREFIX}{BACKEND}: {EXPECTED_SKIPS[name]}")
        super().setUp()
        # The parent's own messages of this test (a timed-out rank's stack, for one).
        self._log_handler = logging.FileHandler(log_path(name, "main"), delay=True)
        common_distributed.logger.addHandler(self._log_handler)
        if START == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()

    def tearDown(self):
        processes = list(self.processes)
        try:
            super().tearDown()  # removes TEMP_DIR, SIGTERMs the ranks still running
        finally:
            for p in processes:  # a rank that ignores SIGTERM (stuck in C++) is killed
                p.join(timeout=10)
                if p.is_alive():
                    p.kill()
                    p.join()
            common_distributed.logger.removeHandler(self._log_handler)
            self._log_handler.close()
            if os.path.exists(self.file_name):
                os.unlink(self.file_name)

    @classmethod
    def _run(cls, rank, test_name, file_name, pipe, **kwargs):
        """A rank: its output to its log; the suite's INIT_METHOD (read at import) is this
        test's own file:// (initialize_temp_directories made it in the parent's setUp)."""
        _redirect_output(log_path(test_name, f"rank{rank}"))
        # INFO: the reason a rank skips is logged by MultiProcessTestCase.run_test.
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True)
        common_distributed.logger.handlers.clear()  # the parent's, inherited by a fork
        common_distributed.logger.propagate = True
        common_distributed.logger.setLevel(logging.INFO)
        dt.INIT_METHOD = os.environ["INIT_METHOD"]
        super()._run(rank, test_name, file_name, pipe, **kwargs)
