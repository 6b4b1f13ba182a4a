# SPDX-License-Identifier: Apache-2.0
"""An agent's share read by ring position on real PostgreSQL and MariaDB.

PostgreSQL joins the arcs as two arrays, MariaDB (and SQLite) get them
written into the statement: both must return exactly the nodes the ring
gives the member, each once, in pages, and only the changed ones when asked.
"""

from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import select, text, update

from conductor.db import arc_statements, migration, node_pages, node_writes, share_claims
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


def test_a_share_is_read_exactly_in_pages_and_by_change(sql_url: str) -> None:
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
        assert len(read) == len(wanted) and set(read) == wanted
        racked = {n for n in nodes[:10] if owners[n] == "agent-0"}
        assert set(_read_all(db, ring.arcs("agent-0"), groups=["rack9"])) == racked
    finally:
        db.dispose()


def test_a_read_leaves_out_the_rows_the_readers_own_claims_changed_last(sql_url: str) -> None:
    """``claimed``: the rows an agent's claims stamped are not read back to
    it; the same rows changed since by anything else, or another owner's, are."""
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        nodes = add_nodes(db, 600)
        everywhere = [(-(1 << 63), (1 << 63) - 1)]
        taken = share_claims.claim_arcs(db, "a1", everywhere, live_members={"a1"}, limit=200)
        stamp = datetime.datetime.fromisoformat(taken.changed_at or "")
        again = nodes[0] if nodes[0] in taken.uuids else taken.uuids[0]
        with db.writing() as connection:  # changed since by someone else
            connection.execute(
                update(NodeModel)
                .where(NodeModel.uuid == again)
                .values(updated_at=stamp + datetime.timedelta(seconds=1))
            )
        read = _read_all(db, everywhere, claimed=("a1", [stamp]))
        assert sorted(read) == sorted({again} | (set(nodes) - set(taken.uuids)))
        # Another agent's read of the same rows leaves out none of them.
        assert len(_read_all(db, everywhere, claimed=("a2", [stamp]))) == len(nodes)
    finally:
        db.dispose()


def _share_query(
    db: Database, arcs: list[tuple[int, int]], since: datetime.datetime
) -> tuple[Any, dict[str, Any]]:
    """The statement of a change read of ``arcs``, and its values."""
    if db.engine.dialect.name == "postgresql":
        return arc_statements.share_query(arcs, room=1000, since=since)
    return select(node_pages.written_arcs(arcs, [], since).c.uuid), {}


def _plan(db: Database, statement: Any, values: dict[str, Any]) -> str:
    """The server's plan of ``statement`` with ``values`` (EXPLAIN), as text."""
    compiled = statement.compile(dialect=db.engine.dialect)
    with db.engine.connect() as connection:
        cursor = connection.connection.cursor()
        cursor.execute("EXPLAIN " + str(compiled), compiled.construct_params(values))
        return "\n".join(" ".join(str(v) for v in row) for row in cursor.fetchall())


def test_a_change_read_goes_by_the_position_index_after_a_cold_start(sql_url: str) -> None:
    """The statistics say nothing changed lately (taken before a cold start
    claimed every node): a change read must still scan each arc's positions,
    not every change of the fleet once per arc."""
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        nodes = add_nodes(db, 3000)
        with db.writing() as connection:
            connection.execute(
                update(NodeModel).values(updated_at=utcnow() - datetime.timedelta(hours=1))
            )
            connection.execute(
                text("ANALYZE TABLE nodes" if "mysql" in sql_url else "ANALYZE nodes")
            )
            connection.execute(update(NodeModel).values(updated_at=utcnow()))  # the cold start
        ring = Ring({f"agent-{i}": 1.0 for i in range(10)}, version=1)
        since = utcnow() - datetime.timedelta(seconds=30)
        plan = _plan(db, *_share_query(db, ring.arcs("agent-3"), since))
        # (MariaDB lists the indexes it could use, then the one it does.)
        used = plan.split()[5] if "mysql" in sql_url else plan
        assert "nodes_ring_position_idx" in used and "nodes_updated_at_idx" not in used, plan
        read = _read_all(db, ring.arcs("agent-3"), changed_after=since)
        owners = dict(zip(nodes, ring.assign(nodes), strict=True))
        assert sorted(read) == sorted(n for n, o in owners.items() if o == "agent-3")
    finally:
        db.dispose()


