# SPDX-License-Identifier: Apache-2.0
"""Instances remember the nodes their build failed on

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 09:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A reschedule must not pick a node that already failed this build.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("tried_nodes", sa.JSON(), nullable=False, server_default="[]")
        )
