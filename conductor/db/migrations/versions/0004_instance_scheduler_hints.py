# SPDX-License-Identifier: Apache-2.0
"""Instances keep their build's scheduler hints

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 15:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A build is scheduled (and rescheduled) from its stored row: the hints
    # that Nova filters such as JsonFilter read must be stored with it.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("scheduler_hints", sa.JSON(), nullable=False, server_default="{}")
        )
