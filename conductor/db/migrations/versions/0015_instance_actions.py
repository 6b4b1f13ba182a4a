# SPDX-License-Identifier: Apache-2.0
"""Instance action history (Nova's instance_actions)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from conductor.db.migrations import column_types

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per user action on an instance, written with the state change
    # that puts the work in flight and finished with the one that ends it.
    # Instances built before have no history: it starts empty.
    op.create_table(
        "instance_actions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", column_types.identity(36), nullable=False),
        sa.Column("request_id", column_types.identity(255), nullable=False),
        sa.Column("action", column_types.identity(32), nullable=False),
        sa.Column("project_id", column_types.identity(255), nullable=True),
        sa.Column("user_id", column_types.identity(255), nullable=True),
        sa.Column("start_time", column_types.timestamp(), nullable=False),
        sa.Column("finish_time", column_types.timestamp(), nullable=True),
        sa.Column("result", column_types.identity(16), nullable=True),
        sa.Column("message", column_types.identity(255), nullable=True),
        **column_types.table_options(),
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
