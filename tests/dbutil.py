# SPDX-License-Identifier: Apache-2.0
"""Database helpers shared by unit (SQLite) and functional (PostgreSQL, MariaDB) tests."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from conductor.db import migration
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel


@contextlib.contextmanager
def fresh_database(database_url: str, prefix: str = "rf") -> Iterator[str]:
    """A new, empty database on the test server (PostgreSQL or MariaDB), dropped afterwards.

    Created with the server's defaults (on MariaDB a case-insensitive
    collation): the schema must not depend on how the database was made.
    Yields its URL.
    """
    name = f"{prefix}_{uuidlib.uuid4().hex[:12]}"  # a plain identifier: no quoting anywhere
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            if admin.dialect.name == "postgresql":
                connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            else:
                # MariaDB has no FORCE: end what a failed test left connected,
                # or the DROP waits for its metadata lock.
                for (session_id,) in connection.execute(
                    text("SELECT id FROM information_schema.processlist WHERE db = :db"),
                    {"db": name},
                ):
                    try:
                        connection.execute(text(f"KILL {int(session_id)}"))
                    except OperationalError as exc:  # it ended since the listing
                        if "Unknown thread id" not in str(exc):
                            raise
                connection.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        admin.dispose()


def migrated(url: str) -> Database:
    db = Database(url)
    migration.upgrade(db)
    return db


def upgraded_by_a_newer_ringfleet(path: Path) -> str:
    """A SQLite database at *path* as a newer ringfleet's upgrade leaves it: at
    revision 9999, which this code does not know.  Its URL."""
    url = f"sqlite:///{path}"
    migrated(url).dispose()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '9999'")
    connection.close()
    return url


def add_nodes(
    db: Database,
    count: int,
    *,
    owner: str | None = None,
    resource_class: str = "baremetal",
    prefix: str = "node",
) -> list[str]:
    """Insert ``count`` available nodes straight into the table; their uuids."""
    uuids = [str(uuidlib.uuid4()) for _ in range(count)]
    with db.transaction() as session:
        session.add_all(
            NodeModel(
                uuid=u,
                name=f"{prefix}-{i}-{u[:8]}",
                resource_class=resource_class,
                traits=[],
                properties={},
                provision_state="available",
                power_state="power off",
                owner=owner,
            )
            for i, u in enumerate(uuids)
        )
    return uuids


def pin(db: Database, node_uuids: Sequence[str], host: str) -> list[str]:
    """Put an ACTIVE instance on each node (owned by ``host``); the instance uuids."""
    instances = []
    with db.transaction() as session:
        for node in node_uuids:
            instance = str(uuidlib.uuid4())
            instances.append(instance)
            session.add(
                InstanceModel(
                    uuid=instance,
                    name=f"vm-{instance[:8]}",
                    flavor="f",
                    vm_state="active",
                    node_uuid=node,
                    host=host,
                )
            )
            row = session.query(NodeModel).filter_by(uuid=node).one()
            row.instance_uuid = instance
            row.provision_state = "active"
    return instances
