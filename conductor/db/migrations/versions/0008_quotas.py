# SPDX-License-Identifier: Apache-2.0
"""Quotas: per-project limits, and the row each project's builds lock

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 14:00:00
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_bind().dialect
    table_options: dict[str, Any] = {}
    if dialect.name in ("mysql", "mariadb"):
        # As 0005 made every string column (repeated here: a migration must
        # not change with the models): compared byte for byte.
        collation = (
            "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
        )
        identity: sa.types.TypeEngine[str] = mysql.VARCHAR(
            255, charset="utf8mb4", collation=collation
        )
        timestamp: sa.types.TypeEngine[datetime.datetime] = mysql.DATETIME(fsp=6)
        # The tables' own default too, as 0005 converted the others to.
        table_options = {"mysql_charset": "utf8mb4", "mysql_collate": collation}
    else:
        identity = sa.String(length=255)
        timestamp = sa.DateTime()
    # A project's own limits; projects without a row get [quota]'s defaults.
    op.create_table(
        "quota_limits",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("project_id", identity, nullable=False),
        sa.Column("resource", identity, nullable=False),
        sa.Column("hard_limit", sa.Integer(), nullable=False),
        sa.Column("created_at", timestamp, nullable=False),
        sa.Column("updated_at", timestamp, nullable=False),
        sa.UniqueConstraint("project_id", "resource", name="uniq_quota_limits0project_id0resource"),
        **table_options,
    )
    # The row a project's builds lock before counting its usage.
    op.create_table(
        "quota_projects",
        sa.Column("project_id", identity, primary_key=True),
        sa.Column("builds", sa.Integer(), nullable=False, server_default="0"),
        **table_options,
    )
