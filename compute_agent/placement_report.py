# SPDX-License-Identifier: Apache-2.0
"""The agent's report of the nodes it owns to OpenStack Placement (``[placement]``).

Only the owner of a node writes its provider, and it writes what ringfleet's
records say (:mod:`conductor.common.placement.provider`), never what it
remembers.  Every pass (each ``reconcile_interval``, and at once after a
change of the nodes owned) reads the owned nodes whose record changed —
the conductor's change feed of an agent's nodes (API 1.15); all of them at
the first pass, after a resync, or from an older conductor — and writes the
providers whose record changed since this agent last made them agree.  A
node this agent did not have at the previous pass (a takeover, a start) is
first read back from Placement: another agent wrote it last, or nobody
did.  Nothing is written while the membership does not allow acting (a
peer may own the nodes by then), and every provider is read back after.
Every ``[placement] resync_interval`` the memory is dropped and every owned
provider compared again (drift repair).

New allocations of a pass go to Placement in one request (``POST
/allocations``); providers, inventories and traits, which Placement writes
one provider per request, go ``[placement] concurrency`` at a time.

Placement down: one WARNING (the client's), the pass ends, the next one
tries again.  A refusal a retry cannot fix (a trait Placement does not know
is left out and said once; a name another provider has) is logged once per
node and record, and not tried again until the record changes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

import oslo_messaging as messaging
from oslo_config import cfg

from compute_agent.metrics import AgentMetrics
from conductor.common import rpc
from conductor.common.exception import (
    NodeNotFound,
    NotFound,
    RingfleetError,
    ServiceUnavailable,
    first_line,
)
from conductor.common.placement import provider
from conductor.common.placement.client import PlacementClient, PlacementConflict, PlacementRefused
from conductor.common.placement.provider import Wanted
from conductor.common.repeated_failure import RepeatedFailure
from conductor.rpcapi import ConductorAPI, pages

__all__ = ["PassResult", "PlacementReporter"]

LOG = logging.getLogger(__name__)

#: Consumers per ``POST /allocations``: one request per pass in the usual
#: case, bounded so that a takeover of many pinned nodes sends no huge body.
_ALLOCATION_BATCH: Final = 500
#: Nodes per page of the owned-node read.
_PAGE: Final = 1000
#: A change read reaches this far behind the previous one: a node row is
#: stamped before its transaction commits (the ownership manager's deepest
#: overlap, for the same reason).  Nodes re-read are compared, not rewritten.
_CHANGE_OVERLAP: Final = datetime.timedelta(seconds=5)


@dataclasses.dataclass(slots=True)
class PassResult:
    """What one pass did."""

    owned: int = 0
    checked: int = 0  # providers compared (changed records, gained nodes)
    mended: int = 0  # providers written (the others agreed already)
    allocations: int = 0  # allocations written
    deleted: int = 0  # providers of deleted nodes removed
    refused: int = 0
    seconds: float = 0.0
    complete: bool = True


class PlacementReporter:
    """One agent's Placement reporter: a thread of passes (module docstring)."""

    def __init__(
        self,
        host: str,
        conf: cfg.ConfigOpts,
        client: PlacementClient,
        conductor: ConductorAPI,
        *,
        interval: Callable[[], float],
        can_act: Callable[[], bool],
        held: Callable[[], Collection[str]],
        holds: Callable[[str], bool],
        metrics: AgentMetrics | None = None,
    ) -> None:
        """``held``: the nodes the agent's ownership holds now (its claims);
        ``holds(node)``: whether it holds that one (asked before each write)."""
        self.host = host
        self._conf = conf
        self._client = client
        self._conductor = conductor
        self._interval = interval
        self._can_act = can_act
        self._held = held
        self._holds = holds
        self._metrics = metrics
        #: The conductor's time of the last owned-node read of a pass that
        #: completed (None: read them all next time).
        self._as_of: datetime.datetime | None = None
        self._next_as_of: datetime.datetime | None = None
        #: Owned nodes last seen in maintenance hosting nothing: the only
        #: ones an operator can delete (then their provider goes too).
        self._deletable: set[str] = set()
        #: Nodes found deleted (bounded by the deletes an agent sees).
        self._gone: set[str] = set()
        self._by_uuids = True  # False: the conductor reads no nodes by uuid
        #: node uuid -> what this agent last made Placement show for it.
        self._written: dict[str, Wanted] = {}
        #: node uuid -> (the record, why Placement refused it): not retried
        #: until the record changes.
        self._refused: dict[str, tuple[Wanted, str]] = {}
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_full = time.monotonic()
        self._resync = False  # asked for a comparison of every provider
        self._failures = RepeatedFailure(
            LOG,
            "Agent %s: Placement pass failed: %s; the next pass tries again",
            "Agent %s: Placement pass failed again: %s",
            "Agent %s: Placement passes complete again",
            host,
        )
        self.last: PassResult | None = None

    @property
    def aggregate(self) -> str:
        return str(self._conf.placement.aggregate)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name=f"placement-{self.host}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def resync_soon(self) -> None:
        """Compare every owned provider at the next pass, now (drift repair)."""
        self._resync = True
        self._wake.set()

    def wake(self) -> None:
        """The owned nodes changed: a pass now, not at the next interval."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self._interval())
            self._wake.clear()
            if self._stopped.is_set():
                return
            if not self._can_act():
                # Our nodes may be a peer's by now (the membership was
                # suspended or lost): write nothing, and read every
                # provider back once we may act again.
                self._written.clear()
                self._as_of = None
                continue
            resync = float(self._conf.placement.resync_interval)
            full = self._resync or (resync > 0 and time.monotonic() - self._last_full >= resync)
            self._resync = False
            try:
                self.run_pass(full=full)
            except Exception as exc:  # the next pass tries again
                self._failed(exc)
            else:
                self._failed(None)
            if self._metrics is not None and self.last is not None:
                last = self.last
                self._metrics.placement_pass(
                    complete=last.complete,
                    providers=last.mended,
                    allocations=last.allocations,
                    deleted=last.deleted,
                    refused=last.refused,
                )

    def _failed(self, exc: Exception | None) -> None:
        """One line per new reason passes fail, one INFO when one completes again.

        Placement's own outage is said by its client (one WARNING), so it is
        at debug level here; an unexpected error comes with its traceback.
        """
        if exc is None:
            self._failures.worked()
        elif isinstance(exc, ServiceUnavailable):
            self._failures.failed(first_line(exc), logging.DEBUG)
        elif isinstance(exc, (RingfleetError, messaging.MessagingException)):
            self._failures.failed(first_line(exc))
        else:
            self._failures.failed(first_line(exc), logging.ERROR, exc_info=exc)

    # -- one pass ---------------------------------------------------------------------

    def run_pass(self, *, full: bool = False) -> PassResult:
        """Make Placement show every owned node as its record says.

        ``full``: forget what was written and compare every provider (drift
        repair).

        :raises ServiceUnavailable: Placement or the conductors did not answer
        """
        started = time.monotonic()
        # What this pass did so far, also when it ends early (Placement down).
        result = self.last = PassResult(complete=False)
        if full:
            self._written.clear()
            self._refused.clear()
            self._as_of = None
            self._last_full = started
        nodes, owned = self._read_owned()
        for node in nodes:
            if node.get("maintenance") and node.get("instance_uuid") is None:
                self._deletable.add(node["uuid"])
            else:
                self._deletable.discard(node["uuid"])
        deleted = self._deleted_since(owned, {node["uuid"] for node in nodes})
        owned -= deleted
        result.owned = len(owned)
        self._forget_departed(owned, deleted, result)
        wanted = [self._wanted(node) for node in nodes]
        todo = [
            w
            for w in wanted
            if self._written.get(w.uuid) != w
            and (w.uuid not in self._refused or self._refused[w.uuid][0] != w)
        ]
        result.checked = len(todo)
        entries = self._mend_all(todo, result)
        self._write_allocations(entries, result)
        # Complete: the next pass reads the changes from here on.
        self._as_of = self._next_as_of
        result.complete = True
        result.seconds = time.monotonic() - started
        if result.mended or result.deleted or result.refused:
            LOG.info(
                "Agent %s: Placement: %d of %d owned nodes' providers written "
                "(%d allocations, %d deleted, %d refused) in %.1f s%s",
                self.host,
                result.mended,
                result.owned,
                result.allocations,
                result.deleted,
                result.refused,
                result.seconds,
                " (full comparison)" if full else "",
            )
        return result

    def _read_owned(self) -> tuple[list[dict[str, Any]], set[str]]:
        """The records to compare (the owned nodes changed since the last
        read, or all of them) and the uuids of every node owned now."""
        changed = self._changed_since_last_read()
        if changed is None:
            return self._read_all_owned()
        # (The ownership holds a deleted node until it re-validates: nothing
        # tells it; such nodes are left out once found gone.)
        held = set(self._held())
        self._gone &= held  # re-validated away: nothing to remember
        held -= self._gone
        # Held but neither written nor refused: a claim the feed missed.
        wanted = changed | (held - self._written.keys() - self._refused.keys())
        records = self._records(wanted)
        if records is None:  # an older conductor: no reads by uuid
            return self._read_all_owned()
        found = {r["uuid"] for r in records}
        # (A uuid found again was imported again.)
        self._gone = (self._gone - found) | (wanted - found)
        mine = [r for r in records if r.get("owner") == self.host]
        owned = (held - changed - self._gone) | {r["uuid"] for r in mine}
        return mine, owned

    def _records(self, uuids: Collection[str]) -> list[dict[str, Any]] | None:
        """The records of those of ``uuids`` that exist, 1,000 a call; None
        when the conductor cannot read nodes by uuid (older than API 1.17)."""
        ordered = sorted(uuids)
        if not self._by_uuids or not self._conductor.can_send_version("1.17"):
            return None
        records: list[dict[str, Any]] = []
        for start in range(0, len(ordered), _PAGE):
            chunk = ordered[start : start + _PAGE]
            try:
                records += self._conductor.list_nodes(filters={"uuids": chunk}, limit=len(chunk))
            except messaging.RemoteError as exc:
                if exc.exc_type not in rpc.NOT_SERVED:
                    raise
                self._by_uuids = False  # an older conductor: full listings from now on
                return None
        return records

    def _missing(self, uuids: Collection[str]) -> set[str]:
        """Of ``uuids``, the nodes that no longer exist (deleted)."""
        if not uuids:
            return set()
        records = self._records(uuids)
        if records is not None:
            return set(uuids) - {r["uuid"] for r in records}
        missing = set()
        for uuid in uuids:  # an older conductor: one by one
            try:
                self._conductor.show_node(uuid)
            except NodeNotFound:
                missing.add(uuid)
        return missing

    def _changed_since_last_read(self) -> set[str] | None:
        """The uuids of the nodes we own that changed since the last read
        (a node released is in its new owner's feed, not ours) — None when
        there was no read to follow, or the conductor has no feed."""
        since = self._as_of
        if since is None:
            return None
        changed: set[str] = set()
        marker: str | None = None
        as_of = None
        while True:
            page = self._conductor.list_node_share(
                self.host, since=(since - _CHANGE_OVERLAP).isoformat(), marker=marker, limit=5000
            )
            if page is None:
                return None
            as_of = as_of or page["as_of"]
            changed.update(entry["uuid"] for entry in page["nodes"])
            marker = page["next"]
            if marker is None:
                break
        self._next_as_of = datetime.datetime.fromisoformat(as_of)
        return changed

    def _read_all_owned(self) -> tuple[list[dict[str, Any]], set[str]]:
        # The conductor's clock first: what changes during the listing is
        # read again by the next pass.
        first = self._conductor.list_node_share(self.host, since=None, limit=1)
        nodes = list(
            pages(
                lambda n, m: self._conductor.list_nodes(
                    filters={"owner": self.host}, limit=n, marker=m
                ),
                page_size=_PAGE,
            )
        )
        self._next_as_of = (
            None if first is None else datetime.datetime.fromisoformat(first["as_of"])
        )
        owned = {node["uuid"] for node in nodes}
        self._gone -= owned  # imported again since
        return nodes, owned

    def _wanted(self, node: Mapping[str, Any]) -> Wanted:
        default = str(self._conf.placement.default_project_id)
        consumer = node.get("instance_uuid")
        known = self._written.get(node["uuid"])
        instance: Mapping[str, Any] | None = None
        if consumer is not None:
            if known is not None and known.consumer == consumer:
                instance = {"project_id": known.project_id, "user_id": known.user_id}
            else:
                instance = self._instance(consumer)
        return provider.wanted(node, instance, default)

    def _instance(self, instance_uuid: str) -> Mapping[str, Any] | None:
        try:
            return self._conductor.show_instance(instance_uuid)
        except NotFound:
            return None  # deleted meanwhile: the next pass sees the node free

    def _mend_all(self, todo: list[Wanted], result: PassResult) -> list[tuple[Wanted, Any]]:
        """Mend each provider of ``todo`` (several at once); the new
        allocations left to write, with the record each is for."""
        if not todo:
            return []
        entries: list[tuple[Wanted, Any]] = []
        workers = int(self._conf.placement.concurrency)
        with concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=f"placement-{self.host}"
        ) as pool:
            futures = {pool.submit(self._mend_one, want): want for want in todo}
            unavailable: ServiceUnavailable | None = None
            for future in concurrent.futures.as_completed(futures):
                want = futures[future]
                try:
                    outcome = future.result()
                except concurrent.futures.CancelledError:
                    continue
                except ServiceUnavailable as exc:
                    if unavailable is None:  # no use asking it for the rest
                        for pending in futures:
                            pending.cancel()
                    unavailable = exc
                    continue
                except PlacementRefused as exc:
                    self._refuse(want, exc, result)
                    continue
                if outcome is None:
                    continue
                wrote, entry = outcome
                result.mended += wrote
                if entry is None:
                    self._written[want.uuid] = want
                else:
                    entries.append((want, entry))
        if unavailable is not None:
            # What was written stays written; the rest waits for Placement.
            self._write_allocations(entries, result)
            raise unavailable
        return entries

    def _mend_one(self, want: Wanted) -> tuple[bool, Any] | None:
        """Whether the provider needed writing, and the allocation left to
        write; None when the node is not held (nothing done)."""
        if not self._holds(want.uuid):
            # Released since this pass read it (its new owner writes it), or
            # claimed and not recorded as held yet (the next pass writes it).
            return None
        written = self._written.get(want.uuid)
        if written is None:
            shown = provider.read(self._client, want.uuid)  # gained: read back first
        else:
            shown = provider.as_written(written, self.aggregate)
        refused = self._client.ensure_traits(want.traits)
        if not provider.differences(want, shown, self.aggregate, refused):
            return False, None
        return True, provider.mend(self._client, want, shown, self.aggregate, self._is_instance)

    def _is_instance(self, consumer: str) -> bool:
        """Whether ``consumer`` is a ringfleet instance (deleted ones too)."""
        try:
            self._conductor.show_instance(consumer)
        except NotFound:
            return False
        return True

    def _write_allocations(self, entries: list[tuple[Wanted, Any]], result: PassResult) -> None:
        for start in range(0, len(entries), _ALLOCATION_BATCH):
            chunk = entries[start : start + _ALLOCATION_BATCH]
            try:
                self._client.put_allocations({w.consumer: e for w, e in chunk})  # type: ignore[misc]
            except PlacementConflict:
                # One consumer's generation moved (or one node has no room):
                # the batch wrote nothing; each alone, read again, says which.
                for want, _ in chunk:
                    self._write_one_allocation(want, result)
                continue
            for want, _ in chunk:
                self._written[want.uuid] = want
            result.allocations += len(chunk)

    def _write_one_allocation(self, want: Wanted, result: PassResult) -> None:
        try:
            entry = provider.allocation_entry(self._client, want)
            self._client.put_allocations({want.consumer: entry})  # type: ignore[dict-item]
        except PlacementRefused as exc:
            self._refuse(want, exc, result)
            return
        self._written[want.uuid] = want
        result.allocations += 1

    def _refuse(self, want: Wanted, exc: PlacementRefused, result: PassResult) -> None:
        result.refused += 1
        reason = str(exc)
        previous = self._refused.get(want.uuid)
        self._refused[want.uuid] = (want, reason)
        if previous is None or previous[1] != reason:
            LOG.warning(
                "Agent %s: node %s: %s; not tried again until its record changes",
                self.host,
                want.uuid,
                reason,
            )

    def _deleted_since(self, owned: set[str], read: set[str]) -> set[str]:
        """Of the nodes owned, those deleted since the last pass.

        A deleted node leaves no change behind; only a node in maintenance
        hosting nothing can be deleted, so those owned (usually few), not
        read this pass, are looked up.
        """
        deleted = self._missing((self._deletable & owned) - read)
        self._gone |= deleted
        return deleted

    def _forget_departed(self, owned: set[str], deleted: set[str], result: PassResult) -> None:
        """Forget the nodes no longer owned (their new owner writes them);
        delete the providers of those that were deleted (``deleted``: known
        to be; else looked up if they could have been)."""
        departed = {
            uuid: self._written.pop(uuid) for uuid in list(self._written) if uuid not in owned
        }
        deleted = deleted | self._missing(
            {u for u, last in departed.items() if u in self._deletable and last.consumer is None}
            - deleted
        )
        for uuid in departed:
            self._refused.pop(uuid, None)
            self._deletable.discard(uuid)
        for uuid in sorted(deleted & departed.keys()):
            self._client.delete_provider(uuid)
            result.deleted += 1
            LOG.info("Agent %s: node %s deleted: its provider too", self.host, uuid)
        for uuid in [u for u in self._refused if u not in owned]:
            del self._refused[uuid]
