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

import bisect
import functools
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

import numpy as np

from conductor.common.exception import FieldError, InvalidInput
from conductor.validation import arguments
from hashring.exceptions import InvalidMemberError, InvalidRingVersionError
from hashring.ring import Ring, node_position, ring_of, subtract_arc_columns

__all__ = [
    "RingSpec",
    "Share",
    "ShareArcs",
    "check_ring",
    "check_shares",
    "departed",
    "in_shares",
    "share_arcs",
]

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
    # Not checked yet: the ring refuses a version or a weight it cannot take.
    version: int = value.get("version")  # type: ignore[assignment]
    try:
        ring = ring_of(members, version=version)
    except (InvalidMemberError, InvalidRingVersionError, TypeError) as exc:
        raise InvalidInput([FieldError.about(field, str(exc), value)]) from None
    return ring.version, tuple(ring.members.items())


_T = TypeVar("_T")


def _ring(spec: RingSpec) -> Ring:
    """The ring of ``spec``: the process's own (:func:`hashring.ring.ring_of`),
    which every agent of one view sends, and the conductor's membership view
    uses as well."""
    return ring_of(dict(spec[1]), version=spec[0])


class ShareArcs(Sequence[tuple[int, int]]):
    """Arcs ``(first, last)`` held as one flat array of positions.

    64 KB for an agent's 4,096 arcs, where the list of pairs is 660 KB: a
    cold start of 100 agents fills the cache with them.  A read sends
    PostgreSQL the firsts and the lasts as two arrays (:meth:`columns`,
    slices of this one): making the 4,096 pairs on every call and taking
    them apart again cost more of the conductor's CPU than the call's
    statement (about 2 ms a call).
    """

    __slots__ = ("_derived", "_flat")

    def __init__(self, flat: array[int]) -> None:
        self._flat = flat
        self._derived: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self._flat) // 2

    @overload
    def __getitem__(self, index: int) -> tuple[int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> ShareArcs: ...

    def __getitem__(self, index: int | slice) -> tuple[int, int] | ShareArcs:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError("arcs are sliced in order")
            if start == 0 and stop >= len(self):
                return self  # what it derived made already
            return ShareArcs(self._flat[2 * start : 2 * max(start, stop)])
        at = index + len(self) if index < 0 else index
        if not 0 <= at < len(self):
            raise IndexError(index)
        return self._flat[2 * at], self._flat[2 * at + 1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShareArcs):
            return self._flat == other._flat
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # a sequence, compared by value

    def __repr__(self) -> str:
        return f"ShareArcs({list(self)!r})"

    def columns(self) -> tuple[array[int], array[int]]:
        """The firsts and the lasts, each in order."""
        return self._flat[0::2], self._flat[1::2]

    def derived(self, name: str, make: Callable[[ShareArcs], _T]) -> _T:
        """``make(self)``, made once for these arcs (they are cached, and
        read again by every change read of the share): a statement's
        parameters, such as the arrays a read sends PostgreSQL."""
        try:
            value: _T = self._derived[name]
        except KeyError:
            value = self._derived[name] = make(self)  # twice at worst, alike
        return value


def share_arcs(ring: RingSpec, member: str, previous: RingSpec | None = None) -> ShareArcs:
    """The arcs ``member`` owns in ``ring``; less those it owned in ``previous``."""
    return _share_arcs(ring, member, previous)


def departed(previous: RingSpec, ring: RingSpec) -> set[str]:
    """The members of ``previous`` that ``ring`` no longer has."""
    return {member for member, _weight in previous[1]} - {member for member, _weight in ring[1]}


#: Shares kept: every agent's of a view, up to 128 agents, with room for
#: the small gained-arcs entries of a view change.  An entry is about 236 KB
#: with its PostgreSQL literals, whatever the agent count (4,096 arcs), so
#: the cache grows with the agents up to this bound and no further (30 MB).
SHARES_KEPT = 128


@functools.lru_cache(maxsize=SHARES_KEPT)
def _share_arcs(ring: RingSpec, member: str, previous: RingSpec | None) -> ShareArcs:
    firsts, lasts = _ring(ring).arc_columns(member)
    if previous is not None:
        firsts, lasts = subtract_arc_columns(firsts, lasts, *_ring(previous).arc_columns(member))
    flat = np.empty(2 * len(firsts), np.int64)
    flat[0::2], flat[1::2] = firsts, lasts
    return ShareArcs(array("q", flat.tobytes()))


#: One share an agent read: (its ring, its groups or None for all, groups left out).
Share = tuple[RingSpec, tuple[str, ...] | None, tuple[str, ...]]

#: Shares one read may name: an agent reads one per distinct ring of its groups.
MAX_SHARES = 64


def check_shares(value: object, field: str) -> list[Share]:
    """``outside``: a list of ``{"ring", "groups", "exclude_groups"}``, checked."""
    if not isinstance(value, list) or len(value) > MAX_SHARES:
        raise InvalidInput(
            [
                FieldError.about(
                    field,
                    f'must be a list of at most {MAX_SHARES} {{"ring", "groups", '
                    '"exclude_groups"}',
                    value,
                )
            ]
        )
    shares: list[Share] = []
    for item in value:
        if not isinstance(item, Mapping):
            raise InvalidInput([FieldError.about(field, "each share must be an object", item)])
        groups, excluded = item.get("groups"), item.get("exclude_groups")
        only = None if groups is None else arguments.check_groups(groups, f"{field}.groups")
        name = f"{field}.exclude_groups"
        left = [] if excluded is None else arguments.check_groups(excluded, name)
        ring = check_ring(item.get("ring"), f"{field}.ring")
        shares.append((ring, None if only is None else tuple(only), tuple(left)))
    return shares


def in_shares(
    member: str, shares: Sequence[Share], uuids: Sequence[str], groups: Sequence[str]
) -> list[bool]:
    """For each node (uuid, group): whether one of ``member``'s ``shares`` has it."""
    found = [False] * len(uuids)
    if not uuids:  # a quiet fleet's change read: no arcs to look through
        return found
    for ring, only, excluded in shares:
        arcs = share_arcs(ring, member)
        firsts, lasts = arcs.columns()
        for i, (uuid, group) in enumerate(zip(uuids, groups, strict=True)):
            if found[i] or (only is not None and group not in only) or group in excluded:
                continue
            position = node_position(uuid)
            at = bisect.bisect_right(firsts, position) - 1
            found[i] = at >= 0 and position <= lasts[at]
    return found
