# SPDX-License-Identifier: Apache-2.0
"""Nodes count the builds that failed on them since the last success

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nova's compute node stat "failed_builds": one more at each failed
    # build on the node, 0 again at a success there; the scheduler's
    # failed-builds weighers read it.  The server default fills the
    # existing rows (none has a failure counted yet) in the same statement.
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("failed_builds", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.drop_column("failed_builds")
