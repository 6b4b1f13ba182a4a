# SPDX-License-Identifier: Apache-2.0
"""Nodes for the scheduler's index, from the database layer's lean node rows.

Why not :func:`conductor.db.nodes.iter_nodes`: it loads ORM objects and
parses every row's JSON, about 4 s for 100,000 nodes on a small machine,
while a conductor must (re)build its index in well under a second.  The rows
come from :mod:`conductor.db.node_pages` (plain columns, JSON as text, in
pages of short transactions); this module decodes each distinct traits or
properties text once and shares the result between the nodes that have it
(most of a fleet has a handful of hardware profiles), and maps state strings
to their enums with a table.  The resulting :class:`Node` objects equal what
:func:`conductor.db.nodes.to_node` gives for the same rows, except that the
timestamps are not read (``created_at`` and ``updated_at`` are ``None``;
parsing them is a tenth of a read) and the mappings are read-only.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from conductor.common.objects import Node, PowerState, ProvisionState
from conductor.db import node_pages
from conductor.db.engine import Database
from conductor.scheduler.fastnode import new_node
from conductor.scheduler.index import HardwareKey, hardware_key_of
from conductor.validation.capabilities import stored_capabilities

__all__ = [
    "AppliedVersions",
    "ChangedNodes",
    "NodeDecoder",
    "RefreshPosition",
    "changed_pages",
    "load_all",
    "load_changed",
]


_PROVISION_STATES = {state.value: state for state in ProvisionState}
_POWER_STATES = {state.value: state for state in PowerState}
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class NodeDecoder:
    """Turns selected rows into nodes, sharing equal decoded values.

    One decoder per read: its caches hold every distinct traits/properties
    text and string of that read.
    """

    def __init__(self) -> None:
        self._traits: dict[str | None, frozenset[str]] = {}
        self._properties: dict[
            str | None, tuple[Mapping[str, Any], Mapping[str, str], HardwareKey]
        ] = {}
        self._strings: dict[str, str] = {}

    def _decode_traits(self, text: str | None) -> frozenset[str]:
        traits = self._traits.get(text)
        if traits is None:
            loaded = json.loads(text) if text else None
            traits = frozenset(loaded or ())
            self._traits[text] = traits
        return traits

    def _decode_properties(
        self, text: str | None
    ) -> tuple[Mapping[str, Any], Mapping[str, str], HardwareKey]:
        decoded = self._properties.get(text)
        if decoded is None:
            properties = (json.loads(text) if text else None) or {}
            # The same parsing as conductor.db.nodes.to_node.
            capabilities = stored_capabilities(properties.get("capabilities"))
            decoded = (
                MappingProxyType(properties) if properties else _EMPTY,
                MappingProxyType(capabilities) if capabilities else _EMPTY,
                hardware_key_of(capabilities, properties),
            )
            self._properties[text] = decoded
        return decoded

    def decode(self, row: node_pages.IndexRow) -> tuple[Node, HardwareKey]:
        """The node of an :data:`~conductor.db.node_pages.IndexRow` (which may
        have more fields after), and its :data:`~conductor.scheduler.index.HardwareKey`."""
        traits = self._traits.get(row[4])
        if traits is None:
            traits = self._decode_traits(row[4])
        decoded = self._properties.get(row[5])
        if decoded is None:
            decoded = self._decode_properties(row[5])
        strings = self._strings
        owner = row[11]
        power_state = row[8]
        node = new_node(
            (
                row[1],
                row[2],
                strings.setdefault(row[3], row[3]),
                traits,
                decoded[0],
                decoded[1],
                strings.setdefault(row[6], row[6]),
                _PROVISION_STATES.get(row[7]) or ProvisionState(row[7]),
                (_POWER_STATES.get(power_state) or PowerState(power_state))
                if power_state
                else None,
                bool(row[9]),
                row[10],
                strings.setdefault(owner, owner) if owner is not None else None,
                row[12],
                row[13],
                None,
                None,
                row[14],
            )
        )
        return node, decoded[2]


def load_all(db: Database, *, page: int = node_pages.PAGE) -> Iterator[tuple[Node, HardwareKey]]:
    """Every node, in pages of *page* rows (each its own short transaction)."""
    decoder = NodeDecoder()
    for rows in node_pages.index_rows(db, page=page):
        for row in rows:
            yield decoder.decode(row)


def load_changed(
    db: Database,
    since: datetime.datetime,
    *,
    page: int = node_pages.PAGE,
    free_only: bool = False,
) -> Iterator[tuple[Node, HardwareKey]]:
    """Nodes whose row changed at or after *since*, oldest change first.

    A burst of more than *page* changes with equal timestamps is read whole,
    each row once (see :func:`conductor.db.node_pages.changed_index_rows`).

    :param free_only: only the nodes that may take an instance now
    """
    for changed in changed_pages(db, since, page=page, free_only=free_only):
        yield from changed.nodes


@dataclasses.dataclass(frozen=True)
class ChangedNodes:
    """One page of changed nodes, decoded, and what places it among the changes."""

    read_at: datetime.datetime  # before its statement ran
    nodes: list[tuple[Node, HardwareKey]]
    last_changed: datetime.datetime | None  # its last row's change time
    full: bool  # more pages follow
    #: Each node's (uuid, change time), in the order of ``nodes``.
    versions: list[tuple[str, datetime.datetime]] = dataclasses.field(default_factory=list)


class AppliedVersions:
    """The row versions (uuid -> change time) that refreshes applied and the
    next one may read again: those changed at or after where it starts.

    Every refresh reads back ``index_refresh_overlap`` before the previous
    one, for a row that commits after its stamp: while claims stream in, each
    row came back in three or four refreshes (164,000 rows decoded for a
    100,000-node cold start of 100 agents).  A row read again unchanged is
    left out before it is decoded.
    """

    def __init__(self) -> None:
        self._versions: dict[str, datetime.datetime] = {}

    @property
    def versions(self) -> Mapping[str, datetime.datetime]:
        """uuid -> the change time applied (read-only; a page of mostly
        these is read versions first, :func:`conductor.db.node_pages.changed_index_rows`)."""
        return MappingProxyType(self._versions)

    def new(self, rows: Sequence[node_pages.IndexRow]) -> list[node_pages.IndexRow]:
        """The rows (with ``updated_at`` last) not applied as they are."""
        versions = self._versions
        return [row for row in rows if versions.get(row[1]) != row[15]]

    def applied(self, versions: Iterable[tuple[str, datetime.datetime]]) -> None:
        """Note the versions just applied to the index."""
        self._versions.update(versions)

    def keep_from(self, start: datetime.datetime) -> None:
        """Forget the versions older than where the next refresh starts."""
        self._versions = {uuid: at for uuid, at in self._versions.items() if at >= start}


def changed_pages(
    db: Database,
    since: datetime.datetime,
    *,
    page: int = node_pages.PAGE,
    free_only: bool = False,
    applied: AppliedVersions | None = None,
) -> Iterator[ChangedNodes]:
    """:func:`load_changed`, a page at a time: applied as read, a burst of
    changes is never held whole in memory.  ``applied``: leave out the rows
    of those versions (not decoded)."""
    decoder = NodeDecoder()
    known = None if applied is None else applied.versions
    for changed in node_pages.changed_index_rows(
        db, since, page=page, free_only=free_only, known=known
    ):
        rows = changed.rows
        new = rows if applied is None else applied.new(rows)
        yield ChangedNodes(
            changed.read_at,
            [decoder.decode(row) for row in new],
            changed.last_changed,
            changed.full,
            [(row[1], row[15]) for row in new],
        )


class RefreshPosition:
    """Where the next incremental read must start, from the pages this one read.

    A row's change time is taken when its transaction starts, so a row may
    commit up to ``overlap`` after its time (the option's contract, clock
    skew included), behind a page already read.  A page read at ``R``
    covering the change times from ``L`` to its last row's misses only rows
    of that range changed after ``R - overlap``: the next read starts at the
    earliest such instant of any page (at the latest page's ``R - overlap``
    for the open end).  That is the refresh's start less ``overlap`` when
    it keeps up with the writes, as before.  When it does not -- a burst of
    claims read page after page for seconds -- the rows its pages read long
    after their change are not read again (at a 100-agent cold start, 76,000
    of 177,000 rows).
    """

    def __init__(self, since: datetime.datetime, overlap: datetime.timedelta) -> None:
        self._lower = since
        self._overlap = overlap
        self._next: datetime.datetime | None = None

    @property
    def next(self) -> datetime.datetime:
        """Where the next read starts (where this one did, before any page)."""
        return self._lower if self._next is None else self._next

    def read(self, page: ChangedNodes) -> None:
        """Account for one page (in order)."""
        uncertain = max(self._lower, page.read_at - self._overlap)
        if not page.full or page.last_changed is None or uncertain <= page.last_changed:
            self._next = uncertain if self._next is None else min(self._next, uncertain)
        if page.last_changed is not None:
            self._lower = page.last_changed
