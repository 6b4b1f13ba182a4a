# SPDX-License-Identifier: Apache-2.0
"""The build queue: what the build workers do next, by instance id.

A request is stored before it reaches the queue (see
:mod:`conductor.endpoints.instances`), so the queue holds only ids (and,
for a request just stored, the copy the endpoint has): a conductor killed
mid-build loses nothing, the next one re-queues every instance still in
flight from the record.  Everything that puts work back — the workers
themselves, the agents' results, the router, the sweeper — puts it here.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Literal

from conductor.common.objects import Flavor, Instance

__all__ = ["Action", "BuildQueue", "Item", "Stored"]

LOG = logging.getLogger(__name__)

#: What a worker does with an instance: schedule and allocate it ("build"),
#: route it to its node's owner ("route"), allocate or route whichever it
#: needs after a database outage ("resume"), tear it down ("delete"), route
#: its power or lifecycle action in flight to its node's owner ("act").
Action = Literal["build", "route", "resume", "delete", "act"]

#: An instance as build_instances just stored it, and its flavor.
Stored = tuple[Instance, Flavor]

#: (action, instance uuid, what build_instances just stored, if known)
Item = tuple[Action, str, Stored | None]


class BuildQueue:
    """A FIFO of work on instances, and timers that queue work again later."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Item | None] = queue.Queue()

    def submit(self, instance_uuids: Sequence[str]) -> None:
        """Schedule these stored builds (read again by the worker)."""
        for uuid in instance_uuids:
            self._queue.put(("build", uuid, None))

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        """Queue instances just stored, as stored: the worker need not read them again.

        Safe however stale the copy gets in the queue: the allocation is a
        compare-and-swap on the instance still building without a node.
        """
        for instance in stored:
            self._queue.put(("build", instance.uuid, (instance, flavor)))

    def reroute(self, instance_uuid: str) -> None:
        """Route an allocated build again, to whoever owns its node now."""
        self._queue.put(("route", instance_uuid, None))

    def delete(self, instance_uuid: str) -> None:
        """Tear the instance down (it is ``deleting`` in the record)."""
        self._queue.put(("delete", instance_uuid, None))

    def act(self, instance_uuid: str) -> None:
        """Route the instance's action in flight (its task state) to its node's owner."""
        self._queue.put(("act", instance_uuid, None))

    def retry_later(self, instance_uuid: str, action: Action, delay: float = 2.0) -> None:
        """Queue *action* for the instance in *delay* seconds."""
        timer = threading.Timer(delay, lambda: self._queue.put((action, instance_uuid, None)))
        timer.daemon = True
        timer.start()

    def get(self) -> Item | None:
        """The next item, waiting for one; ``None`` tells a worker to stop."""
        return self._queue.get()

    def stop_workers(self, count: int) -> None:
        """Tell *count* workers to stop once they reach this point of the queue."""
        for _ in range(count):
            self._queue.put(None)
