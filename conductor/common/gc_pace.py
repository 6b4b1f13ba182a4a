# SPDX-License-Identifier: Apache-2.0
"""Python's garbage collector, paced for a long-running service with a large heap.

CPython's cyclic collector runs its youngest generation every 700 net
allocations of container objects, and a full collection, which walks every
tracked object of the process, whenever the objects that survived the young
ones since the last full one are a quarter of the rest.  A conductor keeps
its node index in memory: at 100,000 nodes a full collection took 140-230
ms, held the GIL all along (every thread of the conductor stood still), and
a cold start or an import, each of which replaces 100,000 index entries,
made six or more of them, in whichever thread allocated (often an RPC
call's).  Measured at 100,000 nodes (``benchmarks/scale_bench.py``): 1.1-1.2 s
of full collections in every cold start, at 10 agents and at 100, and as
much in the import before it; with the pace below, none in either, and the
conductor's CPU per cold start fell from 3.3 s to 2.1 s at 10 agents and
from 4.7 s to 3.2 s at 100 (medians of runs), its resident memory the
same (270-300 MB).

The pace: a young collection every :data:`THRESHOLDS` [0] allocations, and
the older generations' triggers 20 instead of 10.  Garbage that is not in
a cycle is freed by reference counting as before, whatever the pace; what
waits longer is cyclic garbage, up to 20,000 new container objects until
the next young collection.  :func:`set_pace` runs at start, as the malloc cap does
(:mod:`conductor.common.malloc_arenas`): the command lines under systemd,
and a ``python -m`` run, behave alike.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["THRESHOLDS", "set_pace"]

#: ``gc.set_threshold``'s three thresholds (CPython's defaults: 700, 10, 10).
THRESHOLDS: Final = (20_000, 20, 20)


def set_pace() -> None:
    """Set this process's collector to :data:`THRESHOLDS`."""
    gc.set_threshold(*THRESHOLDS)
