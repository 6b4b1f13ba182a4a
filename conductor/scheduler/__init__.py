# SPDX-License-Identifier: Apache-2.0
"""The conductor's scheduler: which node a build lands on.

Modules, by responsibility:

* :mod:`~conductor.scheduler.scheduler` -- :class:`Scheduler`, the entry
  point: decision, compare-and-swap allocation, index coherence;
* :mod:`~conductor.scheduler.index` -- the in-memory index of nodes;
* :mod:`~conductor.scheduler.source` -- the index's nodes, decoded from the
  database layer's lean reads (:mod:`conductor.db.node_pages`);
* :mod:`~conductor.scheduler.decide` -- choosing from the index, and
  explaining a "no valid node";
* :mod:`~conductor.scheduler.filters` and :mod:`~conductor.scheduler.weighers`
  -- the plugin interfaces and ringfleet's own filters and weighers;
* :mod:`~conductor.scheduler.plugins` -- loading them through stevedore;
* :mod:`~conductor.scheduler.request` -- what a decision is about.

The flavors' capability expressions (Nova's ComputeCapabilitiesFilter
language) and how a node matches one are in
:mod:`conductor.validation.capabilities`, beside the flavor validation that
parses them: the scheduler and the database layer both import the validated
types, and validation imports neither.

The package exports what filter and weigher plugins are written against;
:class:`~conductor.scheduler.scheduler.Scheduler` is imported from its
module (importing it here would make every user of the plugin interface
import the database layer too).
"""

from __future__ import annotations

from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import BaseWeigher, WeighingContext

__all__ = ["BaseFilter", "BaseWeigher", "RequestSpec", "WeighingContext"]
