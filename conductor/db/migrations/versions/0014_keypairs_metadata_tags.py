# SPDX-License-Identifier: Apache-2.0
"""Key pairs, instances' key name, metadata and tags

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from conductor.db.migrations import column_types

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Key pairs, Nova's: one name per user (the key's owner), its project
    # kept for admins' listings.  The unique pair is 2 x 255 utf8mb4
    # characters (2,040 bytes): within InnoDB's 3,072-byte key limit.
    op.create_table(
        "key_pairs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", column_types.identity(255), nullable=False),
        sa.Column("name", column_types.identity(255), nullable=False),
        sa.Column("project_id", column_types.identity(255), nullable=True),
        sa.Column("type", column_types.identity(16), nullable=False),
        sa.Column("fingerprint", column_types.identity(255), nullable=False),
        sa.Column("public_key", column_types.text(), nullable=False),
        sa.Column("created_at", column_types.timestamp(), nullable=False),
        sa.UniqueConstraint("user_id", "name", name="uniq_key_pairs0user_id0name"),
        **column_types.table_options(),
    )
    # The key an instance was built with (its public key is in the config
    # drive's meta_data): shown as Nova's server key_name.
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("key_name", column_types.identity(255), nullable=True))
    # Nova's server metadata and tags: rows of their own, so that one key
    # or tag changes without rewriting the others (no lost update between
    # two writers of different keys).
    op.create_table(
        "instance_metadata",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", column_types.identity(36), nullable=False),
        sa.Column("key", column_types.identity(255), nullable=False),
        sa.Column("value", column_types.identity(255), nullable=False),
        sa.UniqueConstraint("instance_uuid", "key", name="uniq_instance_metadata0uuid0key"),
        **column_types.table_options(),
    )
    op.create_table(
        "instance_tags",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("instance_uuid", column_types.identity(36), nullable=False),
        sa.Column("tag", column_types.identity(60), nullable=False),
        sa.UniqueConstraint("instance_uuid", "tag", name="uniq_instance_tags0uuid0tag"),
        **column_types.table_options(),
    )


def downgrade() -> None:
    op.drop_table("instance_tags")
    op.drop_table("instance_metadata")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_column("key_name")
    op.drop_table("key_pairs")
