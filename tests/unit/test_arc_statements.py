# SPDX-License-Identifier: Apache-2.0
"""PostgreSQL's share statements are built once per shape, and every value they bind is given.

The statements themselves run on real PostgreSQL (tests/functional:
test_share_reads_sql, test_ownership_sql); here, without a server, that
each shape of a read or a claim is one statement object reused, and that
the values made for a call fill every parameter its shape binds (a shape
missing one would fail only on PostgreSQL, only for that combination).
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

import pytest
from sqlalchemy.dialects import postgresql

from conductor import ring_share
from conductor.db import arc_statements, node_writes

SPEC = (3, tuple((f"agent-{i:02d}", 1.0) for i in range(20)))
NOW = datetime.datetime(2026, 11, 30, 12, 0, 0, 123456)


def _bound(statement: Any) -> set[str]:
    """The names of the values ``statement`` needs at execution (not a
    constant of its own, as its ``OFFSET 0``)."""
    binds = statement.compile(dialect=postgresql.dialect()).binds
    return {name for name, bind in binds.items() if bind.required}


@pytest.mark.parametrize(
    ("groups", "excluded", "claimed", "since", "after", "as_of"),
    list(
        itertools.product(
            [None, ["r1"]],
            [(), ["r9"]],
            [None, ("a1", [NOW])],
            [None, NOW],
            [None, (5, "u")],
            [None, NOW],
        )
    ),
)
def test_every_shape_of_a_read_gets_every_value_it_binds(
    groups: Any, excluded: Any, claimed: Any, since: Any, after: Any, as_of: Any
) -> None:
    arcs = ring_share.share_arcs(SPEC, "agent-03")
    query, values = arc_statements.share_query(
        arcs,
        room=10,
        groups=groups,
        exclude_groups=excluded,
        claimed=claimed,
        since=since,
        after=after,
        as_of=as_of,
    )
    assert _bound(query) == set(values)
    assert ("earliest_open" in query.selected_columns) is (as_of is not None)
    again, other = arc_statements.share_query(
        ring_share.share_arcs(SPEC, "agent-04"),
        room=99,
        groups=groups,
        exclude_groups=excluded,
        claimed=claimed,
        since=since,
        after=after,
        as_of=as_of,
    )
    assert again is query  # built once: another agent's share binds other values
    assert other["arc_firsts"] != values["arc_firsts"] and other["room"] == 99


def test_a_claim_without_times_reads_as_a_read_without_a_claim() -> None:
    arcs = [(1, 2)]
    plain = arc_statements.share_query(arcs, room=5)
    assert arc_statements.share_query(arcs, room=5, claimed=("a1", []))[0] is plain[0]
    assert arc_statements.share_query(arcs, room=5, claimed=("a1", [NOW]))[0] is not plain[0]


class _Connection:
    """Records what it is asked to run."""

    def __init__(self) -> None:
        self.ran: list[tuple[Any, dict[str, Any]]] = []

    def execute(self, statement: Any, values: dict[str, Any]) -> Any:
        self.ran.append((statement, values))
        return self

    def all(self) -> list[Any]:
        return []


@pytest.mark.parametrize(
    ("groups", "excluded"), [(None, ()), (["r1"], ()), (None, ["r9"]), (["r1"], ["r9"])]
)
def test_every_shape_of_a_claim_gets_every_value_it_binds(groups: Any, excluded: Any) -> None:
    connection = _Connection()
    for agent in ("agent-03", "agent-04"):
        arc_statements.claim(
            connection,  # type: ignore[arg-type]
            agent,
            ring_share.share_arcs(SPEC, agent),
            live=["agent-03", "agent-04"],
            room=100,
            groups=groups,
            exclude_groups=excluded,
            write=node_writes.OpenWrite(7, NOW),
        )
    (first, _), (second, values) = connection.ran
    assert first is second
    assert _bound(first) == set(values)
    assert values["live"] == '{"agent-03","agent-04"}' and values["claimer"] == "agent-04"
    # The claim ends its write's record itself: no statement of its own.
    assert values["record"] == 7 and values["stamp"] == NOW


def test_a_later_page_scans_only_the_arcs_from_its_marker_on() -> None:
    arcs = ring_share.share_arcs(SPEC, "agent-03")
    middle = arcs[len(arcs) // 2]
    _query, values = arc_statements.share_query(arcs, room=10, after=(middle[0], "u"))
    lasts = [int(v) for v in values["arc_lasts"][1:-1].split(",")]
    assert lasts == [last for _first, last in arcs if last >= middle[0]]
    assert len(lasts) < len(arcs)
