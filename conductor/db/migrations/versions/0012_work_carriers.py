# SPDX-License-Identifier: Apache-2.0
"""Routed work names the conductor carrying it; actions carry a request id; power requests stored

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 18:00:00
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0012"
down_revision = "0011"
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
    # The conductor whose queue holds an instance's build, teardown or
    # action: when it goes, a peer finds its records by this column.
    # NULL (rows from before, or handed back by a conductor that stopped)
    # is work nobody carries: a peer adopts it.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("conductor", _identity(255), nullable=True))
        batch_op.add_column(sa.Column("action_id", _identity(36), nullable=True))
        batch_op.create_index("instances_conductor_idx", ["conductor"], unique=False)
    op.create_table(
        "node_power_requests",
        sa.Column("node_uuid", _identity(36), primary_key=True),
        sa.Column("target", _identity(32), nullable=False),
        sa.Column("request_id", _identity(36), nullable=False),
        sa.Column("conductor", _identity(255), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        **_table_options(),
    )


def downgrade() -> None:
    op.drop_table("node_power_requests")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index("instances_conductor_idx")
        batch_op.drop_column("action_id")
        batch_op.drop_column("conductor")
