# SPDX-License-Identifier: Apache-2.0
"""Invariant 12 on real PostgreSQL and MariaDB: a project's quota is never
exceeded, however builds race across conductors.

Two conductors are two ``Database`` engines (their own connection pools)
serving the real ``InstancesEndpoint``; 60 builds start at once from 60
threads, alternating between them, against limits of 10 of projects whose
lock rows do not exist yet (so their creation races too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

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


def test_racing_builds_never_exceed_a_quota(sql_url: str) -> None:
    """60 builds at once, alternating two engines: 20 of p1 (instances 10),
    20 of p3 (resource_class:baremetal-gold 10), 12 of 3 instances of p4
    (instances 10: at most 3 fit, never 4), 8 of p2 (unlimited)."""
    first = migrated(sql_url)
    second = Database(sql_url)
    try:
        inventory = InventoryEndpoint(first, FleetView(first))
        for name, resource_class in (("small", "baremetal"), ("gold", "baremetal-gold")):
            inventory.create_flavor({}, flavor={"name": name, "resource_class": resource_class})
        quotas.set_limits(first, "p1", {"instances": LIMIT})
        quotas.set_limits(first, "p3", {"resource_class:baremetal-gold": LIMIT})
        quotas.set_limits(first, "p4", {"instances": LIMIT})
        conductors = [InstancesEndpoint(db, _Queue()) for db in (first, second)]

        def build(project: str, flavor: str, count: int = 1) -> Callable[[Any], Any]:
            request = {"flavor": flavor, "count": count}
            return lambda c: c.build_instances(_member(project), request=request)

        builds = (
            [build("p1", "small")] * 20
            + [build("p3", "gold")] * 20
            + [build("p4", "small", 3)] * 12
            + [build("p2", "small")] * 8
        )
        # Interleaved, so that every project's builds race on both engines.
        order = [builds[i] for i in sorted(range(len(builds)), key=lambda i: (i * 7) % 60)]
        stored, refused = _race(conductors, order)
        counts = {p: _count(first, p) for p in ("p1", "p2", "p3", "p4")}
        assert counts == {"p1": LIMIT, "p2": 8, "p3": LIMIT, "p4": 9}
        assert (stored, refused) == (10 + 10 + 3 + 8, 60 - 31)
        # The usage a quota shows is what is stored.
        _own, used = quotas.get_limits(second, "p3")
        assert used["resource_class:baremetal-gold"] == LIMIT
    finally:
        second.dispose()
        first.dispose()
