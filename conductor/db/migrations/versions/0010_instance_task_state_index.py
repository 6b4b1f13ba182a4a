# SPDX-License-Identifier: Apache-2.0
"""Instances indexed by task_state: the reads of actions in flight

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 17:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0010"
# 0009 (the nodes' ring positions) is on another branch: whichever of the two
# is merged second revises the other.
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The conductor's reads of instances with an action in flight (a start,
    # the sweeper, a re-homed node, an agent's resume: task_state IN (...),
    # alone or OR'ed with vm_state) scanned the whole table: almost every row
    # has no task, so the index finds the few that do.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index("instances_task_state_idx", ["task_state"], unique=False)
