# SPDX-License-Identifier: Apache-2.0
"""The schema migrations on real PostgreSQL and MariaDB: from scratch, and upgrading rows."""

from __future__ import annotations

import datetime
import uuid as uuidlib

import pytest
from sqlalchemy import Column, MetaData, Table, bindparam, insert, select, text, update

from conductor.db import migration, nodes, ownership, quotas
from conductor.db.engine import Database
from conductor.db.models import Base, NodeModel, utcnow
from hashring.ring import node_position
from tests.dbutil import add_nodes

# The last revision before MySQL/MariaDB got exact comparisons.
_BEFORE_EXACT = "0004"


@pytest.mark.parametrize("start", [None, _BEFORE_EXACT], ids=["from-scratch", "upgrade"])
def test_identities_and_instants_are_exact_after_migrating(sql_url: str, start: str | None) -> None:
    db = Database(sql_url)
    try:
        node = None
        if start is not None:
            migration.upgrade(db, start)
            node = _old_node(db, owner="Agent-1")
        migration.upgrade(db)
        assert migration.current_version(db) == migration.head_version()
        if node is None:
            node = add_nodes(db, 1, owner="Agent-1")[0]

        # The row kept its owner, who is not "agent-1" nor "Agent-1 ".
        assert [o.node_uuid for o in ownership.owned_by(db, "Agent-1")] == [node]
        assert ownership.owned_by(db, "agent-1") == []
        assert ownership.owned_by(db, "Agent-1 ") == []
        # An index refresh asking from the exact instant of a change sees it.
        changed = utcnow().replace(microsecond=654321)
        with db.writing() as connection:
            connection.execute(
                update(NodeModel).where(NodeModel.uuid == node).values(updated_at=changed)
            )
        assert [n.uuid for n in nodes.changed_since(db, changed)] == [node]
        assert nodes.changed_since(db, changed + datetime.timedelta(microseconds=1)) == []

        # Columns added since (0006): empty on the row that was there.
        with db.read() as connection:
            observed = connection.execute(
                select(
                    NodeModel.backend_state,
                    NodeModel.backend_instance_uuid,
                    NodeModel.backend_seen_at,
                ).where(NodeModel.uuid == node)
            ).one()
        assert tuple(observed) == (None, None, None)
        # Its ring position (0009): computed for the row that was there.
        with db.read() as connection:
            position = connection.execute(
                select(NodeModel.ring_position).where(NodeModel.uuid == node)
            ).scalar_one()
        assert position == node_position(node)

        if db.dialect == "mysql":
            _assert_mysql_columns_exact(db)
    finally:
        db.dispose()


_COLUMNS_SINCE_0004 = {"backend_state", "backend_instance_uuid", "backend_seen_at", "ring_position"}


def _old_node(db: Database, owner: str) -> str:
    """A node row as a conductor of the old revision writes it: the columns it
    had only (the model has more since)."""
    uuid = str(uuidlib.uuid4())
    now = utcnow()
    # The columns of revision 0004, not the model's (it has more, with defaults).
    old_columns = [c for c in NodeModel.__table__.columns if c.name not in _COLUMNS_SINCE_0004]
    old_table = Table("nodes", MetaData(), *(Column(c.name, c.type) for c in old_columns))
    with db.writing() as connection:
        connection.execute(
            insert(old_table).values(
                uuid=uuid,
                name=f"node-{uuid[:8]}",
                resource_class="baremetal",
                traits=[],
                properties={},
                node_group="",
                provision_state="available",
                power_state="power off",
                maintenance=False,
                owner=owner,
                owner_epoch=0,
                created_at=now,
                updated_at=now,
            )
        )
    return uuid


def _assert_mysql_columns_exact(db: Database) -> None:
    """Every string column byte-compared (no pad), every DATETIME with microseconds."""
    tables = sorted(Base.metadata.tables)
    with db.read() as connection:
        columns = connection.execute(
            text(
                "SELECT table_name, column_name, data_type, collation_name, datetime_precision"
                " FROM information_schema.columns"
                " WHERE table_schema = DATABASE() AND table_name IN :tables"
            ).bindparams(bindparam("tables", expanding=True)),
            {"tables": tables},
        ).all()
        defaults = connection.execute(
            text(
                "SELECT table_name, table_collation FROM information_schema.tables"
                " WHERE table_schema = DATABASE() AND table_name IN :tables"
            ).bindparams(bindparam("tables", expanding=True)),
            {"tables": tables},
        ).all()
    strings = {
        (table, column): collation
        for table, column, kind, collation, _precision in columns
        if kind in ("varchar", "text")
    }
    assert strings and set(strings.values()) == {"utf8mb4_nopad_bin"}, strings
    instants = {
        (table, column): precision
        for table, column, kind, _collation, precision in columns
        if kind == "datetime"
    }
    assert instants and set(instants.values()) == {6}, instants
    assert dict(defaults) == dict.fromkeys(tables, "utf8mb4_nopad_bin")


def test_key_pairs_and_labels_compare_exactly(sql_url: str) -> None:
    """0014's tables compare names byte for byte: on MariaDB too, ``Key`` and
    ``key `` are two key pairs of one user, two metadata keys, two tags."""
    from conductor.db import instance_labels, keypairs  # noqa: PLC0415 -- this test's only

    db = Database(sql_url)
    try:
        migration.upgrade(db)
        for name in ("key", "Key", "key ", "kéy"):
            keypairs.create(
                db,
                user_id="u1",
                project_id="p1",
                name=name,
                public_key="ssh-ed25519 AAAA",
                fingerprint="00",
                defaults=quotas.Defaults(key_pairs=-1),
            )
        assert [k["name"] for k in keypairs.list_for(db, "u1")] == sorted(
            ["key", "Key", "key ", "kéy"]
        )
        instance = str(uuidlib.uuid4())
        stored = instance_labels.set_metadata(
            db, instance, {"a": "1", "A": "2", "a ": "3"}, replace=False, limit=128
        )
        assert stored == {"a": "1", "A": "2", "a ": "3"}
        assert instance_labels.replace_tags(db, instance, ["t", "T", "t "]) == sorted(
            ["t", "T", "t "]
        )
        assert instance_labels.delete_tag(db, instance, "T")
        assert instance_labels.get_tags(db, instance) == ["t", "t "]
    finally:
        db.dispose()
