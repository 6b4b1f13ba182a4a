# SPDX-License-Identifier: Apache-2.0
"""Per-user quota lock rows (key pairs: Nova's key_pairs quota is per user)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30 00:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from conductor.db.migrations import column_types

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The row a user's key pair creations lock before counting the user's
    # key pairs, as quota_projects is for a project's builds: two creations
    # of one user, on any conductors, count one after the other.
    op.create_table(
        "quota_users",
        sa.Column("user_id", column_types.identity(255), primary_key=True),
        sa.Column("key_pair_creates", sa.Integer(), nullable=False, server_default="0"),
        **column_types.table_options(),
    )


def downgrade() -> None:
    op.drop_table("quota_users")
