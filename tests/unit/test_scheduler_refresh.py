# SPDX-License-Identifier: Apache-2.0
"""Where the scheduler's next incremental refresh starts: never after a change
it may have missed, and not back over what a lagging read already read."""

from __future__ import annotations

import datetime
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from conductor.db import node_pages
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow
from conductor.scheduler import source
from conductor.scheduler.source import ChangedNodes, RefreshPosition
from tests.dbutil import migrated
from tests.unit.test_scheduler import insert_nodes, scheduler

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
OVERLAP = datetime.timedelta(seconds=2)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def page(read_at: float, last: float | None, *, full: bool) -> ChangedNodes:
    return ChangedNodes(at(read_at), [], None if last is None else at(last), full)


def test_a_read_that_keeps_up_starts_the_next_one_overlap_before_it() -> None:
    position = RefreshPosition(at(0), OVERLAP)
    position.read(page(10, 9.5, full=False))
    assert position.next == at(8)  # the refresh's start less the overlap, as before


def test_pages_read_long_after_their_changes_are_not_read_again() -> None:
    """A burst read page after page, each page's changes older than the
    overlap when read: only from where the read caught up."""
    position = RefreshPosition(at(0), OVERLAP)
    position.read(page(10, 3, full=True))  # changes 0..3, read at 10: all committed
    position.read(page(11, 7, full=True))
    position.read(page(12, 11.5, full=True))  # caught up: 10..11.5 may miss a late commit
    position.read(page(13, 12.8, full=False))
    assert position.next == at(10)  # not at(8): 0..10 is read once


def test_a_page_whose_changes_may_still_commit_holds_the_next_start_back() -> None:
    position = RefreshPosition(at(0), OVERLAP)
    position.read(page(5, 4.5, full=True))  # 3..4.5 may still see a late commit
    position.read(page(30, 29, full=False))
    assert position.next == at(3)


def test_an_empty_read_starts_the_next_one_overlap_before_it() -> None:
    position = RefreshPosition(at(7), OVERLAP)
    position.read(page(10, None, full=False))
    assert position.next == at(8)
    position = RefreshPosition(at(9), OVERLAP)
    position.read(page(10, None, full=False))
    assert position.next == at(9)  # never after where this read began


def test_a_refresh_does_not_read_again_what_its_pages_read_long_after_the_change(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of one row, each read 30 s after its change (a lagging read):
    the next refresh reads only what changed since, including a late commit
    within the overlap of the last page."""
    nodes = insert_nodes(db, 4)
    sched = scheduler(db, refresh_overlap=2.0)
    sched.refresh()  # built
    now = utcnow()
    for offset, uuid in enumerate(nodes[:3], start=1):
        stamp = now + datetime.timedelta(seconds=offset)
        with db.transaction() as session:
            session.execute(
                update(NodeModel).where(NodeModel.uuid == uuid).values(updated_at=stamp)
            )
    monkeypatch.setattr(source, "changed_pages", functools.partial(source.changed_pages, page=1))
    later = now + datetime.timedelta(seconds=30)
    monkeypatch.setattr(node_pages, "utcnow", lambda: later)
    assert sched.refresh() == 4  # the three, and the fourth's insert (within the overlap)
    assert sched.refresh() == 0  # was 4: from the first refresh's start less the overlap
    # A transaction stamped within the overlap of the last read, committed after it.
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == nodes[3])
            .values(updated_at=later - datetime.timedelta(seconds=1))
        )
    assert sched.refresh() == 1


def test_rows_read_again_unchanged_within_the_overlap_are_not_applied_again(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each refresh reads back the overlap; of what it finds there, only the
    rows that changed since the previous refresh are decoded and applied."""
    nodes = insert_nodes(db, 3)
    sched = scheduler(db, refresh_overlap=3600.0)  # every refresh reads everything again
    sched.refresh()  # built
    decoded: list[int] = []
    decode = source.NodeDecoder.decode

    def counting(self: source.NodeDecoder, row: Any) -> Any:
        decoded.append(1)
        return decode(self, row)

    monkeypatch.setattr(source.NodeDecoder, "decode", counting)
    assert sched.refresh() == 3  # the inserts: read within the overlap of the build
    assert sched.refresh() == 0  # was 3: the same versions again
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == nodes[1])
            .values(updated_at=utcnow(), maintenance=True)
        )
    assert sched.refresh() == 1
    assert len(decoded) == 4
    assert (sched.stats()["nodes"], sched.stats()["free"]) == (3, 2)


