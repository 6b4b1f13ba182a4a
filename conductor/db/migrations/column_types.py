# SPDX-License-Identifier: Apache-2.0
"""Column types of the migrations on MySQL and MariaDB: byte-for-byte strings
and timestamps with microseconds, as revision 0005 set every column.

Frozen: a migration must not change with the models, so these are the
types as the migrations from 0012 on wrote them; a later rule is a new
function here, never a change to one.
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

__all__ = ["collation", "identity", "table_options", "text", "timestamp"]


def collation() -> str | None:
    """The byte-for-byte collation on MySQL and MariaDB; ``None`` elsewhere."""
    dialect = op.get_bind().dialect
    if dialect.name not in ("mysql", "mariadb"):
        return None
    return "utf8mb4_nopad_bin" if getattr(dialect, "is_mariadb", False) else "utf8mb4_0900_bin"


def identity(length: int) -> sa.types.TypeEngine[str]:
    """A string column compared byte for byte."""
    exact = collation()
    if exact is None:
        return sa.String(length=length)
    return mysql.VARCHAR(length, charset="utf8mb4", collation=exact)


def text() -> sa.types.TypeEngine[str]:
    """A long text (a public key: up to 16 KiB), utf8mb4 on MySQL and MariaDB."""
    exact = collation()
    if exact is None:
        return sa.Text()
    return mysql.TEXT(charset="utf8mb4", collation=exact)


def table_options() -> dict[str, Any]:
    """A table's own default collation, byte for byte too (as 0008's tables)."""
    exact = collation()
    return {} if exact is None else {"mysql_charset": "utf8mb4", "mysql_collate": exact}


def timestamp() -> sa.types.TypeEngine[datetime.datetime]:
    """With microseconds on MySQL and MariaDB, as every timestamp (0005)."""
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        return mysql.DATETIME(fsp=6)
    return sa.DateTime()
