"""Reading nodes for the scheduler's index: lean, paged, read-only queries.

Why not :func:`conductor.db.nodes.iter_nodes`: it loads ORM objects and
parses every row's JSON, about 4 s for 100,000 nodes on a small machine,
while a conductor must (re)build its index in well under a second.  This
module selects plain columns (JSON as text), decodes each distinct traits
or properties text once and shares the result between the nodes that have
it (most of a fleet has a handful of hardware profiles), and maps state
strings to their enums with a table.  The resulting :class:`Node` objects
equal what :func:`conductor.db.nodes.to_node` gives for the same rows, except
that the timestamps are not read (``created_at`` and ``updated_at`` are
``None``; parsing them is a tenth of a read) and the mappings are read-only.

Pages are separate short transactions (on SQLite every transaction takes the
write lock), so a full read is not one snapshot; the index's next
incremental refresh, which re-reads from before the full read started,
makes up for that.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from sqlalchemy import Text, and_, cast, or_, select

from conductor.common.objects import Node, PowerState, ProvisionState
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from conductor.scheduler.fastnode import new_node

__all__ = ["CapabilitiesKey", "NodeDecoder", "load_all", "load_changed"]

#: a node's capabilities as a sorted tuple of (key, value): hashable
CapabilitiesKey = tuple[tuple[str, str], ...]

_PAGE = 5000

_COLUMNS = (
    NodeModel.id,
    NodeModel.uuid,
    NodeModel.name,
    NodeModel.resource_class,
    cast(NodeModel.traits, Text),
    cast(NodeModel.properties, Text),
    NodeModel.node_group,
    NodeModel.provision_state,
    NodeModel.power_state,
    NodeModel.maintenance,
    NodeModel.maintenance_reason,
    NodeModel.owner,
    NodeModel.owner_epoch,
    NodeModel.instance_uuid,
)
# Paging a refresh needs the change time; nodes do not carry it (see above).
_CHANGED_COLUMNS = (*_COLUMNS, NodeModel.updated_at)
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
            str | None, tuple[Mapping[str, Any], Mapping[str, str], CapabilitiesKey]
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
    ) -> tuple[Mapping[str, Any], Mapping[str, str], CapabilitiesKey]:
        decoded = self._properties.get(text)
        if decoded is None:
            properties = (json.loads(text) if text else None) or {}
            # The same parsing as conductor.db.nodes.to_node.
            capabilities: dict[str, str] = {}
            raw = properties.get("capabilities")
            if isinstance(raw, str):
                for item in raw.split(","):
                    key, sep, value = item.strip().partition(":")
                    if sep and key:
                        capabilities[key] = value
            decoded = (
                MappingProxyType(properties) if properties else _EMPTY,
                MappingProxyType(capabilities) if capabilities else _EMPTY,
                tuple(sorted(capabilities.items())),
            )
            self._properties[text] = decoded
        return decoded

    def decode(self, row: Any) -> tuple[Node, CapabilitiesKey]:
        """The node of one row of ``_COLUMNS`` (and more), and its capabilities key."""
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
            )
        )
        return node, decoded[2]


def load_all(db: Database, *, page: int = _PAGE) -> Iterator[tuple[Node, CapabilitiesKey]]:
    """Every node, in pages of *page* rows (each its own short transaction)."""
    decoder = NodeDecoder()
    last_id = 0
    while True:
        query = select(*_COLUMNS).where(NodeModel.id > last_id).order_by(NodeModel.id).limit(page)
        with db.transaction() as session:
            rows = session.connection().execute(query).all()
        for row in rows:
            yield decoder.decode(row)
        if len(rows) < page:
            return
        last_id = rows[-1][0]


def load_changed(
    db: Database, since: datetime.datetime, *, page: int = _PAGE
) -> Iterator[tuple[Node, CapabilitiesKey]]:
    """Nodes whose row changed at or after *since*, oldest change first.

    Paged by (``updated_at``, ``uuid``), so a burst of more than *page*
    changes with equal timestamps is read whole, each row once.
    """
    decoder = NodeDecoder()
    condition = NodeModel.updated_at >= since
    while True:
        query = (
            select(*_CHANGED_COLUMNS)
            .where(condition)
            .order_by(NodeModel.updated_at, NodeModel.uuid)
            .limit(page)
        )
        with db.transaction() as session:
            rows = session.connection().execute(query).all()
        for row in rows:
            yield decoder.decode(row)
        if len(rows) < page:
            return
        last_changed, last_uuid = rows[-1][14], rows[-1][1]
        condition = or_(
            NodeModel.updated_at > last_changed,
            and_(NodeModel.updated_at == last_changed, NodeModel.uuid > last_uuid),
        )
