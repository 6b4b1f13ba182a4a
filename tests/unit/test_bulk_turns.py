# SPDX-License-Identifier: Apache-2.0
"""A conductor runs a bounded number of inventory reads and share claims at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conductor.db import node_pages, share_claims
from conductor.db.engine import Database
from conductor.db.models import utcnow
from conductor.endpoints.agents import AgentsEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import migrated

RING = {"version": 1, "members": {"a1": 1.0, "a2": 1.0}}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


class _Overlap:
    """Stands in for a read: counts how many run at once, each for a while."""

    def __init__(self, result: Callable[[], Any]) -> None:
        self.running = 0
        self.most = 0
        self.calls = 0
        self._lock = threading.Lock()
        self._result = result

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        with self._lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        time.sleep(0.05)  # long enough for every caller to be waiting meanwhile
        with self._lock:
            self.running -= 1
        return self._result()


def _side_by_side(call: Callable[[], Any], count: int) -> None:
    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)


def test_share_reads_take_turns(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    read = _Overlap(lambda: (node_pages.InventoryPage(utcnow(), [], [], [], [], []), None))
    monkeypatch.setattr(node_pages, "share_page", read)
    endpoint = AgentsEndpoint(db, FleetView(db), lambda: 3600.0, bulk_calls_at_once=2)
    _side_by_side(lambda: endpoint.list_node_uuids({}, ring=RING, member="a1"), 8)
    assert (read.calls, read.most) == (8, 2)


def test_share_claims_take_turns(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    claim = _Overlap(lambda: share_claims.ArcClaim([], [], [], None, False))
    monkeypatch.setattr(share_claims, "claim_arcs", claim)
    fleet = FleetView(db)
    monkeypatch.setattr(fleet, "live_members", lambda: {"a1", "a2"})
    endpoint = AgentsEndpoint(db, fleet, lambda: 3600.0, bulk_calls_at_once=3)
    _side_by_side(lambda: endpoint.claim_share({}, host="a1", ring=RING), 9)
    assert (claim.calls, claim.most) == (9, 3)


def test_a_claim_does_not_wait_for_reads_holding_every_turn(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims have turns of their own: after a kill -9, the survivors'
    claims must not queue behind the reads the same view change sent."""
    reading = threading.Event()
    release = threading.Event()
    blocked = [0]

    def slow_read(*_args: Any, **_kwargs: Any) -> Any:
        blocked[0] += 1
        if blocked[0] >= 2:
            reading.set()
        release.wait(10)
        return node_pages.InventoryPage(utcnow(), [], [], [], [], []), None

    monkeypatch.setattr(node_pages, "share_page", slow_read)
    claim = _Overlap(lambda: share_claims.ArcClaim([], [], [], None, False))
    monkeypatch.setattr(share_claims, "claim_arcs", claim)
    fleet = FleetView(db)
    monkeypatch.setattr(fleet, "live_members", lambda: {"a1", "a2"})
    endpoint = AgentsEndpoint(db, fleet, lambda: 3600.0, bulk_calls_at_once=2)
    readers = [
        threading.Thread(target=lambda: endpoint.list_node_uuids({}, ring=RING, member="a1"))
        for _ in range(2)
    ]
    for reader in readers:
        reader.start()
    try:
        assert reading.wait(10)  # both read turns taken
        claimer = threading.Thread(target=lambda: endpoint.claim_share({}, host="a1", ring=RING))
        claimer.start()
        claimer.join(5)
        assert not claimer.is_alive() and claim.calls == 1
    finally:
        release.set()
        for reader in readers:
            reader.join(10)
