# SPDX-License-Identifier: Apache-2.0
"""Scheduler weighers: which of the nodes that passed every filter is best.

As in Nova, every weigher's raw weights are normalized to [0, 1] across the
nodes being compared, multiplied by the weigher's multiplier, and summed; the
highest total wins and ties are broken at random (which also keeps two
conductors with the same view from racing for the same node).

Writing a weigher (operators' plugins)
--------------------------------------
Subclass :class:`BaseWeigher`, implement :meth:`BaseWeigher.weigh` (higher is
better), and register the class in the ``ringfleet.scheduler.weighers``
entry-point namespace, e.g.::

    [project.entry-points."ringfleet.scheduler.weighers"]
    NewestFirstWeigher = "mysite.weighers:NewestFirstWeigher"

then add it to ``[scheduler] weighers`` (and optionally to
``weigher_multipliers``).  It is instantiated once without arguments, called
from several threads, and must not block or do I/O.

A weigher whose weight depends only on ``node.owner``, the request and the
context should set ``per_owner = True``: the scheduler then weighs one node
per agent instead of every candidate node.  As long as every configured
weigher is ``per_owner``, a decision costs the same at 1,000 or 100,000
nodes.

A weigher whose weight depends on nothing of the node (only the request and
the context) gives every candidate of a decision the same weight, which
normalization turns into 0 for each: it may set ``per_request = True``, and
the scheduler then leaves it out of the totals without calling it (Nova's
in-tree weighers on bare-metal nodes, :mod:`conductor.scheduler.nova`).

A weigher whose weight depends on the node only through its owner and its
``failed_builds`` (the builds that failed on it since its last success)
sets ``per_owner = True`` and ``reads_failed_builds = True``: the scheduler
then weighs one node per agent and count of failed builds, which keeps a
decision's cost independent of the fleet's size while nodes that failed
builds are few (:class:`FailedBuildsWeigher`, Nova's ``BuildFailureWeigher``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

from conductor.common.objects import Node
from conductor.scheduler.request import RequestSpec

__all__ = [
    "BaseWeigher",
    "FailedBuildsWeigher",
    "SpreadWeigher",
    "WeighingContext",
    "normalize",
    "total_weights",
]


@dataclasses.dataclass(frozen=True, slots=True)
class WeighingContext:
    """What the scheduler knows beyond the node and the request.

    :ivar allocations: agent -> how many nodes it owns that host an
        instance (or are being given one by this conductor), as this
        conductor's index knows them; agents with none are absent
    """

    allocations: Mapping[str, int]


class BaseWeigher:
    """Base class of every scheduler weigher.

    :cvar name: how the configuration names the weigher; the class name
        unless a subclass sets it
    :cvar per_owner: see the module documentation
    :cvar per_request: see the module documentation (implies ``per_owner``)
    :cvar reads_failed_builds: see the module documentation (with ``per_owner``)
    :ivar multiplier: factor of the normalized weight (``[scheduler]
        weigher_multipliers`` overrides the class default)
    """

    name: ClassVar[str] = "BaseWeigher"
    per_owner: ClassVar[bool] = False
    per_request: ClassVar[bool] = False
    reads_failed_builds: ClassVar[bool] = False
    default_multiplier: ClassVar[float] = 1.0

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def __init__(self) -> None:
        self.multiplier: float = self.default_multiplier

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        """The raw weight of *node* for *request*: higher is better."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} x{self.multiplier}>"


class SpreadWeigher(BaseWeigher):
    """Prefer the agent hosting the fewest instances: spreads builds across agents.

    The weight is minus the agent's count of nodes with an instance, so an
    idle agent wins over a busy one and, with the random tie-break, a run
    of builds fills every agent in turn.
    """

    per_owner = True

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        if node.owner is None:
            return 0.0
        return -float(context.allocations.get(node.owner, 0))


class FailedBuildsWeigher(BaseWeigher):
    """Prefer nodes with fewer failed builds: avoids nodes whose deploys keep failing.

    The weight is minus the node's ``failed_builds``: the builds that failed
    on it since the last one that succeeded there, counted as Nova's compute
    counts them for Nova's ``BuildFailureWeigher``, which orders nodes the
    same way.  Its default multiplier is Nova's
    (``build_failure_weight_multiplier``, 1000000.0): it outweighs every
    other weigher of a usual configuration, so a node that failed a build
    is chosen only when no node with fewer failures is left.
    """

    per_owner = True
    reads_failed_builds = True
    default_multiplier = 1000000.0

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        return -float(node.failed_builds)


def normalize(weights: Sequence[float]) -> list[float]:
    """Scale *weights* to [0, 1] (min -> 0, max -> 1; all equal -> all 0)."""
    if not weights:
        return []
    low, high = min(weights), max(weights)
    if high == low:
        return [0.0] * len(weights)
    span = high - low
    return [(w - low) / span for w in weights]


def total_weights(
    weighers: Sequence[BaseWeigher],
    nodes: Sequence[Node],
    request: RequestSpec,
    context: WeighingContext,
) -> list[float]:
    """Each node's sum over *weighers* of multiplier x normalized weight.

    A ``per_request`` weigher is not called: it weighs every node alike,
    which :func:`normalize` maps to 0 for each.
    """
    totals = [0.0] * len(nodes)
    for weigher in weighers:
        if weigher.per_request:
            continue
        raw = [weigher.weigh(node, request, context) for node in nodes]
        multiplier = weigher.multiplier
        for i, value in enumerate(normalize(raw)):
            totals[i] += multiplier * value
    return totals
