"""tdist as a backend of torch.distributed.

Importing this package registers the backend "tdist" with torch.distributed; groups created
with it run torch.distributed's CPU collectives on tdist's native engines::

    import tdist  # registers the backend
    import torch.distributed as dist
    dist.init_process_group("tdist")  # env://, as torchrun and tdistrun set it

Engines: "auto" (shared memory when every rank of the group is on one host, else TCP),
"tcp" or "shm". A group takes the engine from its options
(``init_process_group("tdist", pg_options=tdist.Options(engine="shm"))``, also for
``new_group``), else from the environment variable TDIST_ENGINE, else "auto".

Errors: a dead rank, a timeout or ranks that disagree raise
torch.distributed.DistBackendError (a RuntimeError) from the collective or its wait();
invalid arguments (a tensor on another device than the CPU, for one) raise ValueError.

Fault tolerance (torch 2.x): ``torch.distributed.shrink_group`` and the reconfigure API
(``dist._reconfigure`` with the peers' ``dist._get_reconfigure_handle()``) work on tdist
groups; ``tdist.elastic`` runs a job that survives dead ranks under ``tdistrun --elastic``.
"""

import inspect

import torch  # noqa: F401  (loads LibTorch before the extension)
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "ENGINES", "Options", "default_engine"]

BACKEND = "tdist"
ENGINES = ("auto", "tcp", "shm")


class Options:
    """Options of one tdist group: pass as ``pg_options`` to init_process_group or new_group.

    engine: "auto", "tcp" or "shm"; None takes TDIST_ENGINE (default "auto").
    """

    def __init__(self, engine=None):
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"tdist: engine {engine!r} is not one of {', '.join(ENGINES)}")
        self.engine = engine

    def __repr__(self):
        return f"tdist.Options(engine={self.engine!r})"


def default_engine():
    """The engine of groups whose options name none (TDIST_ENGINE, default "auto")."""
    return _C.default_engine()


def _create_backend(common, options):
    engine = getattr(options, "engine", None) or default_engine()
    # enable_reconfigure (torch 2.x): no peers until torch.distributed._reconfigure.
    return _C.create_backend(common.store, common.group_rank, common.group_size,
                             common.timeout, engine,
                             bool(getattr(common, "enable_reconfigure", False)))


# Registered for CUDA too (torch 2.x), so that a CUDA tensor reaches tdist and gets its
# error (which names the device) instead of torch's "no backend for device type cuda".
# LibTorch 1.13's register_backend takes no devices: its groups are the backend itself.
if BACKEND.upper() not in dist.Backend._plugins:  # imported once per process
    _devices = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        _devices = {"devices": ["cpu", "cuda"]}
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, **_devices)


# tdist keeps its own flight record of every group's collectives (TDIST_FLIGHT_RECORDER_SIZE,
# written when a group fails and on tdist-status's request), so torch's per-call recorder
# hook, which torch attaches to third-party backends, would only repeat it at ~2 us a call.
_self_recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
if _self_recording is not None:
    _self_recording.add(BACKEND)


# DDP's logging data takes the backend's name from c10d's ProcessGroup, which calls every
# third-party backend "custom"; name it as dist.get_backend() does.
def _name_backend_in_ddp_logging():
    ddp_class = getattr(torch.nn.parallel, "DistributedDataParallel", None)
    original = getattr(ddp_class, "_get_ddp_logging_data", None)
    if original is None or getattr(original, "_tdist", False):
        return

    def _get_ddp_logging_data(self):
        data = original(self)
        if data.get("backend_name") == "custom":
            try:
                data["backend_name"] = dist.get_backend(self.process_group)
            except (RuntimeError, ValueError):
                pass
        return data

    _get_ddp_logging_data._tdist = True
    ddp_class._get_ddp_logging_data = _get_ddp_logging_data


_name_backend_in_ddp_logging()
