# SPDX-License-Identifier: Apache-2.0
"""Instances belong to a project and carry their image and config drive

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    dialect = op.get_bind().dialect
    if dialect.name in ("mysql", "mariadb"):
        # As 0005 made every string column (repeated here: a migration must
        # not change with the models): compared byte for byte.
        collation = (
            "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
        )
        identity: sa.types.TypeEngine[str] = mysql.VARCHAR(
            255, charset="utf8mb4", collation=collation
        )
    else:
        identity = sa.String(length=255)
    with op.batch_alter_table("instances", schema=None) as batch_op:
        # Who asked for the instance (the caller's Keystone project and user).
        # NULL on rows built before tenancy: only admins see those.
        batch_op.add_column(sa.Column("project_id", identity, nullable=True))
        batch_op.add_column(sa.Column("user_id", identity, nullable=True))
        # What the machine boots and the config drive it gets, as validated
        # at the request: the agent (and any agent that adopts the node) is
        # given them from this record, never from memory.
        batch_op.add_column(sa.Column("image", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("config_drive", sa.JSON(), nullable=True))
        batch_op.create_index("instances_project_idx", ["project_id"])
    with op.batch_alter_table("flavors", schema=None) as batch_op:
        # The image a build of this flavor gets when its request names none.
        batch_op.add_column(sa.Column("default_image", sa.JSON(), nullable=True))
