# SPDX-License-Identifier: Apache-2.0
"""What a quiet fleet costs its conductor: change reads that find nothing,
and agents that slow their passes down while nothing changes."""

from __future__ import annotations

import datetime
import logging
import threading
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg
from sqlalchemy import event, update

from compute_agent import reconcile_loop
from compute_agent.ownership import ReconcileResult
from compute_agent.reconcile_loop import QuietPasses, Reconciler
from conductor.common.conf import compute_agent as compute_agent_conf
from conductor.db import node_pages
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow
from conductor.endpoints.agents import AgentsEndpoint
from conductor.fleet_view import FleetView
from hashring.membership import Member, MembershipView
from hashring.ring import Ring
from tests.dbutil import add_nodes, migrated

# -- change reads of an unchanged fleet --------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


@pytest.fixture
def statements(db: Database) -> list[str]:
    """The SQL statements the database runs from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    return seen


def _age(db: Database, hours: float = 1.0) -> None:
    with db.transaction() as session:
        session.execute(
            update(NodeModel).values(updated_at=utcnow() - datetime.timedelta(hours=hours))
        )


def test_a_change_read_of_an_unchanged_fleet_is_one_probe(
    db: Database, statements: list[str]
) -> None:
    uuids = add_nodes(db, 30, owner="a1")
    _age(db)
    arcs = Ring({"a1": 1.0, "a2": 1.0}, version=1).arcs("a1")
    since = utcnow() - datetime.timedelta(minutes=1)
    statements.clear()

    page, following = node_pages.share_page(db, arcs, limit=100, changed_after=since)
    assert (page.uuids, following) == ([], None)
    owned = node_pages.inventory_page(db, limit=100, owner="a1", changed_after=since)
    assert owned.uuids == []
    # One probe of the updated_at index each, not the share's arcs.
    assert len(statements) == 2
    assert all("ring_position" not in s for s in statements)

    # A row that changed is read, by both.
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == uuids[0]).values(updated_at=utcnow())
        )
    owned = node_pages.inventory_page(db, limit=100, owner="a1", changed_after=since)
    assert owned.uuids == [uuids[0]]
    in_share = node_pages.share_page(db, arcs, limit=100, changed_after=since)[0].uuids
    everywhere = node_pages.share_page(db, [(-(1 << 63), (1 << 63) - 1)], limit=100)[0].uuids
    assert uuids[0] in everywhere
    assert in_share == ([uuids[0]] if uuids[0] in _in_arcs(db, arcs) else [])


def _in_arcs(db: Database, arcs: Any) -> set[str]:
    return set(node_pages.share_page(db, arcs, limit=1000)[0].uuids)


def test_a_whole_read_is_not_probed(db: Database, statements: list[str]) -> None:
    uuids = add_nodes(db, 5)
    _age(db)
    statements.clear()
    assert sorted(node_pages.inventory_page(db, limit=100).uuids) == sorted(uuids)
    # The read, and where the next change read starts (the long writes open):
    # no probe of the changes.
    assert len(statements) == 2
    assert not any("updated_at >=" in s for s in statements)


# -- a quiet agent slows down -------------------------------------------------------------


def _view(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(h, 1, 1.0) for h in hosts}, excluded={}, ring_version=1
    )


QUIET = ReconcileResult(desired=5, held=5, claimed=0, released=0, refused=0, settled=True)


def test_two_quiet_passes_in_a_row_take_the_wait_to_the_quiet_interval() -> None:
    passes, view = QuietPasses(), _view("a1", "a2")
    delays = [passes.delay(5.0, 600.0, view=view, rows_read=0, result=QUIET) for _ in range(5)]
    # The first pass on a view is not quiet: nothing to compare it with; one
    # quiet pass may be a pause within a burst.
    assert delays == [5.0, 10.0, 600.0, 600.0, 600.0]


@pytest.mark.parametrize(
    "change",
    [
        {"rows_read": 3},
        {"result": None},
        {"result": ReconcileResult(5, 5, 1, 0, 0, converged=True, settled=False)},
        {"result": ReconcileResult(5, 5, 1, 0, 0, retry_in=1.0, settled=True)},
        {"result": ReconcileResult(5, 6, 0, 1, 0, settled=False)},
        {"result": ReconcileResult(5, 4, 0, 0, 1, settled=True)},
        {"result": ReconcileResult(5, 4, 0, 0, 0, converged=True, settled=False)},
        {"result": ReconcileResult(5, 5, 0, 0, 0, retry_in=2.0, settled=True)},
        {"result": ReconcileResult(5, 5, 0, 0, 0, retry_soon=True, settled=True)},
        {"result": ReconcileResult(5, 5, 0, 0, 0, lost=1, settled=True)},
        {"view": _view("a1", "a2", "a3")},
    ],
    ids=[
        "rows read",
        "postponed",
        "claimed, waits for a pin",
        "claimed, retry in",
        "released, one kept (busy)",
        "refused",
        "waits for a pin",
        "retry in",
        "retry soon",
        "lost",
        "new view",
    ],
)
def test_anything_but_a_quiet_pass_brings_the_interval_back(change: dict[str, Any]) -> None:
    passes, view = QuietPasses(), _view("a1", "a2")
    for _ in range(4):
        passes.delay(5.0, 40.0, view=view, rows_read=0, result=QUIET)
    call: dict[str, Any] = {"view": view, "rows_read": 0, "result": QUIET, **change}
    assert passes.delay(5.0, 40.0, **call) == 5.0
    # And it slows down again from there.
    after = call["view"]
    assert passes.delay(5.0, 40.0, view=after, rows_read=0, result=QUIET) == 10.0
    assert passes.delay(5.0, 40.0, view=after, rows_read=0, result=QUIET) == 40.0


@pytest.mark.parametrize(
    "settled",
    [
        ReconcileResult(5, 5, 5, 0, 0, converged=True, settled=True),
        ReconcileResult(5, 5, 0, 2, 0, converged=True, settled=True),
    ],
    ids=["took its whole share", "released what a joiner gets"],
)
def test_a_pass_that_settled_its_share_waits_the_quiet_interval(
    settled: ReconcileResult,
) -> None:
    """A cold start (the claims were all granted) or a peer's join (what it
    gets released), on a new view: no pass confirms it; the next comes at
    the quiet interval (or at a hint, or a membership change), and stays
    there while nothing changes."""
    passes = QuietPasses()
    assert passes.delay(5.0, 600.0, view=_view("a1", "a2"), rows_read=9, result=settled) == 600.0
    assert passes.delay(5.0, 600.0, view=_view("a1", "a2"), rows_read=0, result=QUIET) == 600.0
    # Then anything read brings the interval back.
    assert passes.delay(5.0, 600.0, view=_view("a1", "a2"), rows_read=1, result=QUIET) == 5.0
    # So does a pass that claimed or released first and did not settle.
    refused = ReconcileResult(5, 4, 0, 0, 1, settled=False)
    assert passes.delay(5.0, 600.0, view=_view("a1"), rows_read=0, result=refused, acted=3) == 5.0
    # One that did, on a new view, waits the quiet interval.
    assert passes.delay(5.0, 600.0, view=_view("a2"), rows_read=0, result=QUIET, acted=3) == 600.0
    # Some refused (a peer still holds them): not quiet.
    passes = QuietPasses()
    partly = ReconcileResult(5, 3, 3, 0, 2, settled=False)
    assert passes.delay(5.0, 600.0, view=_view("a1", "a2"), rows_read=9, result=partly) == 5.0


def test_a_quiet_interval_at_or_below_the_interval_never_slows_down() -> None:
    passes, view = QuietPasses(), _view("a1")
    assert {passes.delay(1.0, 1.0, view=view, rows_read=0, result=QUIET) for _ in range(5)} == {1.0}
    assert passes.delay(5.0, 0.5, view=view, rows_read=0, result=QUIET) == 5.0


class _Wake:
    """The loop's wake event: records each wait, and stops the loop after ``passes``."""

    def __init__(self, stopped: threading.Event, passes: int, clock: list[float]) -> None:
        self.stopped, self.passes, self.waits, self.clock = stopped, passes, [], clock

    #: Waits (by index) that a wake-up ends after 1 s (a state change).
    early: frozenset[int] = frozenset()

    def wait(self, delay: float) -> bool:
        woken = len(self.waits) in self.early
        self.clock[0] += 1.0 if woken else delay  # else the wait times out
        self.waits.append(delay)
        if woken:
            return True
        if len(self.waits) > self.passes:
            self.stopped.set()
        return False

    def clear(self) -> None:
        pass

    def set(self) -> None:
        pass


