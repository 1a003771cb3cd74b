"""torchrun from this interpreter's torch, usable on Python 3.11 with torch 1.13.

    /usr/bin/python3 torchrun.py [torchrun flags] PROGRAM [ARGS...]

torch 1.13's Std.from_str looks its value up by iterating the IntFlag, which from Python
3.11 on skips the zero member NONE, so the default --redirects 0 / --tee 0 become None and
torchrun fails before starting any worker. This mends only that lookup, and only when it
is broken, then runs torch.distributed.run unchanged, so timings and behaviour are
torchrun's own. torch 1.13 spells its flags with underscores (--nproc_per_node).
"""
import sys

from torch.distributed.elastic.multiprocessing import Std
from torch.distributed.run import main

if Std.from_str("0") is None:
    _from_str = Std.from_str

    def _from_str_with_none(vm):
        value = _from_str(vm)
        if isinstance(value, dict):
            return {k: Std.NONE if v is None else v for k, v in value.items()}
        return Std.NONE if value is None else value

    Std.from_str = _from_str_with_none

if __name__ == "__main__":
    sys.exit(main())
