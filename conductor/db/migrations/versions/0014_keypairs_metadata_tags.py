# SPDX-License-Identifier: Apache-2.0
"""Key pairs, instances' key name, metadata and tags

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29 21:00:00
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def _collation() -> str | None:
    """The byte-for-byte collation on MySQL and MariaDB, as 0005 set every
    string column (repeated here: a migration must not change with the
    models); ``None`` elsewhere."""
    dialect = op.get_bind().dialect
    if dialect.name not in ("mysql", "mariadb"):
        return None
    return "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"


def _identity(length: int) -> sa.types.TypeEngine[str]:
    """A string column compared byte for byte."""
    collation = _collation()
    if collation is None:
        return sa.String(length=length)
    return mysql.VARCHAR(length, charset="utf8mb4", collation=collation)


def _text() -> sa.types.TypeEngine[str]:
    """A long text (a public key: up to 16 KiB), utf8mb4 on MySQL and MariaDB."""
    collation = _collation()
    if collation is None:
        return sa.Text()
    return mysql.TEXT(charset="utf8mb4", collation=collation)


def _table_options() -> dict[str, Any]:
    """The table's own default collation, byte for byte too (as 0008's tables)."""
    collation = _collation()
    return {} if collation is None else {"mysql_charset": "utf8mb4", "mysql_collate": collation}


def _timestamp() -> sa.types.TypeEngine[datetime.datetime]:
    """With microseconds on MySQL and MariaDB, as every timestamp (0005)."""
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        return mysql.DATETIME(fsp=6)
    return sa.DateTime()


def upgrade() -> None:
    # Key pairs, Nova's: one name per user (the key's owner), its project
    # kept for admins' listings.  The unique pair is 2 x 255 utf8mb4
    # characters (2,040 bytes): within InnoDB's 3,072-byte key limit.
    op.create_table(
        "key_pairs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", _identity(255), nullable=False),
        sa.Column("name", _identity(255), nullable=False),
        sa.Column("project_id", _identity(255), nullable=True),
        sa.Column("type", _identity(16), nullable=False),
        sa.Column("fingerprint", _identity(255), nullable=False),
        sa.Column("public_key", _text(), nullable=False),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.UniqueConstraint("user_id", "name", name="uniq_key_pairs0user_id0name"),
        **_table_options(),
    )
    # The key an instance was built with (its public key is in the config
    # drive's meta_data): shown as Nova's server key_name.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_name", _identity(255), nullable=True))
    # Nova's server metadata and tags: rows of their own, so that one key
    # or tag changes without rewriting the others (no lost update between
    # two writers of different keys).
    op.create_table(
        "instance_metadata",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", _identity(36), nullable=False),
        sa.Column("key", _identity(255), nullable=False),
        sa.Column("value", _identity(255), nullable=False),
        sa.UniqueConstraint("instance_uuid", "key", name="uniq_instance_metadata0uuid0key"),
        **_table_options(),
    )
    op.create_table(
        "instance_tags",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", _identity(36), nullable=False),
        sa.Column("tag", _identity(60), nullable=False),
        sa.UniqueConstraint("instance_uuid", "tag", name="uniq_instance_tags0uuid0tag"),
        **_table_options(),
    )


def downgrade() -> None:
    op.drop_table("instance_tags")
    op.drop_table("instance_metadata")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_name")
    op.drop_table("key_pairs")
