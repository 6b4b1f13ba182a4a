# SPDX-License-Identifier: Apache-2.0
"""What a membership read gives: the members, the view of the group, the state.

Plain values, no I/O: :mod:`hashring.membership` makes them, and the rest of
ringfleet reads them (they are re-exported there).
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hashring.ring import Ring, ring_of

__all__ = ["Member", "MembershipView", "State"]


class State(enum.Enum):
    """Connection state of a :class:`Membership`."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True)
class Member:
    """One live member of the group as it announces itself."""

    member_id: str
    ring_version: int | None
    weight: float | None
    capabilities: Mapping[str, Any] = field(default_factory=dict)

    @property
    def host_ip(self) -> str | None:
        """The member's IP address (capability ``host_ip``: an agent's
        ``[DEFAULT] my_ip``); ``None`` when it announces no valid one."""
        value = self.capabilities.get("host_ip")
        if not isinstance(value, str):
            return None
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            return None

    def serves(self, group: str) -> bool:
        """Whether the member serves a node group (capability ``groups``:
        the groups it serves; absent or empty means every group)."""
        groups = self.capabilities.get("groups") or []
        return not groups or group in groups


@dataclass(frozen=True)
class MembershipView:
    """The group as seen by one consistent read.

    :ivar members: the members that belong in the ring (same ring version,
        well-formed capabilities), by id.
    :ivar excluded: live members kept out of the ring, by id, with the reason.
    :ivar ring_version: the ring version of the process that made the view.
    """

    members: Mapping[str, Member]
    excluded: Mapping[str, str]
    ring_version: int

    @property
    def weights(self) -> dict[str, float]:
        """Member id to weight, for :class:`hashring.ring.Ring`."""
        return self.weights_for()

    def weights_for(self, group: str | None = None, exclude: str | None = None) -> dict[str, float]:
        """Member id to weight of the members serving ``group`` (all if None),
        without ``exclude``: the members of that group's ring."""
        return {
            mid: m.weight or 1.0
            for mid, m in self.members.items()
            if mid != exclude and (group is None or m.serves(group))
        }

    def host_ips(self) -> dict[str, str]:
        """Member id to IP address, of the members that announce one."""
        return {mid: m.host_ip for mid, m in self.members.items() if m.host_ip is not None}

    def named_groups(self) -> frozenset[str]:
        """The node groups some member limits itself to (capability ``groups``).

        Any other group's ring is that of the members serving every group
        (:meth:`weights_for_unnamed`).
        """
        return frozenset(
            group for m in self.members.values() for group in m.capabilities.get("groups") or ()
        )

    def weights_for_unnamed(self) -> dict[str, float]:
        """Member id to weight of the ring of every group no member names."""
        return {
            mid: m.weight or 1.0
            for mid, m in self.members.items()
            if not m.capabilities.get("groups")
        }

    def ring(self, group: str | None = None, exclude: str | None = None) -> Ring:
        """The ring of this view's members; of those serving ``group`` if given.

        Each node group has its own ring among the members that serve it,
        so a member limited to some racks never receives nodes of others.
        """
        return ring_of(self.weights_for(group, exclude), version=self.ring_version)
