# SPDX-License-Identifier: Apache-2.0
"""Nodes keep what their back end (Ironic) showed at the last sync pass

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 10:00:00
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Ironic's raw provision state and claim (instance_uuid) of each node as
    # the inventory sync last listed them, and from when that observation
    # holds: fleet check compares them with ringfleet's records.  All
    # nullable: a node never observed (simulated driver, no sync) has none.
    dialect = op.get_bind().dialect
    if dialect.name in ("mysql", "mariadb"):
        # As 0005 made every string column and timestamp (repeated here: a
        # migration must not change with the models): compared byte for
        # byte, with microseconds (fleet check compares these instants with
        # updated_at).
        collation = (
            "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
        )
        state: sa.types.TypeEngine[str] = mysql.VARCHAR(32, charset="utf8mb4", collation=collation)
        claim: sa.types.TypeEngine[str] = mysql.VARCHAR(36, charset="utf8mb4", collation=collation)
        instant: sa.types.TypeEngine[datetime.datetime] = mysql.DATETIME(fsp=6)
    else:
        state, claim, instant = sa.String(length=32), sa.String(length=36), sa.DateTime()
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("backend_state", state, nullable=True))
        batch_op.add_column(sa.Column("backend_instance_uuid", claim, nullable=True))
        batch_op.add_column(sa.Column("backend_seen_at", instant, nullable=True))
