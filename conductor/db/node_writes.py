# SPDX-License-Identifier: Apache-2.0
"""Long writes of node rows, recorded while they run, so that no change read misses them.

Readers of changes -- the schedulers' node index, the agents' inventory
reads -- read the rows whose ``updated_at`` is at or after a start, and
start the next read from a moment taken before the previous one (less an
overlap, for clock skew and short transactions).  A row's ``updated_at`` is
stamped when its write begins, though, and becomes visible when it commits:
an import of 100,000 nodes or a share's claims on a busy database commit
seconds after their stamp, after readers had moved past it, and their rows
were never read (the index then held no imported node, or the old owner of
most claimed ones, until its next full rebuild).

So such a write is recorded (:func:`recorded`) in a transaction of its own
before it begins, and the record deleted when it ends; every change read
takes as its "as of" the earliest stamp of the records still open
(:func:`as_of`), so its next read starts before the write's rows.  A write
that records itself stamps its rows after the record committed: a read
that did not see the record started before that, and so before the rows'
stamp.  A record whose conductor died mid-write is ignored after
:data:`EXPIRY`.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Iterator

from sqlalchemy import Connection, ScalarSelect, Table, delete, func, insert, select

from conductor.common.exception import DatabaseUnavailable
from conductor.db.engine import Database
from conductor.db.models import NodeWriteModel, utcnow

__all__ = ["EXPIRY", "as_of", "earliest_open", "horizon", "read_start", "recorded"]

LOG = logging.getLogger(__name__)

#: How long a record holds change reads back at most.  Longer than any write
#: of node rows takes (each statement is bounded by ``[database]
#: statement_timeout``, an import writes 20,000 rows a statement); a record
#: left by a conductor killed mid-write makes change reads re-read from its
#: stamp until then, which costs rows read, never a change missed.
EXPIRY = datetime.timedelta(seconds=120)

_WRITES: Table = NodeWriteModel.__table__  # type: ignore[assignment]


@contextlib.contextmanager
def recorded(db: Database, stamp: datetime.datetime | None = None) -> Iterator[datetime.datetime]:
    """Record a write of node rows for its duration; yields the stamp to write.

    ``stamp``: the change time the caller must write (tests); by default the
    time just after the record committed.
    """
    noted = utcnow() if stamp is None else min(utcnow(), stamp)
    with db.writing() as connection:
        added = insert(_WRITES).values(stamp=noted, expires_at=noted + EXPIRY)
        key = connection.execute(added).inserted_primary_key
        assert key is not None  # an INSERT of one row
        record = key[0]
    try:
        yield max(noted, utcnow()) if stamp is None else stamp
    finally:
        try:
            with db.writing() as connection:
                connection.execute(delete(_WRITES).where(_WRITES.c.id == record))
        except DatabaseUnavailable:  # said once by the database; it expires
            LOG.debug("Record %s of a node write left to expire", record)


def earliest_open(now: datetime.datetime) -> ScalarSelect[datetime.datetime]:
    """The earliest stamp of the recorded writes open at ``now`` (``NULL``:
    none), as a subquery: a read asks it in the statement it runs anyway."""
    return select(func.min(_WRITES.c.stamp)).where(_WRITES.c.expires_at > now).scalar_subquery()


def as_of(now: datetime.datetime, earliest: datetime.datetime | None) -> datetime.datetime:
    """The "as of" of a change read taken at ``now`` (before its statements),
    where :func:`earliest_open` said ``earliest``."""
    return now if earliest is None else min(now, earliest)


def horizon(connection: Connection, now: datetime.datetime) -> datetime.datetime:
    """:func:`as_of` ``now``, in a statement of its own."""
    return as_of(now, connection.execute(select(earliest_open(now))).scalar())


def read_start(db: Database) -> datetime.datetime:
    """:func:`horizon` of now, in a read of its own: the "as of" of a read of
    every node (a full rebuild of the index) that a change read continues."""
    now = utcnow()
    with db.read() as connection:
        return horizon(connection, now)
