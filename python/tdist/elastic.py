"""Elastic training on the tdist backend: a job whose group survives dead ranks.

Run the script under ``tdistrun --elastic``. When a worker dies, tdistrun starts a
replacement with the same RANK while ``--max-restarts`` allows (else the job goes on
without it); the others catch the error of their collective, move to the next
*generation* of the group, and every member behind takes the state of the most advanced
one (model, optimizer, step, your own values), sent from that member's memory::

    import tdist.elastic
    from torch.nn.parallel import DistributedDataParallel as DDP

    job = tdist.elastic.join()              # env:// under tdistrun --elastic; slot = RANK
    model, opt = Net(), torch.optim.SGD(...)
    sampler = tdist.elastic.ElasticSampler(len(data), job.size, job.rank)  # elastic_sampler.py
    job.recover(model, opt, sampler=sampler)  # a replacement takes a member's state here
    ddp = DDP(model)                        # the default group is the generation's
    while job.step < steps:
        try:
            idx = sampler.batch(B)          # the same again when a step is redone
            opt.zero_grad()
            loss_fn(ddp(data[idx])).backward()
            if job.commit():                # every rank finished the step's reductions
                opt.step()
                sampler.advance(len(idx))
        except Exception as e:
            if not tdist.elastic.is_failure(e):
                raise
            job.rejoin(model, opt, sampler=sampler)  # reconfigure() + recover(), as needed
            ddp = DDP(model)                # on the new generation's group

Generations (tdist::ElasticGroup, include/tdist/elastic.h): each process holds a slot, its
RANK at start; generation 0 has every slot; later ones have those that arrive for them,
ranked in slot order (a replacement keeps its rank; after a shrink the ranks are 0..n-1).
Each generation's group is a torch ProcessGroup over its own tdist group; by default it is
installed as torch.distributed's default group (as init_process_group does), so
``dist.get_rank()``, ``dist.all_reduce(t)`` and ``DDP(model)`` use it. Groups made from a
previous generation (new_group, a DDP) are stale after reconfigure(): make them again.

The vote: ``commit()`` is one all_reduce; True on every rank means every rank finished the
step. A rank dying during the step makes the others' commit (or backward) fail: no rank
applies the step, or the ranks whose vote completed do, and recover() brings the others to
them, so every member ends each step with the same state. ``step`` counts committed steps.

The store must outlive ranks: tdistrun's agent hosts it (join() refuses one hosted by rank
0); tests may pass a c10d store they keep alive (``join(store=..., slot=..., slots=...)``).
"""

import collections
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _C
from .elastic_sampler import ElasticSampler

__all__ = ["ElasticJob", "ElasticSampler", "Recovery", "StaleMemberError", "is_failure", "join"]

StaleMemberError = _C.StaleMemberError
StaleMemberError.__doc__ = (
    "This process arrived after a generation closed without it (it hung while the others "
    "moved on, or a replacement took its slot): it must exit; the job goes on.")

Recovery = collections.namedtuple("Recovery", "generation step source received bytes seconds")
Recovery.__doc__ = """What recover() did: the generation, the step every member is at now, the
rank whose state it is, the ranks that received it ([] when all were at the step), the
tensor bytes sent to each, and the seconds it took."""

# The failures a dead, hung or aborted peer causes, as torch raises them (DDP's backward
# wraps the backend's DistBackendError into a RuntimeError carrying its message).
_FAILURE_WORDS = ("PeerError", "TimeoutError", "timed out", "aborted", "Connection",
                  "connection", "peer")


def is_failure(error):
    """True when `error` is what a dead, hung or aborted peer causes (recover with
    ``job.rejoin``); False for anything else, StaleMemberError included."""
    if isinstance(error, StaleMemberError):
        return False
    if isinstance(error, getattr(dist, "DistBackendError", ())):
        return True
    return isinstance(error, RuntimeError) and "tdist" in str(error) and any(
        w in str(error) for w in _FAILURE_WORDS)


