# SPDX-License-Identifier: Apache-2.0
"""The consistent hash ring that splits nodes between agents.

Pure computation, no I/O: ``Ring(members, version).owner(node_id)`` is a
function of the member ids, their weights, the ring version and the node id
only (invariant 5, ``docs/architecture.rst`` "The invariants").  Every
process with the same view computes the same map, whatever its
``PYTHONHASHSEED`` or the order in which it learnt about the members.

How it works, and why this way:

* Each member owns ``round(VNODES_PER_WEIGHT * weight)`` points on a 64-bit
  circle.  Point *i* of member *m* is the splitmix64 finalizer applied to
  ``xxh3_64(m, seed=version) + (i + 1) * golden``, i.e. a member's points
  depend on nothing but its own id, weight and the ring version.  That is
  what makes movement minimal: adding a member only inserts its points
  (nodes move only *to* it), removing one only deletes its points (only its
  nodes move), and nothing ever moves between two members that stayed.
* A node belongs to the first point at or after ``xxh3_64(node_id)``,
  wrapping around.  Equal points (a 2**-64 event) are ordered by member id,
  so ties are deterministic too.
* With 4096 points per unit of weight the members' shares of the circle vary
  by about 1.6 %, small next to the sampling noise of hashing 100k nodes
  (about 3 % at 100 members): the ring balances as well as a uniform hash
  would (peak/mean about 1.08 at 100 members, 1.12 at 200) where tooz's
  32-partition ring reaches 1.5.
* Single lookups bisect a compact ``array('Q')`` (8 bytes a point); bulk
  assignment hashes in C via ``map`` and resolves all owners with one
  ``numpy.searchsorted``.

Changing the ring's parameters would remap nodes, so the parameters are
tied to the ring version: version 1 is the scheme above, and the version is
the seed of every member's points.  Peers announcing another version must be
kept out of the ring (the membership adapter does that).
"""

from __future__ import annotations

import bisect
import functools
import math
import numbers
import threading
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt
import xxhash

from hashring.exceptions import (
    EmptyRingError,
    InvalidMemberError,
    InvalidRingVersionError,
)

__all__ = [
    "MAX_WEIGHT",
    "POSITION_MAX",
    "POSITION_MIN",
    "VNODES_PER_WEIGHT",
    "Arcs",
    "Move",
    "Ring",
    "moves",
    "node_position",
    "ring_of",
    "subtract_arc_columns",
    "subtract_arcs",
]

#: Points on the circle for a member of weight 1.0.
VNODES_PER_WEIGHT = 4096
#: Largest accepted weight: bounds a single member's points (and memory).
MAX_WEIGHT = 64.0

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_hash64 = xxhash.xxh3_64_intdigest
_bisect_left = bisect.bisect_left
_BUCKET_BITS = 16
_BUCKETS = 1 << _BUCKET_BITS
_BUCKET_SHIFT = 64 - _BUCKET_BITS
_TOP = np.uint64((1 << 64) - 1)
_SIGN = np.uint64(1 << 63)


def _node_hash(node_id: str) -> int:
    if not isinstance(node_id, str):
        raise TypeError(f"node id must be a string, got {type(node_id).__name__}")
    return _hash64(node_id.encode("utf-8"))


#: A node's ring position is its hash moved into the signed 64-bit range
#: (``hash - 2**63``): databases store signed BIGINTs, and the shift keeps
#: the order, so an arc of the circle is one ``BETWEEN`` of positions.
_POSITION_SHIFT = 1 << 63
POSITION_MIN = -_POSITION_SHIFT
POSITION_MAX = _POSITION_SHIFT - 1

#: Arcs of the circle as sorted, disjoint, inclusive ``(first, last)``
#: position pairs (never wrapping: the arc across the top is split in two).
Arcs = list[tuple[int, int]]


def node_position(node_id: str) -> int:
    """Where ``node_id`` sits on the circle, as a signed 64-bit integer.

    A function of the node id alone (the ring version seeds the members'
    points, never the nodes' hashes), so a stored position stays true for
    every membership and ring version: :meth:`Ring.arcs` of a member selects
    its nodes by position.
    """
    return _node_hash(node_id) - _POSITION_SHIFT


