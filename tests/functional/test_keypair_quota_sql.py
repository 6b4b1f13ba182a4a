# SPDX-License-Identifier: Apache-2.0
"""Nova's ``key_pairs`` quota on real PostgreSQL and MariaDB: never exceeded,
however key pair creations race across conductors.

Two conductors are two ``Database`` engines (their own connection pools)
serving the real ``KeyPairsEndpoint``; 50 creations of one user start at
once from 50 threads, alternating between them, against a project limit of
5, while the user's lock row does not exist yet (so its creation races
too); 10 creations of another user of the same project race beside them,
and 10 of a user whose project is unlimited.  The limit counts per user,
as Nova's: the other user gets their own 5.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import func, select

from conductor.common.exception import QuotaExceeded
from conductor.db import keypairs, quotas
from conductor.db.engine import Database
from conductor.db.models import KeyPairModel
from conductor.endpoints.keypairs import KeyPairsEndpoint
from tests.dbutil import migrated

LIMIT = 5
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"


def _user(user: str, project: str) -> dict[str, Any]:
    return {"project_id": project, "user_id": user, "roles": ["member"], "is_admin": False}


def _race(
    conductors: list[KeyPairsEndpoint], creations: list[Callable[[KeyPairsEndpoint], Any]]
) -> tuple[int, int]:
    """Run every creation at once, alternating conductors: (created, refused)."""
    start = threading.Barrier(len(creations))

    def one(index: int) -> bool:
        start.wait()
        try:
            creations[index](conductors[index % len(conductors)])
        except QuotaExceeded:
            return False
        return True

    with ThreadPoolExecutor(len(creations)) as pool:
        outcomes = list(pool.map(one, range(len(creations))))
    return outcomes.count(True), outcomes.count(False)


def _count(db: Database, user: str) -> int:
    with db.read() as connection:
        return int(
            connection.execute(
                select(func.count()).select_from(KeyPairModel).where(KeyPairModel.user_id == user)
            ).scalar_one()
        )


def test_racing_key_pair_creations_never_exceed_the_quota(sql_url: str) -> None:
    """70 creations at once on two engines: 50 of alice and 10 of bob (project
    p1, key_pairs 5: 5 each), 10 of carol (p2: the default, unlimited here)."""
    first = migrated(sql_url)
    second = Database(sql_url)
    try:
        quotas.set_limits(first, "p1", {"key_pairs": LIMIT})
        defaults = quotas.Defaults(key_pairs=-1)
        conductors = [KeyPairsEndpoint(db, lambda: defaults) for db in (first, second)]

        def create(user: str, project: str, index: int) -> Callable[[Any], Any]:
            return lambda c: c.create_keypair(
                _user(user, project), name=f"key-{index}", public_key=KEY
            )

        creations = (
            [create("alice", "p1", i) for i in range(50)]
            + [create("bob", "p1", i) for i in range(10)]
            + [create("carol", "p2", i) for i in range(10)]
        )
        # Interleaved, so that each user's creations race on both engines.
        order = [creations[i] for i in sorted(range(70), key=lambda i: (i * 7) % 70)]
        created, refused = _race(conductors, order)
        counts = {user: _count(first, user) for user in ("alice", "bob", "carol")}
        assert counts == {"alice": LIMIT, "bob": LIMIT, "carol": 10}
        assert (created, refused) == (LIMIT + LIMIT + 10, 70 - 20)
        # The usage a quota shows is what is stored (per user).
        with second.read() as connection:
            assert keypairs.count(connection, "alice") == LIMIT
        # A limit raised lets the user create again; lowered, it refuses.
        quotas.set_limits(second, "p1", {"key_pairs": LIMIT + 1})
        conductors[1].create_keypair(_user("alice", "p1"), name="one-more", public_key=KEY)
        assert _count(first, "alice") == LIMIT + 1
    finally:
        second.dispose()
        first.dispose()