def _loop(
    monkeypatch: pytest.MonkeyPatch,
    results: list[tuple[int, ReconcileResult | None]],
    early: frozenset[int] = frozenset(),
    suspended: Sequence[bool] = (),
    first_claims: Sequence[int | None] = (),
    first_releases: Sequence[int] = (),
    read_ages: Sequence[float] = (),
) -> list[float]:
    """The waits of a Reconciler whose passes read and end as ``results``
    (and claim and release first as ``first_claims`` and
    ``first_releases`` say, then 0)."""
    clock = [1000.0]
    monkeypatch.setattr(reconcile_loop, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    view = _view("a1", "a2")
    reads = iter(results)
    outcome: list[ReconcileResult | None] = []

    def refresh(deep: Any = None, view: Any = None) -> int:
        rows, result = next(reads)
        outcome[:] = [result]
        return rows

    agent = Reconciler()
    agent.conf = cfg.ConfigOpts()
    agent.conf.register_opts(compute_agent_conf.opts, compute_agent_conf.group)
    agent.conf([])
    agent.conf.set_override("quiet_reconcile_interval", 20.0, "compute_agent")
    agent.host = "a1"
    acts = iter(suspended)
    claims = iter(first_claims)
    releases = iter(first_releases)
    ages = iter(read_ages)
    agent.membership = types.SimpleNamespace(
        superseded_by=None, view=view, can_act=lambda: not next(acts, False), join_generation=1
    )
    agent.ownership = types.SimpleNamespace(  # type: ignore[assignment]
        reads_by_share=True,
        release_first=lambda _view: next(releases, 0),
        read_age=lambda: next(ages, 0.0),
        claim_first=lambda _view: next(claims, 0),
        refresh_inventory=refresh,
        reconcile=lambda _view: outcome[0],
        validated_generation=-1,
        expect_owner_changes=lambda: None,
    )
    agent.placement = None
    agent._conductor = types.SimpleNamespace()  # type: ignore[assignment]
    agent._stopped = threading.Event()
    wake = _Wake(agent._stopped, len(results) + len(early), clock)
    wake.early = early
    agent._wake = wake  # type: ignore[assignment]
    agent._init_reconciler()
    agent._reconcile_loop()
    return wake.waits


def test_the_reconcile_loop_slows_down_while_quiet_and_not_after_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    busy = ReconcileResult(5, 5, 2, 0, 0, settled=True)
    waits = _loop(monkeypatch, [(0, QUIET)] * 4 + [(3, QUIET), (0, busy), (0, QUIET), (0, QUIET)])
    # The wait before each pass: 5 s at first, 10 s after a quiet pass, the
    # quiet interval (20 s) after two; rows read bring it back to 5 s; a pass
    # that took its whole share counts as two quiet passes.
    assert waits == [5.0, 5.0, 10.0, 20.0, 20.0, 5.0, 20.0, 20.0, 20.0]


def test_a_pass_that_released_a_joiners_share_first_waits_the_quiet_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer joined: the pass released what the new view gives it before
    its read, read nothing and settled; no pass confirms it (at a join of
    the 101st agent each of the 100 others confirmed it twice, two
    conductor calls each).  A release that did not settle does not count."""
    waits = _loop(monkeypatch, [(0, QUIET)] * 3, first_releases=[9])
    assert waits == [5.0, 20.0, 20.0, 20.0]
    unsettled = ReconcileResult(5, 6, 0, 0, 0, settled=False)
    waits = _loop(monkeypatch, [(0, unsettled), (0, QUIET), (0, QUIET)], first_releases=[9])
    assert waits == [5.0, 5.0, 10.0, 20.0]


def test_a_pass_that_read_nothing_brings_the_next_read_within_the_quiet_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer joined while the agent was quiet: the pass released its arcs
    and left the read for later (nothing it kept is new).  The next pass
    comes no later than the quiet interval (20 s) after the last read (17 s
    ago: in 3 s, at least the 5 s interval; 2 s ago: in 18 s)."""
    waits = _loop(monkeypatch, [(0, QUIET)] * 2, first_releases=[9], read_ages=[17.0])
    assert waits == [5.0, 5.0, 20.0]
    waits = _loop(monkeypatch, [(0, QUIET)] * 2, first_releases=[9], read_ages=[2.0])
    assert waits == [5.0, 18.0, 20.0]


def test_a_broker_reconnection_makes_the_next_pass_come_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a hint does: a hint cast while the connection was down is lost."""
    agent = Reconciler()
    agent.conf = cfg.ConfigOpts()
    agent.conf.register_opts(compute_agent_conf.opts, compute_agent_conf.group)
    agent.conf([])
    agent.host = "a1"
    agent._wake = threading.Event()
    agent._init_reconciler()
    agent.broker_reconnected()
    assert agent._wake.is_set() and agent._hinted


def test_a_wake_up_that_changed_nothing_keeps_the_quiet_wait() -> None:
    passes, view = QuietPasses(), _view("a1", "a2")
    assert not passes.unchanged(view, 1)  # no pass yet
    passes.delay(5.0, 40.0, view=view, rows_read=0, result=QUIET, generation=1)
    assert not passes.unchanged(view, 1)  # one pass: nothing to compare it with
    passes.delay(5.0, 40.0, view=view, rows_read=0, result=QUIET, generation=1)
    assert passes.unchanged(view, 1)
    # A new view, or a re-join (a new generation): the pass runs now.
    assert not passes.unchanged(_view("a1"), 1)
    assert not passes.unchanged(view, 2)
    passes.delay(5.0, 40.0, view=view, rows_read=2, result=QUIET, generation=1)
    assert not passes.unchanged(view, 1)  # the last pass read something


def test_the_reply_says_unchanged_only_when_nothing_changed(db: Database) -> None:
    add_nodes(db, 10)
    _age(db)
    fleet = FleetView(db)
    endpoint = AgentsEndpoint(db, fleet, lambda: 3600.0, restart_grace=lambda: 60.0)
    ring = {"version": 1, "members": {"a1": 1.0, "a2": 1.0}}
    since = (utcnow() - datetime.timedelta(minutes=1)).isoformat()
    share = {"ring": ring, "member": "a1", "columns": True}
    quiet = endpoint.list_node_uuids({}, since=since, **share)
    assert quiet["unchanged"] is True and quiet["uuids"] == []
    assert endpoint.list_node_uuids({}, since=since, owner="a1")["unchanged"] is True
    # A whole read, or one after a change: no such key (older agents never see it).
    assert "unchanged" not in endpoint.list_node_uuids({}, **share)
    add_nodes(db, 1)
    assert "unchanged" not in endpoint.list_node_uuids({}, since=since, **share)


def test_a_wake_up_that_changed_nothing_reads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Woken 1 s into the 20 s wait (SUSPENDED, then CONNECTED again): the
    # loop waits the 19 s left, and runs no pass meanwhile (one pass per
    # result: a pass more would run out of them).
    waits = _loop(monkeypatch, [(0, QUIET)] * 4, early=frozenset({3}))
    assert waits == [5.0, 5.0, 10.0, 20.0, 19.0, 20.0]


def test_a_suspension_does_not_cut_a_quiet_wait_short(monkeypatch: pytest.MonkeyPatch) -> None:
    # The membership is SUSPENDED at the fourth wake-up (1 s into the 20 s
    # wait), CONNECTED again after: no pass until the quiet wait is over.
    suspended = [False, False, False, True]
    waits = _loop(monkeypatch, [(0, QUIET)] * 4, early=frozenset({3}), suspended=suspended)
    assert waits == [5.0, 5.0, 10.0, 20.0, 19.0, 20.0]


@pytest.mark.parametrize("held", [0, 5])
def test_work_is_resumed_once_per_validation_and_only_with_nodes_held(held: int) -> None:
    """In-flight work is on nodes the agent held when it (re)validated: an
    agent that held none (a cold start) has nothing to have routed again."""
    calls: list[str] = []
    agent = Reconciler()
    agent.host = "a1"
    agent._init_reconciler()
    agent.ownership = types.SimpleNamespace(  # type: ignore[assignment]
        validated_generation=1, held_when_validated=held
    )
    agent._conductor = types.SimpleNamespace(  # type: ignore[assignment]
        can_send_version=lambda version: True,
        resume_work=lambda host: calls.append(host) or {"builds": 0, "teardowns": 0},
    )
    agent._resume_work()
    agent._resume_work()  # the same validation: not again
    assert calls == (["a1"] if held else [])


def test_a_pass_that_could_not_claim_first_where_a_peer_left_comes_back_before_reading(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The conductors had not seen the peer leave: the pass ends there, and
    the next comes in half a second to claim again before its reads."""
    caplog.set_level(logging.DEBUG)
    waits = _loop(monkeypatch, [(0, QUIET)] * 3, first_claims=[None, None])
    # Two passes cut short (no read: the three passes' reads all come after).
    assert waits == [5.0, 0.5, 0.5, 5.0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # no failure
