"""Invariant 12 on real PostgreSQL and MariaDB: a project's quota is never
exceeded, however builds race across conductors.

Two conductors are two ``Database`` engines (their own connection pools)
serving the real ``InstancesEndpoint``; 50 builds start at once from 50
threads, alternating between them, against a limit of 10 on a project whose
lock row does not exist yet (so its creation races too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import func, select

from conductor.common.exception import QuotaExceeded
from conductor.common.objects import Flavor
from conductor.db import quotas
from conductor.db.engine import Database
from conductor.db.models import InstanceModel
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import migrated

BUILDS = 50
LIMIT = 10


class _Queue:
    def submit(self, instance_uuids: list[str]) -> None: ...

    def submit_stored(self, stored: Any, flavor: Flavor) -> None: ...

    def delete(self, instance_uuid: str) -> None: ...


def _member(project: str) -> dict[str, Any]:
    return {"project_id": project, "user_id": "u", "roles": ["member"], "is_admin": False}


def _race(
    conductors: list[InstancesEndpoint], builds: list[Callable[[InstancesEndpoint], Any]]
) -> tuple[int, int]:
    """Run every build at once, alternating conductors: (stored, refused)."""
    start = threading.Barrier(len(builds))

    def one(index: int) -> bool:
        start.wait()
        try:
            builds[index](conductors[index % len(conductors)])
        except QuotaExceeded:
            return False
        return True

    with ThreadPoolExecutor(len(builds)) as pool:
        outcomes = list(pool.map(one, range(len(builds))))
    return outcomes.count(True), outcomes.count(False)


def _count(db: Database, project: str) -> int:
    with db.read() as connection:
        return int(
            connection.execute(
                select(func.count())
                .select_from(InstanceModel)
                .where(InstanceModel.project_id == project)
            ).scalar_one()
        )


@pytest.mark.parametrize("resource", ["instances", "resource_class:baremetal-gold"])
def test_racing_builds_never_exceed_a_quota(sql_url: str, resource: str) -> None:
    first = migrated(sql_url)
    second = Database(sql_url)
    try:
        InventoryEndpoint(first, FleetView(first)).create_flavor(
            {}, flavor={"name": "gold", "resource_class": "baremetal-gold"}
        )
        quotas.set_limits(first, "p1", {resource: LIMIT})
        conductors = [InstancesEndpoint(db, _Queue()) for db in (first, second)]

        def build(project: str) -> Callable[[InstancesEndpoint], Any]:
            return lambda c: c.build_instances(_member(project), request={"flavor": "gold"})

        # p2, unlimited, builds among p1's: never refused, never counted for p1.
        builds = [build("p2" if i % 5 == 4 else "p1") for i in range(BUILDS)]
        stored, refused = _race(conductors, builds)
        assert _count(first, "p1") == LIMIT
        assert _count(first, "p2") == BUILDS // 5
        assert (stored, refused) == (LIMIT + BUILDS // 5, BUILDS - BUILDS // 5 - LIMIT)
        # The count the quota shows is the one stored.
        _own, used = quotas.get_limits(second, "p1")
        assert used[resource] == LIMIT
    finally:
        second.dispose()
        first.dispose()


def test_a_multi_instance_build_is_refused_whole_at_the_edge(sql_url: str) -> None:
    """Builds of 3 racing for a limit of 10: at most 3 of them fit (9), never 12."""
    first = migrated(sql_url)
    second = Database(sql_url)
    try:
        InventoryEndpoint(first, FleetView(first)).create_flavor(
            {}, flavor={"name": "gold", "resource_class": "baremetal-gold"}
        )
        quotas.set_limits(first, "p1", {"instances": LIMIT})
        conductors = [InstancesEndpoint(db, _Queue()) for db in (first, second)]
        request = {"flavor": "gold", "count": 3}
        builds = [lambda c: c.build_instances(_member("p1"), request=request)] * 12
        stored, refused = _race(conductors, builds)
        assert (stored, refused) == (3, 9)
        assert _count(first, "p1") == 9
    finally:
        second.dispose()
        first.dispose()
