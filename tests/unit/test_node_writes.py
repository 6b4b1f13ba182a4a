# SPDX-License-Identifier: Apache-2.0
"""Long writes of node rows are recorded while they run, and no change read
misses them: an import or a share's claims that commit after a reader moved
past their stamp are read once they committed."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from conductor.db import bulk, node_pages, node_writes, share_claims
from conductor.db import nodes as db_nodes
from conductor.db.engine import Database
from conductor.db.models import NodeWriteModel, utcnow
from conductor.validation import validate_node_specs
from hashring.ring import Ring
from tests.dbutil import add_nodes, migrated
from tests.unit.test_scheduler import scheduler


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def _open_writes(db: Database) -> int:
    with db.read() as connection:
        return int(connection.execute(select(func.count()).select_from(NodeWriteModel)).scalar())


def _specs(count: int) -> Any:
    return validate_node_specs(
        [{"name": f"n{i}", "resource_class": "baremetal"} for i in range(count)]
    )


def _during(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, hook: Callable[[], None]
) -> None:
    """Run ``hook`` inside the write, after ``module.name`` wrote its rows."""
    original = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        hook()
        return result

    monkeypatch.setattr(module, name, wrapped)


def test_an_import_that_commits_after_a_refresh_passed_its_stamp_is_read(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No overlap at all: only the record keeps the refresh from moving past
    the import's stamp while the import has not committed yet."""
    sched = scheduler(db, refresh_overlap=0.0)
    sched.refresh()  # built, empty
    seen: list[int] = []

    def refresh_meanwhile() -> None:
        time.sleep(0.01)  # the clock moves past the rows' stamp
        seen.append(_open_writes(db))
        seen.append(sched.refresh())  # nothing committed yet

    _during(monkeypatch, bulk, "insert_rows", refresh_meanwhile)
    db_nodes.create_nodes(db, _specs(3))
    assert seen == [1, 0]
    assert sched.refresh() == 3  # was 0: the rows were stamped before that refresh
    assert _open_writes(db) == 0
    assert sched.refresh() == 0  # and the record gone, they are not read again


def test_claims_that_commit_after_a_change_read_passed_their_stamp_are_read(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's change read during a share's claims: its ``as_of`` is the
    claims' stamp, so its next read finds the claimed rows."""
    uuids = add_nodes(db, 6)
    arcs = Ring({"a1": 1.0}, version=1).arcs("a1")
    reads: list[node_pages.InventoryPage] = []

    def read_meanwhile() -> None:
        time.sleep(0.01)
        reads.append(node_pages.inventory_page(db, limit=100, changed_after=utcnow()))

    _during(monkeypatch, share_claims, "update_nodes_returning", read_meanwhile)
    claim = share_claims.claim_arcs(db, "a1", arcs, live_members={"a1"}, limit=100)
    assert sorted(claim.uuids) == sorted(uuids)
    assert claim.changed_at is not None
    stamp = datetime.datetime.fromisoformat(claim.changed_at)
    assert reads[0].uuids == [] and reads[0].as_of <= stamp
    after = node_pages.inventory_page(db, limit=100, changed_after=reads[0].as_of)
    assert sorted(after.uuids) == sorted(uuids)


def test_a_read_as_of_is_now_when_no_write_is_open(db: Database) -> None:
    before = utcnow()
    page = node_pages.inventory_page(db, limit=10)
    assert before <= page.as_of <= utcnow()
    with node_writes.recorded(db) as stamp:
        during = node_pages.share_page(db, [(-(1 << 63), (1 << 63) - 1)], limit=10)[0]
        assert during.as_of <= stamp
        assert node_writes.read_start(db) <= stamp
    assert node_pages.inventory_page(db, limit=10).as_of > stamp


def test_a_record_left_by_a_dead_conductor_holds_reads_back_only_until_it_expires(
    db: Database,
) -> None:
    old = utcnow() - node_writes.EXPIRY - datetime.timedelta(seconds=1)
    recent = utcnow() - datetime.timedelta(seconds=30)
    with db.writing() as connection:
        for stamp in (old, recent):
            connection.execute(
                insert(NodeWriteModel).values(stamp=stamp, expires_at=stamp + node_writes.EXPIRY)
            )
    assert node_writes.read_start(db) == recent


def test_the_record_goes_when_the_write_fails(db: Database) -> None:
    with pytest.raises(RuntimeError), node_writes.recorded(db):
        assert _open_writes(db) == 1
        raise RuntimeError("the write failed")
    assert _open_writes(db) == 0


def test_a_given_stamp_is_the_one_written_and_recorded(db: Database) -> None:
    given = utcnow() - datetime.timedelta(seconds=5)
    with node_writes.recorded(db, given) as stamp:
        assert stamp == given
        assert node_writes.read_start(db) == given


def test_a_claim_ends_its_record_in_its_own_transaction(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record goes when the claimed rows commit, not in a transaction
    after: until then another reader still starts before the claim's stamp."""
    add_nodes(db, 4)
    arcs = Ring({"a1": 1.0}, version=1).arcs("a1")
    seen: list[tuple[int, bool]] = []
    end = node_writes.OpenWrite.end

    def ending(write: node_writes.OpenWrite, connection: Any) -> None:
        end(write, connection)
        # Deleted in the claim's transaction, not committed yet.
        seen.append((_open_writes(db), node_writes.read_start(db) <= write.stamp))

    monkeypatch.setattr(node_writes.OpenWrite, "end", ending)
    claim = share_claims.claim_arcs(db, "a1", arcs, live_members={"a1"}, limit=100)
    assert len(claim.uuids) == 4
    assert seen == [(1, True)]
    assert _open_writes(db) == 0


def test_a_record_ended_in_a_transaction_that_rolled_back_is_deleted_on_the_way_out(
    db: Database,
) -> None:
    with (
        pytest.raises(RuntimeError),
        node_writes.record(db) as write,
        db.writing() as connection,
    ):
        write.end(connection)
        assert write.ended
        raise RuntimeError("the write failed")
    assert _open_writes(db) == 0
    with node_writes.record(db):  # never ended by the write
        assert _open_writes(db) == 1
    assert _open_writes(db) == 0
