# SPDX-License-Identifier: Apache-2.0
"""An agent's share read by ring position on real PostgreSQL and MariaDB.

PostgreSQL joins the arcs as two arrays, MariaDB (and SQLite) get them
written into the statement: both must return exactly the nodes the ring
gives the member, each once, in pages, and only the changed ones when asked.
"""

from __future__ import annotations

import datetime

import pytest
from sqlalchemy import select, update

from conductor.db import migration, node_pages
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow
from hashring.ring import Ring, node_position, subtract_arcs
from tests.dbutil import add_nodes


def _read_all(db: Database, arcs: list[tuple[int, int]], **query: object) -> list[str]:
    read: list[str] = []
    after = None
    while True:
        page, after = node_pages.share_page(db, arcs, limit=97, after=after, **query)  # type: ignore[arg-type]
        read += page.uuids
        if after is None:
            return read


def test_a_share_is_read_exactly_in_pages_and_by_change(
    sql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        nodes = add_nodes(db, 1500)
        with db.read() as connection:
            stored = dict(connection.execute(select(NodeModel.uuid, NodeModel.ring_position)).all())
        assert stored == {n: node_position(n) for n in nodes}  # set on insert, signed 64-bit

        ring = Ring({f"agent-{i}": 1.0 for i in range(6)}, version=1)
        owners = dict(zip(nodes, ring.assign(nodes), strict=True))
        for member in ("agent-0", "agent-5"):
            read = _read_all(db, ring.arcs(member))
            assert len(read) == len(set(read))  # each once, across pages
            assert set(read) == {n for n, o in owners.items() if o == member}

        # What agent-0 gains when agent-5 leaves: agent-5's nodes that now fall to it.
        smaller = Ring({f"agent-{i}": 1.0 for i in range(5)}, version=1)
        gained = _read_all(db, subtract_arcs(smaller.arcs("agent-0"), ring.arcs("agent-0")))
        after = dict(zip(nodes, smaller.assign(nodes), strict=True))
        assert set(gained) == {n for n in nodes if after[n] == "agent-0" != owners[n]}
        assert gained and all(owners[n] == "agent-5" for n in gained)

        # Only what changed since an instant; groups left out.
        since = utcnow()
        changed = nodes[:40]
        with db.writing() as connection:
            connection.execute(
                update(NodeModel)
                .where(NodeModel.uuid.in_(changed))
                .values(updated_at=since + datetime.timedelta(seconds=1))
            )
            connection.execute(
                update(NodeModel).where(NodeModel.uuid.in_(nodes[:10])).values(node_group="rack9")
            )
        wanted = {n for n in changed[10:] if owners[n] == "agent-0"}
        read = _read_all(db, ring.arcs("agent-0"), changed_after=since, exclude_groups=["rack9"])
        assert len(read) == len(wanted) and set(read) == wanted  # by the change time
        monkeypatch.setattr(node_pages, "_FEW_CHANGES", 5)  # too many: by arc
        read = _read_all(db, ring.arcs("agent-0"), changed_after=since, exclude_groups=["rack9"])
        assert len(read) == len(wanted) and set(read) == wanted
    finally:
        db.dispose()