def _seconds(value, default):
    if value is None:
        return default
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def join(engine=None, timeout=None, join_window=None, min_size=1, store=None, slot=None,
         slots=None, default_group=True):
    """Joins the elastic job and returns its ElasticJob (blocks until the generation forms).

    engine: the tdist engine of the groups ("auto", "tcp", "shm"; default TDIST_ENGINE).
    timeout: collectives' and generations' timeout (timedelta or seconds; default
      TDIST_TIMEOUT). join_window: how long a generation waits for slots that have not
      arrived (default TDIST_ELASTIC_JOIN_WINDOW, 30 s). min_size: the fewest members a
      generation may have.
    store, slot, slots: a c10d store that outlives every rank, and this process's slot of
      `slots`; default: the job's store through env:// (tdistrun), slot RANK of WORLD_SIZE.
    default_group: install each generation's group as torch.distributed's default group
      (torch.distributed must not be initialized already).
    A process started while the job runs (a replacement) joins the next generation:
    ``newcomer`` is True and ``step`` -1 until recover().
    """
    engine = engine or _C.default_engine()
    t = _seconds(timeout, -1.0)
    window = _seconds(join_window, -1.0)
    if default_group and dist.is_initialized():
        raise RuntimeError("tdist.elastic.join: torch.distributed is initialized already; "
                           "pass default_group=False to keep its default group")
    if store is None:
        group = _C.ElasticGroup.join(engine, t, window, min_size, "env://")
        store = _env_store(t)
    else:
        if slot is None or slots is None:
            raise ValueError("tdist.elastic.join: with a store, pass slot and slots")
        group = _C.ElasticGroup.join_store(store, slot, slots, engine, t, window, min_size)
    return ElasticJob(group, engine, store, default_group)


def _env_store(timeout):
    """A c10d client of the job's store (env://, as init_process_group opens it), for the
    generations' torch groups (new_group on them meets through it)."""
    if not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        return None
    kwargs = {} if timeout < 0 else {"timeout": timedelta(seconds=timeout)}
    store, _, _ = next(dist.rendezvous("env://", **kwargs))
    return store


class _Tensor:
    """A tensor's place in a state sent by recover(): its index, shape and dtype."""

    __slots__ = ("index", "shape", "dtype")

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype

    def __getstate__(self):
        return (self.index, self.shape, self.dtype)

    def __setstate__(self, state):
        self.index, self.shape, self.dtype = state


