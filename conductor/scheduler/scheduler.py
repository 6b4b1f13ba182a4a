# SPDX-License-Identifier: Apache-2.0
"""The scheduler: pick a node for a build and allocate it, coherent with the database.

Several conductors run at once, each with its own :class:`Scheduler` and
index.  Nothing here needs the indexes to agree: the allocation is the
database's compare-and-swap (:func:`conductor.db.allocations.allocate`), so
two conductors choosing the same node cannot both get it (invariant 7).  The
loser re-reads that node, corrects its index and tries its next choice.

The index is kept coherent by

* marking a node allocated the moment this conductor chooses it (before the
  compare-and-swap commits, so that the conductor's other threads do not
  choose it too; undone if the allocation fails);
* incremental refreshes reading the rows changed since shortly before the
  previous refresh (``[scheduler] index_refresh_interval`` and
  ``index_refresh_overlap``), done by the first decision that finds the
  index older than the interval;
* a full rebuild every ``index_resync_interval`` (deleted nodes, changes a
  refresh could not see), and at the first decision;
* re-reading any node whose allocation failed, since the index was wrong
  about it;
* before saying no node fits, reading the free nodes changed since the
  last refresh (only those can make a request fit).

A stale index therefore costs retries, never a wrong allocation: the
compare-and-swap checks availability, and the owner it returns is checked
against the caller's live members (a node whose owner turns out to be gone
is given back at once).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from oslo_config import cfg

from conductor.common.conf import scheduler as scheduler_conf
from conductor.common.exception import Conflict, DatabaseUnavailable, NodeNotFound, NoValidNode
from conductor.common.objects import Flavor, Node, Ownership, ProvisionState
from conductor.db import allocations, node_writes
from conductor.db import nodes as db_nodes
from conductor.db.engine import Database
from conductor.scheduler import plugins, source
from conductor.scheduler.decide import Chooser
from conductor.scheduler.fastnode import evolve
from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.index import HardwareKey, NodeIndex, is_free
from conductor.scheduler.request import (
    RequestSpec,
    flavor_key,
    parse_flavor_capabilities,
    parse_unscoped_capabilities,
    request_key,
)
from conductor.scheduler.weighers import BaseWeigher
from conductor.validation.capabilities import CapabilityExpression

__all__ = ["Scheduler"]

LOG = logging.getLogger(__name__)

#: rows applied per lock hold during a refresh (decisions wait at most this long)
_APPLY_CHUNK = 1000
#: distinct flavors whose parsed capabilities are remembered
_MAX_FLAVORS = 256
#: explanations of one request at most (another is made only when the index
#: changed between a decision finding no node and the survey finding one)
_MAX_EXPLAINED = 2
#: seconds between two passes of keep_fresh at least (index_refresh_interval may be 0)
_KEEPER_MIN_WAIT = 0.5

#: (read: "refresh" or "rebuild", rows applied, CPU seconds of the read)
ReadObserver = Callable[[str, int, float], None]


def _ignore_read(read: str, rows: int, cpu_seconds: float) -> None:
    """The default :data:`ReadObserver`: nothing measured."""


class Scheduler:
    """Chooses and allocates nodes for builds; one per conductor process.

    Thread-safe: :meth:`select_and_allocate` may be called from many threads.

    :param db: the conductors' database
    :param filters: the configurable filters, in order (default: ringfleet's
        ``CapabilitiesFilter``); the always-applied ones
        (:data:`conductor.scheduler.filters.ALWAYS_APPLIED`, Placement's half
        of Nova's scheduling among them) come first; a listed
        ``TraitsFilter`` is not applied twice
    :param weighers: default: ``FailedBuildsWeigher``, ``SpreadWeigher``
    :param refresh_interval: seconds between incremental index refreshes
    :param refresh_overlap: seconds each refresh re-reads before the
        previous one started
    :param resync_interval: seconds between full index rebuilds (0: never,
        except the first)
    :param rng: random source of the tie-breaks (tests pass a seeded one)
    :param clock: monotonic clock of the intervals (tests pass a fake one)
    :param observe_read: called after each read of the index with the kind of
        read (``refresh`` or ``rebuild``), the rows it applied and the CPU time
        it took (the conductor's metrics: what the index costs, apart from the
        calls it serves)
    """

    def __init__(
        self,
        db: Database,
        *,
        filters: Sequence[BaseFilter] | None = None,
        weighers: Sequence[BaseWeigher] | None = None,
        refresh_interval: float = 1.0,
        refresh_overlap: float = 2.0,
        resync_interval: float = 600.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        observe_read: ReadObserver | None = None,
    ) -> None:
        self._db = db
        self._observe_read = observe_read or _ignore_read
        if filters is None:
            filters = plugins.load_filters(scheduler_conf.DEFAULT_FILTERS)
        if weighers is None:
            weighers = plugins.load_weighers(scheduler_conf.DEFAULT_WEIGHERS)
        self._chooser = Chooser(filters, weighers, rng)
        LOG.info(
            "Scheduler: always applied (Placement's half of Nova's scheduling: the "
            "flavor's resources:CUSTOM_<X>=1 or resource class, normalized as Nova "
            "does; nodes Placement would offer; the flavor's required and forbidden "
            "traits), then %s; filters: %s; weighers: %s",
            ", ".join(f.name for f in self._chooser.always[4:]) + " and the group hint",
            ", ".join(f.name for f in self._chooser.filters) or "none",
            ", ".join(w.name for w in self._chooser.weighers) or "none (random)",
        )
        # Hints (and the project and image) split the verdict caches only when a
        # cached verdict may depend on them.
        self._hints_in_key = any((f.per_profile or f.per_owner) and f.reads_hints for f in filters)
        self._refresh_interval = refresh_interval
        self._overlap = datetime.timedelta(seconds=refresh_overlap)
        self._resync_interval = resync_interval
        self._clock = clock
        self._lock = threading.Lock()  # the index and the chooser's caches
        self._refresh_lock = threading.Lock()  # one database read of the index at a time
        self._index = NodeIndex()
        self._built = False
        self._since = datetime.datetime.min
        # The rows a refresh applied that the next may read again (the overlap).
        self._applied = source.AppliedVersions()
        self._refreshed_at = self._resynced_at = 0.0
        self._capabilities: dict[
            Hashable,
            tuple[Mapping[str, CapabilityExpression], Mapping[str, CapabilityExpression]],
        ] = {}
        self.lost_races = 0
        """allocations lost to another conductor (or a stale index) so far"""

    @classmethod
    def from_conf(
        cls, db: Database, conf: cfg.ConfigOpts, *, observe_read: ReadObserver | None = None
    ) -> Scheduler:
        """A scheduler configured by the ``[scheduler]`` options (plugins loaded).

        :raises ConfigurationError: about an unknown or broken filter or weigher,
            or a nova.conf ``[filter_scheduler]`` option that is not read
        """
        plugins.check_nova_options(conf)
        group = conf.scheduler
        return cls(
            db,
            filters=plugins.load_filters(group.enabled_filters, per_node=group.per_node_filters),
            weighers=plugins.load_weighers(group.weighers, group.weigher_multipliers),
            refresh_interval=group.index_refresh_interval,
            refresh_overlap=group.index_refresh_overlap,
            resync_interval=group.index_resync_interval,
            observe_read=observe_read,
        )

    @property
    def filters(self) -> tuple[BaseFilter, ...]:
        """The whole chain: always-applied filters, then the configured ones."""
        return self._chooser.chain

    @property
    def weighers(self) -> tuple[BaseWeigher, ...]:
        return self._chooser.weighers

    # -- the decision -------------------------------------------------------------------

    def select_and_allocate(
        self,
        flavor: Flavor,
        instance_uuid: str,
        *,
        live_members: Collection[str],
        group: str | None = None,
        exclude_nodes: Iterable[str] = (),
        scheduler_hints: Mapping[str, Any] | None = None,
        project_id: str | None = None,
        image: Mapping[str, Any] | None = None,
        host_ips: Mapping[str, str] | None = None,
    ) -> tuple[Node, Ownership]:
        """Choose a node for the instance and allocate it (committed) by compare-and-swap.

        :param flavor: what the build asks for
        :param instance_uuid: a stored instance, ``building`` without a node
        :param live_members: the agents in the membership group right now
        :param group: the build's group hint (``None``: any group)
        :param exclude_nodes: nodes not to use (a reschedule's failed attempts)
        :param scheduler_hints: the build's hints (validated: name -> JSON
            primitive), for filters that read them (Nova's JsonFilter)
        :param project_id: the instance's project, for Nova filters
        :param image: the build's own image, for Nova filters
        :param host_ips: live agent -> its IP address, for Nova filters
            (``host_state.host_ip``)
        :returns: the node as allocated (hosting the instance, ``deploying``,
            with the owner and epoch of the returned ownership; without
            timestamps, with read-only mappings) and the ownership to route
            the build with
        :raises NoValidNode: no node passes the filters; says how many each removed
        :raises Conflict: about ``instance_uuid`` when the instance is no
            longer waiting for a node (deleted, or placed by another request)
        """
        request = self._request(
            flavor,
            instance_uuid,
            live_members,
            group,
            exclude_nodes,
            scheduler_hints=scheduler_hints,
            project_id=project_id,
            image=image,
            host_ips=host_ips,
        )
        self._ensure_fresh()
        refreshed = False
        explained = 0
        while True:
            chosen = self._choose(request)
            if chosen is None and not refreshed:
                # A node enrolled, claimed or freed since the last refresh (up
                # to index_refresh_interval ago) is not in the index yet: read
                # the free ones once before saying there is none.
                refreshed = True
                self._read_freed()
                continue
            if chosen is None:
                error = self._explain(request)
                explained += 1
                if _fitting(error) and explained < _MAX_EXPLAINED:
                    continue  # a node was freed between the decision and the survey
                LOG.info("Instance %s: %s", instance_uuid, error)
                raise error
            ownership = self._allocate_to_live_owner(chosen, request)
            if ownership is not None:
                return self._placed(chosen, ownership, request), ownership

    def _choose(self, request: RequestSpec) -> Node | None:
        """The best node for *request*, held in the index at once; ``None`` if none fits."""
        with self._lock:
            index = self._index
            node = self._chooser.choose(index, request)
            if node is not None:
                # Taken now, so this conductor's other threads skip it.
                index.put(_holding(node, request.instance_uuid), local=True)
            return node

    def _read_freed(self) -> int:
        """Put in the index the free nodes changed since the last refresh; how many.

        Only free nodes can turn "no node fits" into a fit, and they are few
        even right after a burst of placements (which changed many rows,
        none of them free), so a failing request costs about what a
        placement does.  The refresh's position is left alone: its next
        read reads every change, these included.
        """
        with self._refresh_lock:
            with self._lock:
                generation = self._index.generation
            rows = list(source.load_changed(self._db, self._since, free_only=True))
            self._apply(rows, generation)
        LOG.debug("Node index: %d free nodes changed since the last refresh", len(rows))
        return len(rows)

    def _explain(self, request: RequestSpec) -> NoValidNode:
        """Why no node fits *request*: the index surveyed under the lock, the
        filters called without it (other decisions go on meanwhile)."""
        with self._lock:
            surveyed = self._chooser.survey(self._index, request)
        return self._chooser.account(surveyed, request)

    def _allocate_to_live_owner(self, node: Node, request: RequestSpec) -> Ownership | None:
        """Allocate the chosen *node* to the request's instance: its ownership,
        or ``None`` (the race lost, or an owner not live: choose again)."""
        ownership = self._allocate(node, request.instance_uuid)
        if ownership is None:
            ownership = self._after_lost_race(node, request)
            if ownership is None:
                return None
        if ownership.owner not in request.live_members:
            self._give_back(node, ownership, request)
            return None
        return ownership

    def _placed(self, node: Node, ownership: Ownership, request: RequestSpec) -> Node:
        """The index holds *node* as allocated to the request's instance: the node as placed."""
        placed = _holding(node, request.instance_uuid, ownership)
        with self._lock:
            self._index.put(placed, local=True)
        LOG.debug(
            "Instance %s allocated node %s (owner %s, epoch %d)",
            request.instance_uuid,
            node.uuid,
            ownership.owner,
            ownership.epoch,
        )
        return placed

    def _request(
        self,
        flavor: Flavor,
        instance_uuid: str,
        live_members: Collection[str],
        group: str | None,
        exclude_nodes: Iterable[str],
        *,
        scheduler_hints: Mapping[str, Any] | None,
        project_id: str | None = None,
        image: Mapping[str, Any] | None = None,
        host_ips: Mapping[str, str] | None = None,
    ) -> RequestSpec:
        key = flavor_key(flavor)
        parsed = self._capabilities.get(key)
        if parsed is None:
            parsed = (parse_flavor_capabilities(flavor), parse_unscoped_capabilities(flavor))
            if len(self._capabilities) >= _MAX_FLAVORS:
                self._capabilities.clear()
            self._capabilities[key] = parsed
        capabilities, unscoped = parsed
        hints: Mapping[str, Any] = MappingProxyType(dict(scheduler_hints or {}))
        frozen_image = None if image is None else MappingProxyType(dict(image))
        return RequestSpec(
            flavor=flavor,
            instance_uuid=instance_uuid,
            live_members=frozenset(live_members),
            group=group,
            exclude_nodes=frozenset(exclude_nodes),
            capabilities=capabilities,
            unscoped_capabilities=unscoped,
            flavor_key=(
                request_key(key, hints, project_id, frozen_image) if self._hints_in_key else key
            ),
            scheduler_hints=hints,
            project_id=project_id,
            image=frozen_image,
            host_ips=MappingProxyType(dict(host_ips or {})),
        )

    def _allocate(self, node: Node, instance_uuid: str) -> Ownership | None:
        try:
            return allocations.allocate(self._db, node.uuid, instance_uuid)
        except BaseException:
            # Unknown outcome: put back what was believed; a refresh corrects it.
            with self._lock:
                current = self._index.get(node.uuid)
                if current is not None and current.instance_uuid == instance_uuid:
                    self._index.put(node, local=True)
            raise

    def _after_lost_race(self, node: Node, request: RequestSpec) -> Ownership | None:
        """The compare-and-swap failed: learn why from the database.

        Usually another conductor took the node (or the index was stale):
        the node's row says so, the index takes it, and the caller tries its
        next choice.  If the row still looks allocatable, either the
        instance is no longer waiting for a node or the node was freed again
        in between: one more attempt on the same node tells which.
        """
        with self._lock:
            self.lost_races += 1
        truth = self._read(node.uuid)
        if _allocatable(truth):
            ownership = self._allocate(node, request.instance_uuid)
            if ownership is not None:
                return ownership
            truth = self._read(node.uuid)
            if _allocatable(truth):
                self._learn(node.uuid, truth)
                raise Conflict(
                    field="instance_uuid",
                    value=request.instance_uuid,
                    reason="the instance is not waiting for a node "
                    "(deleted, or placed by another request)",
                )
        LOG.debug(
            "Instance %s lost node %s (now %s, instance %s): trying the next choice",
            request.instance_uuid,
            node.uuid,
            truth.provision_state.value if truth else "deleted",
            truth.instance_uuid if truth else None,
        )
        self._learn(node.uuid, truth)
        return None

    def _give_back(self, node: Node, ownership: Ownership, request: RequestSpec) -> None:
        """Undo an allocation whose owner is not a live member (the index was stale)."""
        LOG.warning(
            "Node %s allocated to instance %s is owned by %s, which is not a live member: "
            "freeing it and choosing again",
            node.uuid,
            request.instance_uuid,
            ownership.owner,
        )
        # The conductor's own undo of its allocation, not an agent's report: no fence.
        allocations.give_back(self._db, node.uuid, request.instance_uuid)
        self._learn(node.uuid, self._read(node.uuid))

    def _read(self, uuid: str) -> Node | None:
        try:
            return db_nodes.get_node(self._db, uuid)
        except NodeNotFound:
            return None

    def _learn(self, uuid: str, truth: Node | None) -> None:
        with self._lock:
            if truth is None:
                self._index.remove(uuid, local=True)
            else:
                self._index.put(truth, local=True)

    # -- keeping the index coherent -------------------------------------------------------

    def update_node(self, node: Node) -> None:
        """Tell the index about a change this conductor just made (e.g. a freed node).

        Optional: the next refresh would read it anyway.
        """
        self._learn(node.uuid, node)

    def _ensure_fresh(self) -> None:
        if not self._built:
            with self._refresh_lock:
                if not self._built:
                    self._resync_locked()
            return
        now = self._clock()
        if now - self._refreshed_at < self._refresh_interval:
            return
        if not self._refresh_lock.acquire(blocking=False):
            return  # another thread is refreshing: decide with what is known
        try:
            if self._resync_interval and now - self._resynced_at >= self._resync_interval:
                self._resync_locked()
            else:
                self._refresh_locked()
        finally:
            self._refresh_lock.release()

    def keep_fresh(self, stopped: threading.Event) -> None:
        """Build the index, then refresh it every interval, until *stopped* is set.

        A thread's target.  Without it the first decision after a start read
        the whole fleet (6 s at 100k nodes on a busy machine), and so did the
        first one after an import or a cold start that changed every row, and
        one decision every ``index_resync_interval``: each time a build
        waited, and the conductor's CPU went to it in the middle of the
        builds.  Decisions still refresh a stale index themselves, should
        this thread lag.
        """
        failing = False
        while True:
            try:
                self._ensure_fresh()
            except DatabaseUnavailable:  # logged once by the database
                LOG.debug("Node index not refreshed: database unreachable")
            except Exception:  # the next pass tries again
                LOG.log(
                    logging.DEBUG if failing else logging.WARNING,
                    "Node index refresh failed",
                    exc_info=True,
                )
                failing = True
            else:
                failing = False
            if stopped.wait(max(self._refresh_interval, _KEEPER_MIN_WAIT)):
                return

    def refresh(self) -> int:
        """Apply the nodes changed since the previous refresh; how many rows were read.

        Builds the index first if it was never built.
        """
        with self._refresh_lock:
            if not self._built:
                return self._resync_locked()
            return self._refresh_locked()

    def resync(self) -> int:
        """Rebuild the index from every node in the database; how many nodes."""
        with self._refresh_lock:
            return self._resync_locked()

    def _refresh_locked(self) -> int:
        started, cpu = self._clock(), time.thread_time()
        with self._lock:
            generation = self._index.generation
        position, count = source.RefreshPosition(self._since, self._overlap), 0
        for changed in source.changed_pages(self._db, self._since, applied=self._applied):
            self._apply(changed.nodes, generation)
            self._applied.applied(changed.versions)
            position.read(changed)
            count += len(changed.nodes)
            # Counted page by page: a refresh through a burst of claims runs
            # for seconds, and whoever reads the counters meanwhile (a
            # benchmark's step) sees the pages done, not nothing until the end.
            cpu = self._observed(len(changed.nodes), cpu)
        with self._lock:
            self._index.forget_local_changes(generation)
        self._since = position.next
        self._applied.keep_from(self._since)
        self._refreshed_at = started
        self._observed(0, cpu)
        LOG.debug("Node index refreshed: %d changed rows", count)
        return count

    def _observed(self, rows: int, cpu: float) -> float:
        """Count ``rows`` of a refresh and its CPU since ``cpu`` (the thread's
        time then); the thread's time now."""
        now = time.thread_time()
        self._observe_read("refresh", rows, now - cpu)
        return now

    def _apply(self, rows: Sequence[tuple[Node, HardwareKey]], generation: int) -> None:
        """Put rows read since the index's *generation* in it, a chunk per lock hold."""
        for start in range(0, len(rows), _APPLY_CHUNK):
            with self._lock:
                index = self._index
                for node, hardware in rows[start : start + _APPLY_CHUNK]:
                    # A local change made after the read began is newer than the row.
                    if not index.changed_locally_after(node.uuid, generation):
                        index.put(node, hardware)

    def _resync_locked(self) -> int:
        cpu = time.thread_time()
        started, started_at = self._clock(), node_writes.read_start(self._db)
        with self._lock:
            generation = self._index.generation
        fresh = NodeIndex()
        with _collector_paused():
            for node, hardware in source.load_all(self._db):
                fresh.put(node, hardware)
        with self._lock:
            fresh.adopt_local_changes(self._index, after=generation)
            self._index = fresh
            stats = fresh.stats()
        self._since = started_at - self._overlap
        self._applied = source.AppliedVersions()
        self._refreshed_at = self._resynced_at = started
        self._built = True
        self._observe_read("rebuild", stats["nodes"], time.thread_time() - cpu)
        LOG.info(
            "Node index rebuilt: %d nodes, %d free, in %.3f s",
            stats["nodes"],
            stats["free"],
            self._clock() - started,
        )
        return stats["nodes"]

    def stats(self) -> dict[str, Any]:
        """Sizes of the index, and allocation races lost so far."""
        with self._lock:
            stats: dict[str, Any] = dict(self._index.stats())
        stats["lost_races"] = self.lost_races
        return stats


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (an index build creates no cycles).

    A build creates two long-lived objects per node; the full collections
    that this growth triggers would otherwise cost ~40 % of the build time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _holding(node: Node, instance_uuid: str, ownership: Ownership | None = None) -> Node:
    """*node* as it is once it hosts *instance_uuid* (with *ownership*'s claim)."""
    if ownership is None:
        return evolve(node, instance_uuid=instance_uuid, provision_state=ProvisionState.DEPLOYING)
    return evolve(
        node,
        instance_uuid=instance_uuid,
        provision_state=ProvisionState.DEPLOYING,
        owner=ownership.owner,
        owner_epoch=ownership.epoch,
    )


def _fitting(error: NoValidNode) -> bool:
    """Whether *error* counted nodes that no filter removed (the index changed meanwhile)."""
    return error.candidates > sum(count for _, count in error.removed)


def _allocatable(node: Node | None) -> bool:
    """Whether the node half of the compare-and-swap would pass on *node*."""
    return node is not None and is_free(node) and node.owner is not None
