"""The conductor's scheduler: which node a build lands on.

Modules, by responsibility:

* :mod:`~conductor.scheduler.scheduler` -- :class:`Scheduler`, the entry
  point: decision, compare-and-swap allocation, index coherence;
* :mod:`~conductor.scheduler.index` -- the in-memory index of nodes;
* :mod:`~conductor.scheduler.source` -- the lean database reads that fill it;
* :mod:`~conductor.scheduler.decide` -- choosing from the index, and
  explaining a "no valid node";
* :mod:`~conductor.scheduler.filters` and :mod:`~conductor.scheduler.weighers`
  -- the plugin interfaces and ringfleet's own filters and weighers;
* :mod:`~conductor.scheduler.plugins` -- loading them through stevedore;
* :mod:`~conductor.scheduler.request` -- what a decision is about.
"""

from __future__ import annotations

from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.scheduler import Scheduler
from conductor.scheduler.weighers import BaseWeigher, WeighingContext

__all__ = ["BaseFilter", "BaseWeigher", "RequestSpec", "Scheduler", "WeighingContext"]
