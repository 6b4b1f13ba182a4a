# SPDX-License-Identifier: Apache-2.0
"""A list of values in a statement: one bound array on PostgreSQL, ``IN (...)`` elsewhere.

SQLAlchemy sends ``column IN (list)`` as a bound parameter per element,
named and written into the statement at every execution.  A share claim of
1,000 nodes among 100 live agents made about 1,350 of them: about 10 ms of
the conductor's CPU per claim, near a third of what each agent cost it at a
cold start.  On PostgreSQL the list goes as one array literal instead
(``= ANY`` / ``<> ALL``), made by one join in Python and parsed by the
server in one go.  MariaDB and SQLite have no arrays: there the list stays
an ``IN``, in chunks that keep under their limits on bound parameters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import ARRAY, ColumnElement, Dialect, Text, all_, any_, bindparam, cast

__all__ = ["array_literal", "chunks", "none_of", "one_of"]

#: Values per ``IN`` where lists are written element by element (bound
#: parameters per statement: well under SQLite's limit of 32766).
CHUNK = 500


def _arrays(dialect: Dialect) -> bool:
    return dialect.name == "postgresql"


def array_literal(values: Sequence[str]) -> str:
    """``'{"a","b"}'``: PostgreSQL's text form of a text array, each element
    quoted (a comma, a brace, a blank or ``NULL`` in a value stays the value)."""
    if not values:
        return "{}"
    joined = '","'.join(values)
    if "\\" in joined or joined.count('"') != 2 * (len(values) - 1):  # a value to escape
        joined = '","'.join(value.replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return '{"' + joined + '"}'


def _text_array(values: Sequence[str]) -> Any:
    return cast(bindparam(None, array_literal(values), type_=Text), ARRAY(Text))


def one_of(
    column: ColumnElement[Any], values: Sequence[str], dialect: Dialect
) -> ColumnElement[bool]:
    """``column`` is one of ``values`` (none: false)."""
    if _arrays(dialect):
        return column == any_(_text_array(values))
    return column.in_(values)


def none_of(
    column: ColumnElement[Any], values: Sequence[str], dialect: Dialect
) -> ColumnElement[bool]:
    """``column`` is none of ``values`` (none: true); unknown where ``column`` is NULL,
    as with ``NOT IN``."""
    if _arrays(dialect):
        return column != all_(_text_array(values))
    return column.not_in(values)


def chunks(values: Sequence[str], dialect: Dialect) -> Iterator[Sequence[str]]:
    """``values`` in lists of one statement each: all at once where they go as
    an array, :data:`CHUNK` at a time elsewhere."""
    size = (len(values) or 1) if _arrays(dialect) else CHUNK
    for start in range(0, len(values), size):
        yield values[start : start + size]