def _strip(obj, tensors):
    """obj with each tensor replaced by its _Tensor (appended to `tensors`)."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj.detach().contiguous())
        return _Tensor(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) in (dict, collections.OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _strip(v, tensors)
        if hasattr(obj, "_metadata"):  # nn.Module.state_dict()'s versions
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        items = [_strip(v, tensors) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _specs(obj, out):
    """The _Tensors in obj, in order."""
    if isinstance(obj, _Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _specs(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _specs(v, out)
    return out


def _fill(obj, tensors):
    """obj with each _Tensor replaced by its tensor."""
    if isinstance(obj, _Tensor):
        return tensors[obj.index]
    if isinstance(obj, dict):
        out = type(obj)()
        for k, v in obj.items():
            out[k] = _fill(v, tensors)
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)):
        items = [_fill(v, tensors) for v in obj]
        return items if isinstance(obj, list) else tuple(items)
    return obj


def _mismatch(skeleton, model):
    """The first difference between the source's model catalog and `model`'s, or None."""
    if model is None or skeleton.get("model") is None:
        return None if (model is None) == (skeleton.get("model") is None) else "model"
    mine = model.state_dict()
    theirs = skeleton["model"]
    if list(mine.keys()) != list(theirs.keys()):
        extra = sorted(set(mine) ^ set(theirs))
        return f"model entries differ ({', '.join(extra[:3]) or 'order'})"
    for name, spec in theirs.items():
        t = mine[name]
        if not isinstance(spec, _Tensor) or tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
            got = getattr(spec, "shape", spec), getattr(spec, "dtype", "")
            return f"model entry {name}: {tuple(t.shape)} {t.dtype} here, {got[0]} {got[1]} there"
    return None


class ElasticJob:
    """This process's membership of an elastic job (made by join()).

    Attributes: ``group`` (the current generation's torch ProcessGroup), ``rank`` and
    ``size`` (in it), ``slot`` and ``slots``, ``generation``, ``members`` (the slots by
    rank), ``newcomer`` (joined a running job), ``step`` (committed steps; -1 for a
    newcomer before its recover(); settable, e.g. after loading a checkpoint).
    One thread drives a job.
    """

    def __init__(self, group, engine, store, default_group):
        self._elastic = group
        self._engine = engine
        self._store = store
        self._default = default_group
        self._pg = None
        self.step = -1 if group.newcomer else 0
        self._install()

    # ---- the generation ----
    @property
    def group(self):
        """The current generation's torch.distributed ProcessGroup (backend "tdist")."""
        return self._pg

    rank = property(lambda self: self._elastic.rank, doc="This process's rank in the generation.")
    size = property(lambda self: self._elastic.size, doc="The generation's size.")
    slot = property(lambda self: self._elastic.slot, doc="This process's slot (its RANK at start).")
    slots = property(lambda self: self._elastic.slots, doc="The job's slots (WORLD_SIZE).")
    generation = property(lambda self: self._elastic.generation, doc="The generation's number.")
    members = property(lambda self: list(self._elastic.members), doc="The members' slots, by rank.")
    newcomer = property(lambda self: self._elastic.newcomer,
                        doc="True when this process joined a running job (a replacement).")
    last_reconfigure = property(lambda self: self._elastic.last_reconfigure,
                                doc="Seconds the last reconfigure took (abort to group ready).")

    def _install(self):
        """Makes the generation's torch ProcessGroup (and the default group)."""
        c10d = dist.distributed_c10d
        g = self._elastic.generation
        name = f"tdist_elastic_g{g}"
        store = self._store if self._store is not None else dist.HashStore()
        store = dist.PrefixStore(f"tdist/elastic/torch/{g}/", store)
        pg = dist.ProcessGroup(store, self.rank, self.size)
        backend = self._elastic.backend(self._engine)
        for device in ("cpu", "cuda"):  # as the registered backend: cuda tensors get tdist's error
            pg._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM,
                                 backend)
        pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        pg._set_group_name(name)
        pg._set_group_desc(f"tdist elastic generation {g}")
        c10d._register_pg_in_world(pg=pg, backend_name="tdist", store=store, group_name=name,
                                   backend_config="cpu:tdist,cuda:tdist",
                                   rank_mapping={r: r for r in range(self.size)}
                                   if self._default else None)
        if self._default:
            c10d._update_default_pg(pg)
        self._pg = pg

    def _uninstall(self):
        c10d = dist.distributed_c10d
        if self._pg is None:
            return
        if self._default and c10d._world.default_pg is self._pg:
            c10d._update_default_pg(None)
        c10d._cleanup_process_group_global_state(self._pg)
        self._pg = None

    def reconfigure(self):
        """Aborts the current generation's group (its pending operations fail) and joins the
        next generation; every member alive calls it after a failure. Afterwards ``group``
        is the new generation's (and the default group); then call recover().
        Raises StaleMemberError when the generation closed without this process."""
        self._uninstall()
        self._elastic.reconfigure()
        self._install()

    def commit(self, ok=True):
        """The per-step vote (one all_reduce): True when every rank voted ok; then ``step``
        advances and the caller applies the step (optimizer.step()). Raises the failure of
        a peer (is_failure) as the collectives do: the step may be complete on some ranks
        only, which recover() sorts out."""
        agreed = self._elastic.commit(ok)
        if agreed:
            self.step += 1
        return agreed

    def recover(self, model=None, optimizer=None, extra=None, sampler=None):
        """Brings every member to the most advanced member's state (collective).

        The source is the lowest rank at the highest ``step``; each member behind it receives
        ``model.state_dict()``, ``optimizer.state_dict()`` and ``extra`` (a dict of your own
        values, tensors or picklable objects, updated in place) from it, point to point, and
        loads them; ``step`` becomes the source's. With ``sampler`` (an ElasticSampler, the
        same on every member) every member's sampler moves to this generation and deals it
        the rest of the source's epoch: no sample is lost or read twice. Before anything is
        sent every member compares the source's model entries (names, shapes, dtypes) and
        dataset size with its own: one that differs raises ValueError and must exit; the
        others raise DistBackendError, a failure to rejoin() on. A member failing during the
        transfer raises the failure: call rejoin(). Returns a Recovery.
        """
        start = time.monotonic()
        pg, me = self._pg, self.rank
        steps = torch.empty(self.size, dtype=torch.int64)
        dist.all_gather_into_tensor(steps, torch.tensor([self.step], dtype=torch.int64), group=pg)
        best = int(steps.max())
        if best < 0:
            raise RuntimeError("tdist.elastic.recover: no member has a committed state (every "
                               "member is a newcomer); generation 0's members start at step 0")
        source = int((steps == best).nonzero()[0])
        behind = [r for r in range(self.size) if int(steps[r]) < best]
        place = None  # the source's (epoch, positions trained on), for the samplers
        problem = None  # why this member cannot take the source's state
        if sampler is not None:
            box = [sampler.state() if me == source else None]
            dist.broadcast_object_list(box, group=pg, group_src=source)
            place = box[0]
            if len(place[1]) != sampler.dataset_len:
                problem = (f"its dataset has {sampler.dataset_len} samples, rank {source}'s "
                           f"{len(place[1])}")
        if not behind:
            if sampler is not None:
                self._agree(source, problem)
                sampler.resume(place[0], place[1], self.size, me)
            return Recovery(self.generation, best, source, [], 0, time.monotonic() - start)
        tensors = []
        if me == source:
            skeleton = _strip({"model": model.state_dict() if model is not None else None,
                               "optimizer": optimizer.state_dict() if optimizer is not None
                               else None,
                               "extra": dict(extra) if extra is not None else None}, tensors)
        box = [skeleton if me == source else None]
        dist.broadcast_object_list(box, group=pg, group_src=source)
        skeleton = box[0]
        self._agree(source, problem or _mismatch(skeleton, model))
        specs = _specs(skeleton, [])
        if me == source:
            ops = [dist.P2POp(dist.isend, t, group=pg, group_peer=dst)
                   for dst in behind for t in tensors]
        elif me in behind:
            tensors = [torch.empty(s.shape, dtype=s.dtype) for s in specs]
            ops = [dist.P2POp(dist.irecv, t, group=pg, group_peer=source) for t in tensors]
        else:
            ops = []
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        sent = sum(t.numel() * t.element_size() for t in tensors)
        if me in behind:
            state = _fill(skeleton, tensors)
            if model is not None:
                model.load_state_dict(state["model"])
            if optimizer is not None:
                optimizer.load_state_dict(state["optimizer"])
            if extra is not None and state["extra"] is not None:
                extra.clear()
                extra.update(state["extra"])
            self.step = best
        if sampler is not None:
            sampler.resume(place[0], place[1], self.size, me)
        return Recovery(self.generation, best, source, behind, sent, time.monotonic() - start)

    def _agree(self, source, problem):
        """Every member says whether it can take rank ``source``'s state (one all_reduce,
        also when ``problem`` is set here: the others must not wait for this member)."""
        ok = torch.tensor([0 if problem else 1], dtype=torch.int32)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=self._pg)
        if problem:
            raise ValueError(f"tdist.elastic.recover: slot {self.slot} (generation "
                             f"{self.generation}) cannot take rank {source}'s state: {problem}; "
                             "this process must exit")
        if not int(ok):
            raise dist.DistBackendError(
                f"tdist.elastic.recover: a member of generation {self.generation} cannot take "
                f"rank {source}'s state and leaves; reconfigure without it (rejoin)")

    def rejoin(self, model=None, optimizer=None, extra=None, sampler=None):
        """After a failure (is_failure): reconfigure(), then recover(model, optimizer,
        extra, sampler), again as long as a member fails meanwhile. Returns recover()'s
        Recovery."""
        while True:
            try:
                self.reconfigure()
                return self.recover(model, optimizer, extra, sampler)
            except Exception as e:  # noqa: BLE001 (only failures are retried)
                if not is_failure(e):
                    raise

    def close(self):
        """Leaves torch.distributed's default group (destroy_process_group); the job's
        other members go on."""
        if self._pg is not None and self._default:
            dist.destroy_process_group()
        self._pg = None
