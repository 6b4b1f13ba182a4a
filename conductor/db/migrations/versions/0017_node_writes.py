# SPDX-License-Identifier: Apache-2.0
"""Writes of many node rows under way (change reads wait for them)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from conductor.db.migrations import column_types

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A long write of node rows (an import, a share's claims) is recorded
    # here while it runs: readers of changes start their next read before
    # its stamp, and so read its rows once it committed.
    op.create_table(
        "node_writes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("stamp", column_types.timestamp(), nullable=False),
        sa.Column("expires_at", column_types.timestamp(), nullable=False),
        **column_types.table_options(),
    )


def downgrade() -> None:
    op.drop_table("node_writes")
