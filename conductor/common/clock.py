# SPDX-License-Identifier: Apache-2.0
"""The clock of stored timestamps: naive datetimes in UTC.

Every timestamp the conductors store (``created_at``, ``updated_at``,
``gone_since``...) is a naive UTC datetime, and every code path that compares
with one, or stamps one, reads this clock: the database layer's column
defaults and fenced writes, the scheduler's incremental refresh windows, the
inventory pages' ``as_of``.  It lives here, not with the table models, so
that code outside :mod:`conductor.db` needs no database module to read it.
"""

from __future__ import annotations

import datetime

__all__ = ["utcnow"]


def utcnow() -> datetime.datetime:
    """Now, in UTC, without a time zone (as the database stores it)."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
