# SPDX-License-Identifier: Apache-2.0
"""Agents stopped for a restart keep their nodes until a deadline

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 00:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A SIGTERM'd agent that will be back within restart_grace: no node of
    # its moves until then (static membership, as Kafka's).
    with op.batch_alter_table("agents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("restart_until", sa.DateTime(), nullable=True))
