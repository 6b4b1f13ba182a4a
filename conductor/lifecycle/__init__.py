# SPDX-License-Identifier: Apache-2.0
"""One build's life, from the stored request to ``active``, ``error`` or ``deleted``.

The story, in the order it happens (each step's module in brackets):

1. ``build_instances`` stores the request as instances ``building``/
   ``scheduling`` and queues their ids (:mod:`conductor.endpoints.instances`,
   :mod:`.queue`).
2. A worker schedules and allocates a node — one compare-and-swap that also
   makes the build ``spawning`` — and hands it to the router (:mod:`.workers`).
3. The router calls the node's owner at its epoch; ``NotOwner`` re-reads and
   routes again, an unreachable owner puts the build back on the queue, a
   refusal for good fails the attempt (:mod:`.routing`).
4. The owner deploys and reports; the report, fenced by the owner's epoch,
   makes the instance ``active`` or fails the attempt: rescheduled on
   another node, or ``error`` after ``max_attempts`` (:mod:`.results`).
5. A delete makes it ``deleting``; the owner tears the node down and
   reports: ``deleted``, or ``error`` with the reason (:mod:`.workers`,
   :mod:`.routing`, :mod:`.results`).
6. The sweeper is the last resort for work without progress for
   ``build_timeout`` (:mod:`.sweeper`).

Every state change is an event of the instance state machine
(:mod:`conductor.common.instance_states`).  :class:`BuildLifecycle` wires
these pieces together, once.
"""

from conductor.lifecycle.wiring import BuildLifecycle

__all__ = ["BuildLifecycle"]
