# SPDX-License-Identifier: Apache-2.0
"""Two scheduler processes ("conductors") allocating from one PostgreSQL, or MariaDB, at once.

Each process has its own index and several threads; the indexes never agree
(one of the runs never refreshes), so the processes collide on nodes all the
time, and the compare-and-swap must leave every node with at most one
instance (invariant 7).
"""

from __future__ import annotations

import multiprocessing
import threading
import uuid as uuidlib
from typing import Any

import pytest
from sqlalchemy import func, select

from conductor.common.exception import NoValidNode
from conductor.common.objects import Flavor
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel
from conductor.scheduler.scheduler import Scheduler
from tests.dbutil import add_nodes, migrated

AGENTS = ("agent-1", "agent-2", "agent-3")
FLAVOR = Flavor(name="bm", resource_class="baremetal")
THREADS = 4


def _conductor(
    url: str, instances: list[str], refresh_interval: float, barrier: Any, results: Any
) -> None:
    db = Database(url)
    scheduler = Scheduler(db, refresh_interval=refresh_interval)
    scheduler.resync()
    placed: list[tuple[str, str]] = []
    refused = 0
    errors: list[str] = []
    lock = threading.Lock()

    def work(mine: list[str]) -> None:
        nonlocal refused
        for instance in mine:
            try:
                node, ownership = scheduler.select_and_allocate(
                    FLAVOR, instance, live_members=AGENTS
                )
            except NoValidNode:
                with lock:
                    refused += 1
                continue
            except Exception as exc:  # reported to the test
                with lock:
                    errors.append(repr(exc))
                return
            with lock:
                if ownership.owner != node.owner or ownership.node_uuid != node.uuid:
                    errors.append(f"node {node} does not match {ownership}")
                placed.append((node.uuid, instance))

    threads = [threading.Thread(target=work, args=(instances[t::THREADS],)) for t in range(THREADS)]
    barrier.wait()  # both conductors start at the same moment
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    db.dispose()
    results.put((placed, refused, errors, scheduler.lost_races))


@pytest.mark.parametrize("refresh_interval", [3600.0, 0.05], ids=["stale", "refreshing"])
def test_two_conductor_processes_never_double_allocate(
    sql_url: str, refresh_interval: float
) -> None:
    db = migrated(sql_url)
    try:
        for agent in AGENTS:
            add_nodes(db, 60, owner=agent)
        instances = [str(uuidlib.uuid4()) for _ in range(240)]
        with db.transaction() as session:
            session.add_all(
                InstanceModel(uuid=u, name=f"vm-{u[:8]}", flavor="bm", vm_state="building")
                for u in instances
            )
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(2), ctx.Queue()
        conductors = [
            ctx.Process(
                target=_conductor,
                args=(sql_url, instances[i::2], refresh_interval, barrier, results),
            )
            for i in range(2)
        ]
        for conductor in conductors:
            conductor.start()
        collected = [results.get(timeout=180) for _ in conductors]
        for conductor in conductors:
            conductor.join(30)
            assert conductor.exitcode == 0

        placed = [pair for result in collected for pair in result[0]]
        assert [error for result in collected for error in result[2]] == []
        assert len(placed) == 180  # every node once ...
        assert len({node for node, _ in placed}) == 180  # ... and no node twice
        assert sum(result[1] for result in collected) == 60  # the rest: no valid node
        if refresh_interval > 60:
            assert sum(result[3] for result in collected) > 0  # they did collide

        with db.transaction() as session:
            doubles = session.execute(
                select(InstanceModel.node_uuid)
                .where(InstanceModel.node_uuid.is_not(None))
                .group_by(InstanceModel.node_uuid)
                .having(func.count() > 1)
            ).all()
            hosting = {
                row[0]: row[1]
                for row in session.execute(
                    select(NodeModel.uuid, NodeModel.instance_uuid).where(
                        NodeModel.instance_uuid.is_not(None)
                    )
                )
            }
        assert doubles == []
        assert hosting == dict(placed)
    finally:
        db.dispose()
