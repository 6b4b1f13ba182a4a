# SPDX-License-Identifier: Apache-2.0
"""The replies of an agent's reads and claims by share, and their page markers.

:class:`conductor.endpoints.agents.AgentsEndpoint` answers ``list_node_uuids``
by share and ``claim_share`` with these: a page of the inventory in columns
or one object per node, the ``next`` marker of a read by share, and a claim's
nodes with what it read and what the agent held.
"""

from __future__ import annotations

from typing import Any

from conductor import ring_share
from conductor.common import checks
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import inventory_entries
from conductor.db import node_pages, share_claims
from hashring.ring import POSITION_MAX, POSITION_MIN

__all__ = ["claim_reply", "inventory_reply", "marker_of", "outside", "share_marker"]


def share_marker(value: object) -> tuple[int, str]:
    """A by-share page marker, ``"<position>/<uuid>"`` (a previous reply's ``next``)."""
    position, _, uuid = value.partition("/") if isinstance(value, str) else ("", "", "")
    try:
        at = int(position)
        if not POSITION_MIN <= at <= POSITION_MAX:
            raise ValueError(position)
        return at, checks.validate_uuid(uuid, "marker")
    except ValueError:
        raise InvalidInput(
            [FieldError.about("marker", "must be a previous reply's next", value)]
        ) from None


def marker_of(following: tuple[int, str] | None) -> str | None:
    """The ``next`` of a by-share page whose last node is ``following``
    (:func:`share_marker` reads it back); ``None``: the last page."""
    return None if following is None else f"{following[0]}/{following[1]}"


def inventory_reply(
    inventory: node_pages.InventoryPage, next_marker: str | None, *, columns: object
) -> dict[str, Any]:
    """A reply of ``list_node_uuids``: its page with the ``next`` marker,
    as one list per field (``columns``) or one object per node."""
    found: dict[str, list[Any]] = {
        "uuids": inventory.uuids,
        "groups": inventory.groups,
        "owners": inventory.owners,
        "epochs": inventory.epochs,
        "pinned": inventory.pinned,
    }
    if inventory.power_states is not None:
        # Additive (no version): an older agent reads the lists it knows.
        found["power_states"] = inventory.power_states
    reply: dict[str, Any] = {"as_of": inventory.as_of.isoformat(), "next": next_marker}
    if inventory.unchanged:  # only then: older agents never see the key
        reply["unchanged"] = True
    if columns:
        return {**found, **reply}
    return {"nodes": inventory_entries(found), **reply}


def outside(
    inventory: node_pages.InventoryPage, agent: str, shares: list[ring_share.Share]
) -> node_pages.InventoryPage:
    """The page less the nodes of ``agent``'s ``shares`` (it read those by share)."""
    inside = ring_share.in_shares(agent, shares, inventory.uuids, inventory.groups)
    keep = [i for i, found in enumerate(inside) if not found]
    return node_pages.InventoryPage(
        as_of=inventory.as_of,
        unchanged=inventory.unchanged,
        uuids=[inventory.uuids[i] for i in keep],
        groups=[inventory.groups[i] for i in keep],
        owners=[inventory.owners[i] for i in keep],
        epochs=[inventory.epochs[i] for i in keep],
        pinned=[inventory.pinned[i] for i in keep],
        power_states=(
            None if inventory.power_states is None else [inventory.power_states[i] for i in keep]
        ),
    )


def claim_reply(out: share_claims.ArcClaim) -> dict[str, Any]:
    """A reply of ``claim_share``: the nodes taken, in columns, with the
    first page read after the claim (``share``) and the nodes held before it
    (``held``) when asked for."""
    reply: dict[str, Any] = {
        "uuids": out.uuids,
        "epochs": out.epochs,
        "groups": out.groups,
        "changed_at": out.changed_at,
        "more": out.more,
    }
    if out.share is not None:
        inventory, following = out.share
        reply["share"] = inventory_reply(inventory, marker_of(following), columns=True)
    if out.held is not None:
        reply["held"] = [o.to_dict() for o in out.held]
    return reply
