# SPDX-License-Identifier: Apache-2.0
"""An agent's share as the conductor holds it: arcs in one flat array."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from conductor import ring_share
from conductor.db import arc_statements
from hashring import ring as ring_module
from hashring.ring import Ring, ring_of, subtract_arcs

MEMBERS = {f"agent-{i:03d}": 1.0 for i in range(20)}


def _spec() -> ring_share.RingSpec:
    return ring_share.check_ring({"version": 1, "members": MEMBERS}, "ring")


def test_a_share_is_the_rings_arcs_pair_by_pair() -> None:
    arcs = ring_share.share_arcs(_spec(), "agent-007")
    pairs = Ring(MEMBERS, version=1).arcs("agent-007")
    assert len(arcs) == len(pairs) > 100
    assert arcs == pairs and list(arcs) == pairs
    assert (arcs[0], arcs[-1], arcs[17]) == (pairs[0], pairs[-1], pairs[17])
    assert arcs[10:20] == pairs[10:20] and list(arcs[len(pairs) - 2 :]) == pairs[-2:]
    assert list(arcs[5:3]) == []
    with pytest.raises(IndexError):
        arcs[len(pairs)]
    firsts, lasts = arcs.columns()
    assert list(firsts) == [a for a, _ in pairs] and list(lasts) == [b for _, b in pairs]


def test_a_share_less_the_previous_rings_is_what_the_member_gained() -> None:
    without = {m: w for m, w in MEMBERS.items() if m != "agent-003"}
    now = ring_share.check_ring({"version": 1, "members": without}, "ring")
    gained = ring_share.share_arcs(now, "agent-007", _spec())  # agent-003 left
    expected = subtract_arcs(
        Ring(without, version=1).arcs("agent-007"), Ring(MEMBERS, version=1).arcs("agent-007")
    )
    assert len(gained) > 0 and gained == expected


def test_the_columns_go_to_postgresql_as_array_literals() -> None:
    arcs = ring_share.share_arcs(_spec(), "agent-007")
    firsts, lasts = arc_statements.arc_literals(arcs)
    assert firsts.startswith("{") and firsts.endswith("}")
    assert [int(v) for v in firsts[1:-1].split(",")] == [a for a, _ in arcs]
    assert [int(v) for v in lasts[1:-1].split(",")] == [b for _, b in arcs]
    # A plain list of pairs (a test's, another caller's) gives the same.
    assert arc_statements.arc_literals(list(arcs)) == (firsts, lasts)


def test_a_shares_literals_are_made_once_for_every_read_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every change read of a share sends its arcs again: the arrays are made
    once per share (the cached arcs), and a batch of all of them is the
    share itself, not a copy that would make them again."""
    made: list[int] = []
    make = arc_statements._make_arc_literals

    def counted(arcs: Any) -> tuple[str, str]:
        made.append(len(arcs))
        return make(arcs)

    monkeypatch.setattr(arc_statements, "_make_arc_literals", counted)
    ring_share._share_arcs.cache_clear()
    spec = _spec()
    first = arc_statements.arc_literals(ring_share.share_arcs(spec, "agent-007"))
    again = ring_share.share_arcs(spec, "agent-007")
    assert again[0 : len(again)] is again
    assert arc_statements.arc_literals(again[0 : len(again)]) is first
    assert arc_statements.arc_literals(ring_share.share_arcs(spec, "agent-008")) != first
    assert made == [len(again), len(ring_share.share_arcs(spec, "agent-008"))]
    ring_share._share_arcs.cache_clear()


def test_agents_sending_one_ring_at_once_build_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []

    class SlowRing(Ring):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(1)
            time.sleep(0.05)  # long enough for every thread to miss the cache
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ring_module, "Ring", SlowRing)
    ring_module._shared_ring.cache_clear()
    spec = {"version": 1, "members": {f"agent-{i}": 1.0 for i in range(7)}}
    # The agents' rings and the conductor's own view of the same members
    # (its routing): one ring, built once.
    threads = [
        threading.Thread(target=ring_share.check_ring, args=(spec, "ring")) for _ in range(4)
    ] + [threading.Thread(target=ring_of, args=(spec["members"], 1)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ring_module._shared_ring.cache_clear()
    assert len(built) == 1


def test_agents_asking_one_rings_arcs_at_once_group_its_points_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first calls of a view's agents each ask for their arcs at once: the
    ring's points are grouped by owner (a sort of the whole circle) once."""
    ring = Ring({f"agent-{i}": 1.0 for i in range(8)}, version=1)
    sorts: list[int] = []
    argsort = ring_module.np.argsort

    def slow_argsort(values: Any, **kwargs: Any) -> Any:
        if len(values) == len(ring._owner_index):  # the whole circle, not one member's arcs
            sorts.append(1)
            time.sleep(0.05)  # long enough for every thread to find the points ungrouped
        return argsort(values, **kwargs)

    monkeypatch.setattr(ring_module.np, "argsort", slow_argsort)
    arcs: dict[str, Any] = {}
    threads = [
        threading.Thread(target=lambda m=m: arcs.setdefault(m, ring.arcs(m)))
        for m in (f"agent-{i}" for i in range(8))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sorts) == 1
    monkeypatch.undo()
    assert arcs == {m: Ring(dict.fromkeys(arcs, 1.0), version=1).arcs(m) for m in arcs}
