"""Runs a torch.distributed program unmodified on another backend, for side-by-side runs.

With this folder on PYTHONPATH and TDIST_BENCH_BACKEND=tdist (or any registered backend),
every process (mp.spawn's children too, which inherit the environment) swaps the backend
named in init_process_group for it; `import tdist` registers "tdist". Used by
scripts/bench_python.sh to run ../shared/anchors' gloo scripts over tdist as written.
"""

import os

_backend = os.environ.get("TDIST_BENCH_BACKEND")
if _backend:
    import torch.distributed as _dist

    if _backend == "tdist":
        import tdist  # noqa: F401

    _init = _dist.init_process_group

    def _init_on_bench_backend(backend=None, *args, **kwargs):
        return _init(_backend, *args, **kwargs)

    _dist.init_process_group = _init_on_bench_backend
