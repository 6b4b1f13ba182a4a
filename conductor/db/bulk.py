# SPDX-License-Identifier: Apache-2.0
"""Inserting many rows in one transaction: PostgreSQL ``COPY``, a multi-row INSERT elsewhere.

A 100,000-node import spent most of its database time in SQLAlchemy's
multi-row INSERT on PostgreSQL: every value of every row through its bind
processing, then the statement's text parsed by the server.  ``COPY ...
FROM STDIN`` streams the rows as text instead (psycopg2's ``copy_expert``,
on the caller's connection, so in the caller's transaction: a failed
``COPY`` stores nothing of it, and a commit stores it with the rest).

MariaDB and SQLite get one INSERT executed with many parameter sets: PyMySQL
sends it as multi-row INSERT statements, sqlite3 runs one prepared statement
per row in C.  PostgreSQL through another driver than psycopg2 does the same.

Rows are dicts of column name to value, the same keys in every row, the
values as SQLAlchemy would bind them (``None`` is NULL; a JSON column's value
is encoded as JSON).  Errors are SQLAlchemy's on every path (an
:class:`~sqlalchemy.exc.IntegrityError` for a unique violation, an
:class:`~sqlalchemy.exc.OperationalError` for a lost connection), so
:class:`~conductor.db.engine.Database` handles them as those of any statement.
"""

from __future__ import annotations

import datetime
import io
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import JSON, Boolean, DateTime, Table, exc, insert
from sqlalchemy.engine import Connection

__all__ = ["copy_text", "insert_rows"]

LOG = logging.getLogger(__name__)

#: Rows per statement where there is no COPY (the driver's batches are smaller still).
#: Not Final: the tests make both small to cover several statements.
INSERT_CHUNK = 1000

#: Rows per ``COPY`` statement: a few MB of text at a time, not the whole import.
COPY_CHUNK = 20_000

#: COPY's text format: these characters of a value are written as escapes.
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_NULL: Final = "\\N"

Encode = Callable[[Any], str]


def insert_rows(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` into ``table`` in the connection's transaction.

    :raises sqlalchemy.exc.IntegrityError: a row violates a constraint (a
        unique name or uuid taken); the transaction is then good only for
        a rollback, as after any failed statement
    """
    if not rows:
        return
    if connection.dialect.name == "postgresql" and connection.dialect.driver == "psycopg2":
        for start in range(0, len(rows), COPY_CHUNK):
            _copy(connection, table, rows[start : start + COPY_CHUNK])
        return
    for start in range(0, len(rows), INSERT_CHUNK):
        connection.execute(insert(table), list(rows[start : start + INSERT_CHUNK]))


def copy_text(table: Table, rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], str]:
    """The columns of ``rows`` and the rows in COPY's text format, one line each."""
    columns = list(rows[0])
    cells = [_column_text(table.c[name].type, [row[name] for row in rows]) for name in columns]
    return columns, "".join(["\t".join(line) + "\n" for line in zip(*cells, strict=True)])


def _column_text(column_type: Any, values: list[Any]) -> list[str]:
    """The values of one column in COPY's text format."""
    if isinstance(column_type, JSON):
        first = values[0]
        # Most nodes of an import have no traits or properties: an empty
        # list or mapping equals only its like, so encodes once.
        if isinstance(first, list | dict) and not first and values.count(first) == len(values):
            return [json.dumps(first)] * len(values)
        # SQLAlchemy's JSON type stores None as JSON null too.
        return [json.dumps(value).translate(_ESCAPES) for value in values]
    encode = _encoder(column_type)
    first = values[0]
    # Most columns of an import hold one value (a timestamp, a default):
    # encoded once.  (Not JSON values: 1 == True, but they encode apart.)
    if values.count(first) == len(values):
        return [encode(first)] * len(values)
    return [encode(value) for value in values]


def _encoder(column_type: Any) -> Encode:
    """How a value of a (non-JSON) column of this type is written in COPY's text format."""
    if isinstance(column_type, Boolean):
        return _boolean
    if isinstance(column_type, DateTime):
        return _timestamp
    return _text


def _boolean(value: bool | None) -> str:
    return _NULL if value is None else "t" if value else "f"


def _timestamp(value: datetime.datetime | None) -> str:
    return _NULL if value is None else value.isoformat(" ")


def _text(value: object) -> str:
    return _NULL if value is None else str(value).translate(_ESCAPES)


def _copy(connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
    columns, text = copy_text(table, rows)
    statement = f"COPY {table.name} ({', '.join(columns)}) FROM STDIN"
    dbapi = connection.dialect.loaded_dbapi
    raw = connection.connection  # the connection's DBAPI connection, in its transaction
    cursor = raw.cursor()
    try:
        cursor.copy_expert(statement, io.StringIO(text))
    except dbapi.Error as error:
        # Raised by the driver, not through SQLAlchemy: wrapped as SQLAlchemy
        # wraps a statement's errors, and a dead connection is dropped from the pool.
        lost = bool(connection.dialect.is_disconnect(error, raw, cursor))
        if lost:
            connection.invalidate()
        raise exc.DBAPIError.instance(
            statement, None, error, dbapi.Error, connection_invalidated=lost
        ) from None
    finally:
        if not cursor.closed:
            cursor.close()
    LOG.debug("COPY of %d rows into %s", len(rows), table.name)
