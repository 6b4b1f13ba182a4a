# SPDX-License-Identifier: Apache-2.0
"""Allocation behaviour, run on SQLite (unit) and PostgreSQL and MariaDB (functional).

Each function takes a migrated :class:`Database` and asserts one rule of
conductor.db.allocations: one instance per node, and every report fenced by
the reporting agent's exact ownership.
"""

from __future__ import annotations

import uuid as uuidlib

from sqlalchemy import select

from conductor.db import allocations
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel
from conductor.db.ownership import Fence
from conductor.scheduler import source
from tests.dbutil import add_nodes

OWNER = "Agent-1"
# Equal to OWNER under MySQL's and MariaDB's default collations.
TWINS = ("agent-1", "Agent-1 ")


def _building(db: Database, count: int = 1, vm_state: str = "building") -> list[str]:
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    with db.transaction() as session:
        session.add_all(
            InstanceModel(uuid=u, name=f"vm-{u[:8]}", flavor="bm", vm_state=vm_state) for u in uuids
        )
    return uuids


def _states(db: Database, node: str, instance: str) -> tuple[tuple[object, ...], ...]:
    with db.read() as connection:
        node_row = connection.execute(
            select(NodeModel.provision_state, NodeModel.instance_uuid).where(NodeModel.uuid == node)
        ).one()
        instance_row = connection.execute(
            select(
                InstanceModel.vm_state,
                InstanceModel.node_uuid,
                InstanceModel.host,
                InstanceModel.attempts,
                InstanceModel.tried_nodes,
            ).where(InstanceModel.uuid == instance)
        ).one()
    return tuple(node_row), tuple(instance_row)


def one_instance_per_node(db: Database) -> None:
    node = add_nodes(db, 1, owner=OWNER)[0]
    first, second = _building(db, 2)
    taken = allocations.allocate(db, node, first)
    assert taken is not None and (taken.owner, taken.epoch) == (OWNER, 0)
    assert allocations.allocate(db, node, second) is None
    assert _states(db, node, first) == (
        ("deploying", first),
        ("building", node, OWNER, 0, []),
    )


def a_report_counts_only_under_the_exact_owner(db: Database) -> None:
    node = add_nodes(db, 1, owner=OWNER)[0]
    instance = _building(db)[0]
    assert allocations.allocate(db, node, instance) is not None
    for twin in TWINS:
        assert not allocations.complete(db, node, instance, fence=Fence(twin, 0))
        assert (
            allocations.fail_attempt(
                db, node, instance, "boom", node_clean=True, fence=Fence(twin, 0), max_attempts=3
            )
            is None
        )
        assert not allocations.release(db, node, instance, fence=Fence(twin, 0))
    assert _states(db, node, instance)[0] == ("deploying", instance)
    assert allocations.complete(db, node, instance, fence=Fence(OWNER, 0))
    assert _states(db, node, instance) == (
        ("active", instance),
        ("active", node, OWNER, 0, []),
    )


def failed_attempts_are_counted_and_their_nodes_remembered(db: Database) -> None:
    nodes = add_nodes(db, 2, owner=OWNER)
    instance = _building(db)[0]
    for attempt, (node, clean) in enumerate(zip(nodes, (True, False), strict=True), 1):
        assert allocations.allocate(db, node, instance) is not None
        assert (
            allocations.fail_attempt(
                db,
                node,
                instance,
                f"fault {attempt}",
                node_clean=clean,
                fence=Fence(OWNER, 0),
                max_attempts=3,
            )
            == attempt
        )
    assert _states(db, nodes[1], instance) == (
        ("error", None),
        ("building", None, None, 2, nodes),
    )
    with db.read() as connection:
        fault = connection.execute(
            select(InstanceModel.fault).where(InstanceModel.uuid == instance)
        ).scalar_one()
    assert fault.splitlines() == [
        f"attempt 1 on node {nodes[0]}: fault 1",
        f"attempt 2 on node {nodes[1]}: fault 2",
    ]


def nodes_count_failed_builds_until_a_success(db: Database) -> None:
    """Nova's compute's count: one more per failed build there, 0 at a success;
    a stale report counts nothing.  The scheduler's index reads it."""
    node = add_nodes(db, 1, owner=OWNER)[0]
    counts = []
    # Two failures reported by the owner; on a third build, a stale report
    # (another epoch: nothing changes), then the conductor's own give-up (a
    # timed-out attempt: no fence).
    for fence in (Fence(OWNER, 0), Fence(OWNER, 0), Fence(OWNER, 7), None):
        if fence is not None:  # a new build (the give-up is the stale report's)
            instance = _building(db)[0]
            assert allocations.allocate(db, node, instance) is not None
        failed = allocations.fail_attempt(
            db, node, instance, "boom", node_clean=True, fence=fence, max_attempts=1
        )
        assert (failed is None) is (fence == Fence(OWNER, 7))
        counts.append(_failed_builds(db, node))
    assert counts == [1, 2, 2, 3]
    assert {n.uuid: n.failed_builds for n, _key in source.load_all(db)} == {node: 3}
    instance = _building(db)[0]
    assert allocations.allocate(db, node, instance) is not None
    assert allocations.complete(db, node, instance, fence=Fence(OWNER, 0))
    assert _failed_builds(db, node) == 0


def _failed_builds(db: Database, node: str) -> int:
    with db.read() as connection:
        return int(
            connection.execute(
                select(NodeModel.failed_builds).where(NodeModel.uuid == node)
            ).scalar_one()
        )


CASES = [
    one_instance_per_node,
    a_report_counts_only_under_the_exact_owner,
    failed_attempts_are_counted_and_their_nodes_remembered,
    nodes_count_failed_builds_until_a_success,
]
