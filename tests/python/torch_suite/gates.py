"""Loads PyTorch's distributed suite (torch.testing._internal.distributed.distributed_test)
with its gloo gates opened to tdist, so that every test that runs for gloo runs for tdist.

The suite picks tests by backend name: literal `BACKEND != "gloo"` / `BACKEND == "gloo"`
decorators and branches, `require_backend_is_available({"gloo"})`, allowlists of
`dist.Backend.GLOO`, and the sets of common_distributed.DistTestCases. load() reads the
module's source, rewrites each gloo gate into a gloo-or-tdist one (nothing else: a helper
group created with backend=GLOO stays gloo), adds "tdist" to every DistTestCases set gloo is
in, and installs the result under the module's own name before anything imports it.
With BACKEND=gloo the rewritten suite behaves exactly as the original one.

Needs BACKEND and WORLD_SIZE in the environment (the suite reads them at import).
"""

import importlib.util
import os
import re
import sys

MODULE = "torch.testing._internal.distributed.distributed_test"

# (pattern, replacement, how many the suite of torch 2.15 has): the counts guard against a
# torch whose suite changed shape, where a silent no-op would leave tdist's tests skipped.
REWRITES = (
    (r'BACKEND != "gloo"', '(BACKEND != "gloo" and BACKEND != "tdist")', 19),
    (r'BACKEND == "gloo"', '(BACKEND == "gloo" or BACKEND == "tdist")', 1),
    (r'require_backend_is_available\(\{"gloo"\}\)',
     'require_backend_is_available({"gloo", "tdist"})', 19),
)
# PROFILING_SUPPORTED_BACKENDS and its kin: the tests check "<backend>:<op>" profiler events
# of the backends listed, before they check the op's results. TORCH_SUITE_PROFILER=0 leaves
# tdist out, so that a test checks the results of an op whose events are missing.
PROFILER_REWRITE = (r'^(    )dist\.Backend\.GLOO,$', r'\1dist.Backend.GLOO, "tdist",', 3)


def rewrites():
    if os.environ.get("TORCH_SUITE_PROFILER", "1") == "0":
        return REWRITES
    return REWRITES + (PROFILER_REWRITE,)


def rewrite(source):
    """The suite's source with each gloo gate opened to tdist, line for line (a traceback
    names the installed file's lines)."""
    for pattern, replacement, expected in rewrites():
        source, n = re.subn(pattern, replacement, source, flags=re.MULTILINE)
        if n != expected:
            raise RuntimeError(f"torch_suite: {pattern!r} matched {n} times, not {expected}: "
                               "the installed torch's suite changed; review gates.py")
    return source


def open_feature_sets():
    """tdist in every DistTestCases set that gloo is in ("gpu", "cuda", "ddp", "subgroup";
    GPU-only tests still skip on GPU counts) and in "plugin" (a registered backend)."""
    from torch.testing._internal.common_distributed import DistTestCases

    for names in DistTestCases.backend_feature.values():
        if "gloo" in names:
            names.add("tdist")
    DistTestCases.backend_feature["plugin"].add("tdist")
    for names in DistTestCases.skip_collective.values():
        if "gloo" not in names:
            names.discard("tdist")


def load():
    """The rewritten suite module, imported once per process (children forked from the
    harness inherit it; spawned ones import the harness, which calls this again)."""
    if MODULE in sys.modules:
        module = sys.modules[MODULE]
        if not getattr(module, "_tdist_gates_opened", False):
            raise RuntimeError(f"torch_suite: {MODULE} was imported before gates.load()")
        return module
    if os.environ["BACKEND"] == "tdist":
        import tdist  # noqa: F401  (registers the backend before the suite checks for it)
    open_feature_sets()
    spec = importlib.util.find_spec(MODULE)
    with open(spec.origin, encoding="utf-8") as f:
        source = rewrite(f.read())
    module = importlib.util.module_from_spec(spec)
    module._tdist_gates_opened = True
    sys.modules[MODULE] = module
    try:
        exec(compile(source, spec.origin, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[MODULE]
        raise
    return module
