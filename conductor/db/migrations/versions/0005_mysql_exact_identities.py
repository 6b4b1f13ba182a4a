# SPDX-License-Identifier: Apache-2.0
"""MySQL/MariaDB: strings compared byte for byte, timestamps with microseconds

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 18:30:00
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Every DATETIME column: (table, column, nullable).
_TIMESTAMPS = {
    "nodes": [("created_at", False), ("updated_at", False)],
    "flavors": [("created_at", False)],
    "instances": [("created_at", False), ("updated_at", False)],
    "agents": [
        ("first_seen", False),
        ("last_seen", False),
        ("gone_since", True),
        ("restart_until", True),
    ],
}


def upgrade() -> None:
    # PostgreSQL and SQLite already compare strings exactly and keep
    # microseconds: nothing to do there.
    dialect = op.get_bind().dialect
    if dialect.name not in ("mysql", "mariadb"):
        return
    # The tables were created with the server's default collation, which
    # ignores case and trailing spaces (utf8mb4_general_ci on Debian): two
    # owners "Agent-1" and "agent-1 " were one, in every WHERE and in the
    # agents' primary key.  The no-pad binary collation (see
    # conductor.db.models.binary_collation; repeated here, a migration must
    # not change with the models) becomes every string column's and the
    # tables' default.  DATETIME kept whole seconds, and the schedulers'
    # index refresh (updated_at >= since) missed changes made in the second
    # it last looked; FLOAT was single precision (ring weights).  One ALTER
    # per table: each rebuilds the table once.
    collation = "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"
    for table, timestamps in _TIMESTAMPS.items():
        changes = [f"CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"]
        changes += [
            f"MODIFY {column} DATETIME(6) {'NULL' if nullable else 'NOT NULL'}"
            for column, nullable in timestamps
        ]
        if table == "agents":
            changes.append("MODIFY weight DOUBLE NOT NULL")
        op.execute(f"ALTER TABLE {table} {', '.join(changes)}")
