# SPDX-License-Identifier: Apache-2.0
"""The clock of stored timestamps: naive datetimes in UTC.

Every timestamp the conductors store (``created_at``, ``updated_at``,
``gone_since``...) is a naive UTC datetime, and every code path that compares
with one, or stamps one, reads this clock: the database layer's column
defaults and fenced writes, the scheduler's incremental refresh windows, the
inventory pages' ``as_of``.  It lives here, not with the table models, so
that code outside :mod:`conductor.db` needs no database module to read it.
What the API and the fleet reports show is :func:`shown`: the same instant
with its zone (``+00:00``).
"""

from __future__ import annotations

import datetime

__all__ = ["shown", "utcnow"]


def utcnow() -> datetime.datetime:
    """Now, in UTC, without a time zone (as the database stores it)."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def shown(value: datetime.datetime) -> str:
    """An instant as ISO 8601 with its zone: a naive one is UTC (as stored).

    ``2026-11-29T23:50:14.123456+00:00``: a client need not know that the
    database keeps UTC, and a zoned time is still ISO 8601 to a parser that
    took the naive one (Python's ``fromisoformat``, JavaScript's ``Date``).
    """
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC).isoformat()