def _stamp_each(db: Database, nodes: list[str]) -> dict[str, datetime.datetime]:
    """Give each node its own change time, in order; uuid -> it."""
    stamps = {uuid: T0 + datetime.timedelta(seconds=i) for i, uuid in enumerate(nodes)}
    with db.transaction() as session:
        for uuid, stamp in stamps.items():
            session.execute(
                update(NodeModel).where(NodeModel.uuid == uuid).values(updated_at=stamp)
            )
    return stamps


def test_pages_of_mostly_known_rows_fetch_only_the_rows_not_known(db: Database) -> None:
    """The rows a refresh has (``known``) are listed by version and left
    out; the others are fetched whole, each once, and the pages' markers
    and ends are those of every row."""
    nodes = insert_nodes(db, 12)
    stamps = _stamp_each(db, nodes)
    unknown = {nodes[2], nodes[7], nodes[11]}
    changed_again = nodes[5]  # a version the caller does not have
    known = {uuid: at for uuid, at in stamps.items() if uuid not in unknown}
    known[changed_again] = T0 - datetime.timedelta(seconds=1)
    pages = list(node_pages.changed_index_rows(db, T0, page=4, known=known))
    assert [len(p.rows) for p in pages] == [1, 2, 1, 0]
    assert {row[1] for p in pages for row in p.rows} == unknown | {changed_again}
    assert [p.last_changed for p in pages] == [
        stamps[nodes[3]],
        stamps[nodes[7]],
        stamps[nodes[11]],
        None,
    ]
    assert [p.full for p in pages] == [True, True, True, False]
    assert all(row[15] == stamps[row[1]] for p in pages for row in p.rows)  # whole rows


def test_pages_switch_to_whole_rows_when_most_are_new(db: Database) -> None:
    nodes = insert_nodes(db, 12)
    stamps = _stamp_each(db, nodes)
    known = {uuid: stamps[uuid] for uuid in nodes[:4]}  # the first page's, then none
    pages = list(node_pages.changed_index_rows(db, T0, page=4, known=known))
    # The first page by versions (all known: none fetched), then whole rows again.
    assert [len(p.rows) for p in pages] == [0, 4, 4, 0]
    assert [row[1] for p in pages for row in p.rows] == nodes[4:]
    without = list(node_pages.changed_index_rows(db, T0, page=4))
    assert [len(p.rows) for p in without] == [4, 4, 4, 0]


def test_each_read_of_the_index_is_observed_with_its_rows_and_cpu(db: Database) -> None:
    """What the conductor's metrics count: a rebuild of every node, then
    refreshes of the rows changed since (none when nothing changed)."""
    reads: list[tuple[str, int, float]] = []
    uuids = insert_nodes(db, 5)
    chooser = scheduler(db, refresh_overlap=0.0, observe_read=lambda *read: reads.append(read))
    assert chooser.refresh() == 5  # never built: a rebuild
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid.in_(uuids[:2]))
            .values(maintenance=True, updated_at=utcnow())
        )
    chooser.refresh()
    assert reads[0][:2] == ("rebuild", 5)
    refresh = reads[1:]
    assert {read for read, _rows, _cpu in refresh} == {"refresh"}
    assert sum(rows for _read, rows, _cpu in refresh) == 2
    # Each read's own CPU: a read of the database and the index's update take some.
    assert reads[0][2] > 0 and sum(cpu for _read, _rows, cpu in refresh) > 0
    chooser.resync()
    assert reads[-1][:2] == ("rebuild", 5)


def test_a_refresh_is_observed_page_by_page(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A refresh through a burst of changes is counted as each page is
    applied, not once at its end: whoever reads the counters meanwhile (a
    benchmark's step ending) sees what was done by then."""
    uuids = insert_nodes(db, 7)
    chooser = scheduler(db, refresh_overlap=0.0)
    chooser.refresh()
    with db.transaction() as session:
        session.execute(update(NodeModel).values(maintenance=True, updated_at=utcnow()))
    monkeypatch.setattr(source, "changed_pages", functools.partial(source.changed_pages, page=3))
    reads: list[tuple[str, int]] = []
    chooser._observe_read = lambda read, rows, _cpu: reads.append((read, rows))
    assert chooser.refresh() == len(uuids)
    rows = [rows for read, rows in reads if read == "refresh"]
    assert sum(rows) == 7 and [r for r in rows if r] == [3, 3, 1]
