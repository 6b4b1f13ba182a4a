# SPDX-License-Identifier: Apache-2.0
"""Initial schema

Revision ID: 0001
Revises: -
Create Date: 2026-11-21 08:32:58.526725
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("gone_since", sa.DateTime(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("host"),
    )
    op.create_table(
        "flavors",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("resource_class", sa.String(length=80), nullable=False),
        sa.Column("required_traits", sa.JSON(), nullable=False),
        sa.Column("forbidden_traits", sa.JSON(), nullable=False),
        sa.Column("extra_specs", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", name="uniq_flavors0name"),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("flavor", sa.String(length=255), nullable=False),
        sa.Column("vm_state", sa.String(length=16), nullable=False),
        sa.Column("task_state", sa.String(length=16), nullable=True),
        sa.Column("node_uuid", sa.String(length=36), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("group_hint", sa.String(length=80), nullable=True),
        sa.Column("fault", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("node_uuid", name="uniq_instances0node_uuid"),
        sa.UniqueConstraint("uuid", name="uniq_instances0uuid"),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index("instances_host_idx", ["host"], unique=False)
        batch_op.create_index("instances_vm_state_idx", ["vm_state"], unique=False)

    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("uuid", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("resource_class", sa.String(length=80), nullable=False),
        sa.Column("traits", sa.JSON(), nullable=False),
        sa.Column("properties", sa.JSON(), nullable=False),
        sa.Column("node_group", sa.String(length=80), nullable=False),
        sa.Column("provision_state", sa.String(length=16), nullable=False),
        sa.Column("power_state", sa.String(length=16), nullable=True),
        sa.Column("maintenance", sa.Boolean(), nullable=False),
        sa.Column("maintenance_reason", sa.String(length=255), nullable=True),
        sa.Column("owner", sa.String(length=255), nullable=True),
        sa.Column("owner_epoch", sa.Integer(), nullable=False),
        sa.Column("instance_uuid", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("instance_uuid", name="uniq_nodes0instance_uuid"),
        sa.UniqueConstraint("name", name="uniq_nodes0name"),
        sa.UniqueConstraint("uuid", name="uniq_nodes0uuid"),
    )
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.create_index("nodes_owner_idx", ["owner"], unique=False)
        batch_op.create_index(
            "nodes_sched_idx", ["provision_state", "resource_class", "node_group"], unique=False
        )
        batch_op.create_index("nodes_updated_at_idx", ["updated_at"], unique=False)
