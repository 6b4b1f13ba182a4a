# SPDX-License-Identifier: Apache-2.0
"""Routed work names the conductor carrying it; actions carry a request id; power requests stored

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from conductor.db.migrations import column_types

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The conductor whose queue holds an instance's build, teardown or
    # action: when it goes, a peer finds its records by this column.
    # NULL (rows from before, or handed back by a conductor that stopped)
    # is work nobody carries: a peer adopts it.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("conductor", column_types.identity(255), nullable=True))
        batch_op.add_column(sa.Column("action_id", column_types.identity(36), nullable=True))
        batch_op.create_index("instances_conductor_idx", ["conductor"], unique=False)
    op.create_table(
        "node_power_requests",
        sa.Column("node_uuid", column_types.identity(36), primary_key=True),
        sa.Column("target", column_types.identity(32), nullable=False),
        sa.Column("request_id", column_types.identity(36), nullable=False),
        sa.Column("conductor", column_types.identity(255), nullable=True),
        sa.Column("created_at", column_types.timestamp(), nullable=False),
        **column_types.table_options(),
    )


def downgrade() -> None:
    op.drop_table("node_power_requests")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index("instances_conductor_idx")
        batch_op.drop_column("action_id")
        batch_op.drop_column("conductor")
