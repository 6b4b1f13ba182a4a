# SPDX-License-Identifier: Apache-2.0
"""Instance action history (Nova's instance_actions)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29 21:00:00
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
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
    # One row per user action on an instance, written with the state change
    # that puts the work in flight and finished with the one that ends it.
    # Instances built before have no history: it starts empty.
    op.create_table(
        "instance_actions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", _identity(36), nullable=False),
        sa.Column("request_id", _identity(255), nullable=False),
        sa.Column("action", _identity(32), nullable=False),
        sa.Column("project_id", _identity(255), nullable=True),
        sa.Column("user_id", _identity(255), nullable=True),
        sa.Column("start_time", _timestamp(), nullable=False),
        sa.Column("finish_time", _timestamp(), nullable=True),
        sa.Column("result", _identity(16), nullable=True),
        sa.Column("message", _identity(255), nullable=True),
        **_table_options(),
    )
    op.create_index(
        "instance_actions_instance_idx",
        "instance_actions",
        ["instance_uuid", "request_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("instance_actions_instance_idx", table_name="instance_actions")
    op.drop_table("instance_actions")