def subtract_arcs(arcs: Arcs, other: Arcs) -> Arcs:
    """The parts of ``arcs`` not in ``other`` (both sorted, disjoint, inclusive)."""
    firsts, lasts = subtract_arc_columns(
        np.array([first for first, _ in arcs], np.int64),
        np.array([last for _, last in arcs], np.int64),
        np.array([first for first, _ in other], np.int64),
        np.array([last for _, last in other], np.int64),
    )
    return list(zip(firsts.tolist(), lasts.tolist(), strict=True))


def subtract_arc_columns(
    firsts: npt.NDArray[np.int64],
    lasts: npt.NDArray[np.int64],
    other_firsts: npt.NDArray[np.int64],
    other_lasts: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`subtract_arcs` of arcs given as columns (:meth:`Ring.arc_columns`).

    All in C: a conductor computes the arcs an agent gained since a ring
    (4,096 arcs a member on either side) for every claim after a kill, and
    the walk in Python was 4 ms of each.  What is left of ``arcs`` lies in
    the gaps between the ``other`` arcs: it is each arc's intersection with
    each gap it overlaps, in order.
    """
    if not len(other_firsts) or not len(firsts):
        return firsts.copy(), lasts.copy()
    # The gaps between the other arcs (none where two touch), and before the
    # first and after the last unless those reach the ends of the circle.
    gap_firsts = [other_lasts[:-1] + 1]
    gap_lasts = [other_firsts[1:] - 1]
    if other_firsts[0] > POSITION_MIN:
        gap_firsts.insert(0, np.array([POSITION_MIN], np.int64))
        gap_lasts.insert(0, other_firsts[:1] - 1)
    if other_lasts[-1] < POSITION_MAX:
        gap_firsts.append(other_lasts[-1:] + 1)
        gap_lasts.append(np.array([POSITION_MAX], np.int64))
    low, high = np.concatenate(gap_firsts), np.concatenate(gap_lasts)
    real = low <= high
    low, high = low[real], high[real]
    # Arc i overlaps the gaps from the first that ends at or after its start
    # to the last that begins at or before its end.
    start = np.searchsorted(high, firsts, "left")
    count = np.maximum(np.searchsorted(low, lasts, "right") - start, 0)
    arc = np.repeat(np.arange(len(firsts)), count)
    gap = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count - start, count)
    return np.maximum(firsts[arc], low[gap]), np.minimum(lasts[arc], high[gap])


def _member_points(member_id: str, count: int, version: int) -> npt.NDArray[np.uint64]:
    """The ``count`` points of one member, a function of its id and the version."""
    base = np.uint64(_hash64(member_id.encode("utf-8"), seed=version))
    z = base + np.arange(1, count + 1, dtype=np.uint64) * _GOLDEN
    # splitmix64 finalizer: full avalanche, so consecutive inputs scatter.
    z ^= z >> np.uint64(30)
    z *= _MIX1
    z ^= z >> np.uint64(27)
    z *= _MIX2
    z ^= z >> np.uint64(31)
    return z


def _vnodes(weight: float) -> int:
    return max(1, round(VNODES_PER_WEIGHT * weight))


def _validate_member_id(member_id: object) -> str:
    if not isinstance(member_id, str):
        raise InvalidMemberError(
            member_id, "id", f"must be a string, got {type(member_id).__name__}"
        )
    if not member_id or member_id.strip() != member_id:
        raise InvalidMemberError(
            member_id, "id", "must be non-empty, without leading/trailing whitespace"
        )
    return member_id


def _validate_weight(member_id: str, weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise InvalidMemberError(
            member_id, "weight", f"must be a number, got {type(weight).__name__}"
        )
    value = float(weight)
    if not math.isfinite(value) or value <= 0:
        raise InvalidMemberError(member_id, "weight", f"must be > 0, got {weight!r}")
    if value > MAX_WEIGHT:
        raise InvalidMemberError(member_id, "weight", f"must be <= {MAX_WEIGHT:g}, got {weight!r}")
    return value


def _validate_members(members: Iterable[str] | Mapping[str, float]) -> dict[str, float]:
    if isinstance(members, (str, bytes)):
        # A lone string is an iterable of characters: almost surely a mistake.
        raise InvalidMemberError(members, "id", "members must be a collection of ids")
    weights: dict[str, float] = {}
    if isinstance(members, Mapping):
        for member_id, weight in members.items():
            mid = _validate_member_id(member_id)
            weights[mid] = _validate_weight(mid, weight)
    else:
        for member_id in members:
            mid = _validate_member_id(member_id)
            if mid in weights:
                raise InvalidMemberError(mid, "id", "duplicate member")
            weights[mid] = 1.0
    return dict(sorted(weights.items()))


@dataclass(frozen=True, slots=True)
class Move:
    """One node changing owner between two rings (``None``: no owner)."""

    node_id: str
    old_owner: str | None
    new_owner: str | None


#: Held while a ring groups its points by owner (:meth:`Ring._member_points_at`):
#: the first calls of a view's agents ask for their arcs at once, and each
#: that found the points not yet grouped sorted the whole circle -- at a
#: cold start of 100 agents, a tenth of the conductor's CPU.
_GROUPING = threading.Lock()


def _circle_order(
    points: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint64]]:
    """The order of ``points`` around the circle, and the points in it; equal
    points in their order here (members listed in id order: the smaller
    member id first, in every process).

    A stable sort of 400,000 points (100 members) takes four times as long
    as numpy's default one, whose order of distinct points is the same: each
    agent builds the ring of every view it sees.  Equal points (a 2**-64
    event) are sorted again, stably.
    """
    order = np.argsort(points)
    ordered = points[order]
    if len(ordered) > 1 and not np.all(ordered[1:] != ordered[:-1]):
        order = np.argsort(points, kind="stable")
        ordered = points[order]
    return order, ordered


class Ring:
    """A consistent hash ring over weighted members.

    :param members: member ids (each of weight 1.0) or a mapping of member id
        to weight (a real number in ``(0, MAX_WEIGHT]``).
    :param version: the ring version, a positive integer; rings of different
        versions map nodes independently.
    :raises InvalidMemberError: (a :class:`ValueError`) for an empty,
        non-string or duplicate id, or a weight that is not a positive number.
    """

    __slots__ = (
        "_bucket_start",
        "_member_ids",
        "_member_names",
        "_owner_index",
        "_point_owner",
        "_points",
        "_points_by_owner",
        "_points_compact",
        "_version",
        "_weights",
    )

    def __init__(self, members: Iterable[str] | Mapping[str, float] = (), version: int = 1) -> None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidRingVersionError(version)
        self._version = version
        self._weights = _validate_members(members)
        ids = list(self._weights)
        counts = [_vnodes(w) for w in self._weights.values()]
        points = np.empty(sum(counts), dtype=np.uint64)
        start = 0
        for member_id, count in zip(ids, counts, strict=True):
            points[start : start + count] = _member_points(member_id, count, version)
            start += count
        owners = np.repeat(np.arange(len(ids), dtype=np.int32), counts)
        order, ordered = _circle_order(points)
        # Each table is kept once, in a compact array, with numpy views on
        # the same memory for the bulk operations: a conductor caches the
        # rings its agents send, and at 100 members a ring is 400k points
        # (12.6 MB with a Python list of owners and copies, 5 MB now).
        self._points_compact = array("Q", ordered.tobytes())
        self._points: npt.NDArray[np.uint64] = np.frombuffer(self._points_compact, np.uint64)
        # One entry per point, plus the owner of the first point again at the
        # end: a hash past the last point wraps around to the first.
        point_owner = array("i", owners[order].tobytes())
        if point_owner:
            point_owner.append(point_owner[0])
        self._point_owner = point_owner
        self._owner_index: npt.NDArray[np.int32] = np.frombuffer(point_owner, np.int32)[
            : len(self._points)
        ]
        # Where each of the 2**16 top-bits buckets starts among the points:
        # a lookup bisects only its bucket (a handful of points) instead of
        # the whole circle, which keeps it fast for hundreds of members.
        bucket_edges = np.arange(_BUCKETS + 1, dtype=np.uint64) << np.uint64(_BUCKET_SHIFT)
        starts = np.searchsorted(self._points, bucket_edges[:-1], side="left")
        # Straight from numpy's memory: a list of 65,537 ints first cost a
        # third of a small ring's build.
        self._bucket_start = array("l", np.append(starts, len(self._points)).astype("l").tobytes())
        self._member_ids = ids
        self._member_names = np.array(ids, dtype=object)
        self._points_by_owner: tuple[npt.NDArray[np.int32], npt.NDArray[np.intp]] | None = None

    @property
    def version(self) -> int:
        """The ring version this ring was computed for."""
        return self._version

    @property
    def members(self) -> Mapping[str, float]:
        """Read-only mapping of member id to weight, in id order."""
        return MappingProxyType(self._weights)

    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._weights

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ring):
            return NotImplemented
        return self._version == other._version and self._weights == other._weights

    def __hash__(self) -> int:
        return hash((self._version, tuple(self._weights.items())))

    def __repr__(self) -> str:
        return f"Ring(version={self._version}, members={len(self._weights)})"

    def owner(self, node_id: str) -> str:
        """The member that owns ``node_id``.

        :raises EmptyRingError: when the ring has no members.
        :raises TypeError: when ``node_id`` is not a string.
        """
        # The hot path of every routing decision: no helper calls, and the
        # wrap-around is a sentinel entry rather than a branch.
        try:
            h = _hash64(node_id.encode("utf-8"))
            bucket = h >> _BUCKET_SHIFT
            lo, hi = self._bucket_start[bucket], self._bucket_start[bucket + 1]
            at = _bisect_left(self._points_compact, h, lo, hi)
            return self._member_ids[self._point_owner[at]]
        except AttributeError:
            _node_hash(node_id)  # raises the TypeError naming the type
            raise
        except IndexError:
            raise EmptyRingError(node_id) from None

    def arcs(self, member_id: str) -> Arcs:
        """The positions (:func:`node_position`) of the nodes ``member_id`` owns,
        as ``(first, last)`` pairs: :meth:`arc_columns`, paired."""
        firsts, lasts = self.arc_columns(member_id)
        return list(zip(firsts.tolist(), lasts.tolist(), strict=True))

    def arc_columns(self, member_id: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The first and the last positions of the arcs ``member_id`` owns, in order.

        A node belongs to the first point at or after its hash, so a point
        owns the hashes after the previous point up to itself; consecutive
        points of the member make one arc.  A member not in the ring owns
        nothing.  (Used to read a member's share of a fleet by an index on
        the stored positions, instead of hashing every node.)  All of it in
        C: a conductor computes the arcs of every agent that reads its
        share, 4,096 a member, and a walk in Python was most of that.
        """
        if member_id not in self._weights:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        mine = self._member_points_at(self._member_ids.index(member_id))
        if not len(mine):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if len(mine) == len(self._points):
            return np.array([POSITION_MIN], np.int64), np.array([POSITION_MAX], np.int64)
        # Runs of consecutive points of ours: one starts after a gap in the
        # indexes, and ends before one.
        gaps = np.flatnonzero(np.diff(mine) != 1)
        starts = mine[np.concatenate(([0], gaps + 1))]
        ends = mine[np.concatenate((gaps, [len(mine) - 1]))]
        if starts[0] == 0 and ends[-1] == len(self._points) - 1:
            # The circle wraps: the run at its end and the run at its start
            # are one, from the last start up to the first end.
            starts, ends = starts[1:], np.roll(ends[:-1], -1)
        # The previous point (index -1 for the first: the last point) owns up
        # to itself; a run whose previous point is equal to its last owns
        # nothing (equal points: the earlier one owns the hash).
        before = self._points[starts - 1]
        highs = self._points[ends]
        across = (starts == 0) | (ends < starts)  # at most one run: across the top
        inside = ~across & (before < highs)
        lows = [before[inside] + np.uint64(1)]
        tops = [highs[inside]]
        if across.any():
            # From after the previous point to the top, and from 0 to its last.
            previous, last = before[across][0], highs[across][0]
            if previous < _TOP:
                lows.append(np.array([previous + np.uint64(1)], np.uint64))
                tops.append(np.array([_TOP], np.uint64))
            lows.append(np.zeros(1, np.uint64))
            tops.append(np.array([last], np.uint64))
        low, high = np.concatenate(lows), np.concatenate(tops)
        order = np.argsort(low, kind="stable")
        # Unsigned to position: less 2**63, the same bits with the top one flipped.
        return (
            (low[order] ^ _SIGN).view(np.int64),
            (high[order] ^ _SIGN).view(np.int64),
        )

    def _member_points_at(self, member: int) -> npt.NDArray[np.int32]:
        """The indexes of member number ``member``'s points, in order.

        Grouped by owner once per ring: a conductor computes the arcs of
        every agent of a view, and a scan of the whole circle for each (400k
        points at 100 members) made a cold start's arcs cost O(members²).
        """
        grouped = self._points_by_owner
        if grouped is None:
            with _GROUPING:
                grouped = self._points_by_owner
                if grouped is None:
                    # int32: half the memory of argsort's intp (1.6 MB at 100 members).
                    # Member numbers as 16 bits where they fit: numpy sorts
                    # those stably by radix, five times as fast as 32-bit ones.
                    numbers = self._owner_index
                    if len(self._member_ids) <= 1 << 16:
                        numbers = numbers.astype(np.uint16)
                    order = np.argsort(numbers, kind="stable").astype(np.int32)
                    bounds = np.searchsorted(
                        self._owner_index[order], np.arange(len(self._member_ids) + 1), side="left"
                    )
                    grouped = self._points_by_owner = (order, bounds)
        order, bounds = grouped
        return order[bounds[member] : bounds[member + 1]]

    def assign(self, node_ids: Sequence[str]) -> list[str]:
        """Owners of many nodes at once; the same answers as :meth:`owner`."""
        if not node_ids:
            return []
        if not self._weights:
            raise EmptyRingError()
        return self._member_names[self._owner_indices(node_ids)].tolist()  # type: ignore[no-any-return]

    def load(self, node_ids: Sequence[str]) -> dict[str, int]:
        """How many of ``node_ids`` each member owns (members owning none: 0)."""
        if not self._weights:
            if node_ids:
                raise EmptyRingError()
            return {}
        counts = np.bincount(self._owner_indices(node_ids), minlength=len(self._weights)).tolist()
        return dict(zip(self._weights, counts, strict=True))

    def _owner_indices(self, node_ids: Sequence[str]) -> npt.NDArray[np.int32]:
        try:
            # map() keeps hashing in C: no Python frame per node.
            hashes = np.fromiter(
                map(_hash64, map(str.encode, node_ids)),
                dtype=np.uint64,
                count=len(node_ids),
            )
        except TypeError:
            for node_id in node_ids:
                _node_hash(node_id)  # raises the TypeError naming the type
            raise
        idx = np.searchsorted(self._points, hashes, side="left")
        idx[idx == len(self._points)] = 0
        return self._owner_index[idx]


def ring_of(members: Mapping[str, float], version: int = 1) -> Ring:
    """``Ring(members, version)``, shared within the process.

    A ring is a pure function of its members and version, and immutable:
    every user of one view in a process builds the same one (each agent of
    a process hosting several, each call of a conductor's).  Building one
    of 100 members is about 400,000 points hashed and sorted (30 ms, 8.6 MB
    once its arcs were asked for); agents built one per view each, which
    was a tenth of their CPU in a cold start.  Three are kept: the current
    view's, the previous one's (a read of the arcs a view change gave an
    agent names both) and one in passing.
    """
    key = tuple(sorted(members.items()))
    with _RING_BUILD:
        return _shared_ring(version, key)


#: Held while a ring is looked up or built: the users of one view ask for
#: its ring at once -- a conductor's RPC threads after a membership change
#: -- and every call that missed the cache built it: at a kill -9 of one of
#: 100 agents, dozens of builds at once were 200 MB of the conductor's peak.
_RING_BUILD = threading.Lock()


@functools.lru_cache(maxsize=3)
def _shared_ring(version: int, members: tuple[tuple[str, float], ...]) -> Ring:
    return Ring(dict(members), version=version)


def moves(old: Ring, new: Ring, node_ids: Sequence[str]) -> list[Move]:
    """The nodes of ``node_ids`` whose owner differs between two rings.

    An empty ring owns nothing: its side of a move is ``None``.
    """
    before: list[str | None] = list(old.assign(node_ids)) if len(old) else [None] * len(node_ids)
    after: list[str | None] = list(new.assign(node_ids)) if len(new) else [None] * len(node_ids)
    return [
        Move(node_id, a, b) for node_id, a, b in zip(node_ids, before, after, strict=True) if a != b
    ]
