# SPDX-License-Identifier: Apache-2.0
"""Nodes keep their position on the hash ring, indexed: agents read their share

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
import xxhash
from alembic import context, op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# hashring.ring.node_position as of ring version 1, repeated here: a
# migration must not change with the code.  (The position is the node
# uuid's xxh3_64 hash moved into the signed range.)
_SHIFT = 1 << 63
_BATCH = 5000


def _position(node_uuid: str) -> int:
    return xxhash.xxh3_64_intdigest(node_uuid.encode("utf-8")) - _SHIFT


def upgrade() -> None:
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ring_position", sa.BigInteger(), nullable=True))
    if context.is_offline_mode():
        # The positions are computed in Python, from rows that only an online
        # upgrade can read.  On a table with nodes, the NOT NULL below then
        # fails: nothing is half done.
        op.execute(
            "-- Revision 0009 computes each node's ring position from its uuid: "
            "on a database with nodes, run `ringfleet-dbsync upgrade` online"
        )
    else:
        _fill_positions()
    # (SQLite alters a column by copying the table, which needs the live
    # table: its offline SQL leaves the column nullable.)
    offline_sqlite = context.is_offline_mode() and op.get_context().dialect.name == "sqlite"
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        if not offline_sqlite:
            batch_op.alter_column("ring_position", existing_type=sa.BigInteger(), nullable=False)
        # With updated_at: an agent's read of the changes to its share then
        # checks the change time in the index, per arc, and fetches only the
        # rows that changed (not every row of its share, every few seconds).
        batch_op.create_index("nodes_ring_position_idx", ["ring_position", "updated_at"])


def _fill_positions() -> None:
    bind = op.get_bind()
    nodes = sa.table("nodes", sa.column("id", sa.Integer), sa.column("uuid", sa.String))
    update = sa.text("UPDATE nodes SET ring_position = :position WHERE id = :node_id")
    last = 0
    while True:
        rows = bind.execute(
            sa.select(nodes.c.id, nodes.c.uuid)
            .where(nodes.c.id > last)
            .order_by(nodes.c.id)
            .limit(_BATCH)
        ).all()
        if not rows:
            break
        bind.execute(update, [{"position": _position(u), "node_id": i} for i, u in rows])
        last = rows[-1][0]
