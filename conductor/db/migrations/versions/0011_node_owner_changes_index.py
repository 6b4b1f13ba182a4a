# SPDX-License-Identifier: Apache-2.0
"""Nodes indexed by owner and change time: an agent's change read of its own nodes

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29 14:45:00
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every agent reads the changes of the nodes it owns every few seconds.
    # By the owner index alone that visited every row it owns (10,000 at
    # 100k nodes on 10 agents) to check the change time, each time, in a
    # quiet fleet too; with the change time in the index it visits the rows
    # that changed.  The new index serves the owner-only reads as well.
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("nodes_owner_changed_idx", ["owner", "updated_at"], unique=False)
        batch_op.drop_index("nodes_owner_idx")


def downgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("nodes_owner_idx", ["owner"], unique=False)
        batch_op.drop_index("nodes_owner_changed_idx")
