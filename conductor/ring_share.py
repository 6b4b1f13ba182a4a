# SPDX-License-Identifier: Apache-2.0
"""An agent's share of the fleet, as arcs of ring positions (the conductor's side).

An agent reading its inventory sends the ring it computes with (the ring
version and the members' weights: a few kilobytes, whatever the fleet's
size) and its own id; the conductor turns that into the arcs of positions
the agent owns (:meth:`hashring.ring.Ring.arcs`) and reads just those nodes
by the position index (:func:`conductor.db.node_pages.share_page`).  After
a membership change the agent also sends the ring its inventory was read
under, and gets only the arcs it gained.

The ring is a pure function of what the agent sent, so the arcs are cached
here by that: every agent of one view sends the same ring, and a cold
start of N agents builds it once, not N times.  (A cache of a computation,
never of a record.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from conductor.common.exception import FieldError, InvalidInput
from hashring.exceptions import InvalidMemberError, InvalidRingVersionError
from hashring.ring import Arcs, Ring, subtract_arcs

__all__ = ["RingSpec", "check_ring", "share_arcs"]

#: A ring as an agent describes it: (version, ((member, weight), ...)).
RingSpec = tuple[int, tuple[tuple[str, float], ...]]

#: Members one ring may have: far above any fleet, far below a payload that
#: would take the conductor long to turn into points.
MAX_MEMBERS = 2000


def check_ring(value: object, field: str) -> RingSpec:
    """A ring argument ``{"version": int, "members": {id: weight}}``, checked."""
    if not isinstance(value, Mapping) or not isinstance(value.get("members"), Mapping):
        raise InvalidInput(
            [FieldError.about(field, 'must be {"version": int, "members": {id: weight}}', value)]
        )
    members: Mapping[str, Any] = value["members"]
    if len(members) > MAX_MEMBERS:
        raise InvalidInput(
            [FieldError.about(field, f"may have at most {MAX_MEMBERS} members", len(members))]
        )
    version = value.get("version")
    try:
        ring = _ring((version, tuple(sorted(members.items()))))
    except (InvalidMemberError, InvalidRingVersionError, TypeError) as exc:
        raise InvalidInput([FieldError.about(field, str(exc), value)]) from None
    return ring.version, tuple(ring.members.items())


@functools.lru_cache(maxsize=8)
def _ring(spec: RingSpec) -> Ring:
    return Ring(dict(spec[1]), version=spec[0])


@functools.lru_cache(maxsize=256)
def share_arcs(ring: RingSpec, member: str, previous: RingSpec | None = None) -> Arcs:
    """The arcs ``member`` owns in ``ring``; less those it owned in ``previous``."""
    arcs = _ring(ring).arcs(member)
    if previous is not None:
        arcs = subtract_arcs(arcs, _ring(previous).arcs(member))
    return arcs