def test_a_claim_returns_its_share_as_it_left_it(sql_url: str) -> None:
    """``read``: the first page of the arcs after the claim (read in the
    claim's own transaction on PostgreSQL), in position order, the claimed
    rows with their new owner and epoch, and the marker of the next page."""
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        nodes = add_nodes(db, 300)
        ring = Ring({"a1": 1.0, "a2": 1.0}, version=1)
        arcs = ring.arcs("a1")
        mine = {n for n in nodes if ring.owner(n) == "a1"}
        taken = share_claims.claim_arcs(
            db, "a1", arcs, live_members={"a1", "a2"}, limit=10_000, read=40
        )
        assert set(taken.uuids) == mine and taken.share is not None
        page, marker = taken.share
        assert len(page.uuids) == 40 and marker is not None
        assert page.uuids == _read_all(db, arcs)[:40]
        assert set(page.owners) == {"a1"}
        claimed = dict(zip(taken.uuids, taken.epochs, strict=True))
        assert page.epochs == [claimed[u] for u in page.uuids]
        rest, end = node_pages.share_page(db, arcs, limit=10_000, after=marker)
        assert end is None and set(page.uuids) | set(rest.uuids) == mine
        # No write record is left open by the claim.
        assert node_pages.share_page(db, arcs, limit=1)[0].as_of > page.as_of
    finally:
        db.dispose()


def test_a_claim_says_what_its_claimer_held_before_it(sql_url: str) -> None:
    """``held``: every node the claimer owned just before the claim, read in
    the claim's transaction, in its share or not; none of them is taken
    again, and with the nodes taken they are all it owns after."""
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        free = add_nodes(db, 200)
        kept = add_nodes(db, 30, owner="a1", prefix="kept")
        add_nodes(db, 20, owner="gone", prefix="gone")
        ring = Ring({"a1": 1.0, "a2": 1.0}, version=1)
        taken = share_claims.claim_arcs(
            db, "a1", ring.arcs("a1"), live_members={"a1", "a2"}, limit=10_000, held=True
        )
        assert taken.held is not None
        assert {o.node_uuid for o in taken.held} == set(kept)
        assert {o.epoch for o in taken.held} == {0} and not set(taken.uuids) & set(kept)
        mine = {n for n in free if ring.owner(n) == "a1"}
        assert mine <= set(taken.uuids)
        again = share_claims.claim_arcs(
            db, "a1", ring.arcs("a1"), live_members={"a1", "a2"}, limit=10_000, held=True
        )
        assert again.uuids == [] and again.held is not None
        assert {o.node_uuid for o in again.held} == set(kept) | set(taken.uuids)
        plain = share_claims.claim_arcs(db, "a1", [], live_members={"a1"}, limit=1)
        assert plain.held is None
    finally:
        db.dispose()


def test_a_whole_share_read_is_as_of_the_earliest_open_write(sql_url: str) -> None:
    """A read of a whole share takes its "as of" (in the page's own statement
    on PostgreSQL) from the writes still open: a page with nodes and an
    empty one alike start the next change read before such a write's rows."""
    db = Database(sql_url)
    try:
        migration.upgrade(db)
        add_nodes(db, 50)
        arcs = Ring({"a1": 1.0, "a2": 1.0}, version=1).arcs("a1")
        stamp = utcnow() - datetime.timedelta(seconds=30)
        with node_writes.record(db, stamp):
            page, _ = node_pages.share_page(db, arcs, limit=10)
            empty, _ = node_pages.share_page(db, arcs, limit=10, groups=["none-such"])
        assert len(page.uuids) == 10 and page.as_of == stamp
        assert empty.uuids == [] and empty.as_of == stamp
        after, _ = node_pages.share_page(db, arcs, limit=10)
        assert after.as_of > stamp  # the write ended
    finally:
        db.dispose()
