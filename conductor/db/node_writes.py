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

from sqlalchemy import Connection, ScalarSelect, Table, bindparam, delete, func, insert, select

from conductor.common.exception import DatabaseUnavailable
from conductor.db.engine import Database
from conductor.db.models import NodeWriteModel, utcnow

__all__ = [
    "EARLIEST_OPEN_NOW",
    "END_CTE",
    "EXPIRY",
    "OpenWrite",
    "as_of",
    "earliest_open",
    "horizon",
    "read_start",
    "record",
    "recorded",
]

LOG = logging.getLogger(__name__)

#: How long a record holds change reads back at most.  Longer than any write
#: of node rows takes (each statement is bounded by ``[database]
#: statement_timeout``, an import writes 20,000 rows a statement); a record
#: left by a conductor killed mid-write makes change reads re-read from its
#: stamp until then, which costs rows read, never a change missed.
EXPIRY = datetime.timedelta(seconds=120)

_WRITES: Table = NodeWriteModel.__table__  # type: ignore[assignment]
# Built once: a claim by share records itself on every call.
_ADD = insert(_WRITES).values(stamp=bindparam("stamp"), expires_at=bindparam("expires_at"))
_END = delete(_WRITES).where(_WRITES.c.id == bindparam("record"))
#: :data:`_END` as a common table expression, for a write's own statement
#: to end its record in (bound ``record``: :meth:`OpenWrite.ending`).
END_CTE = _END.cte("write_ended")
#: :func:`earliest_open` built once, for statements built once: its instant
#: is their parameter ``now``.
EARLIEST_OPEN_NOW: ScalarSelect[datetime.datetime] = (
    select(func.min(_WRITES.c.stamp)).where(_WRITES.c.expires_at > bindparam("now"))
).scalar_subquery()
_HORIZON = select(EARLIEST_OPEN_NOW)


class OpenWrite:
    """A recorded write under way: its ``stamp``, and the record to end.

    :meth:`end` deletes the record in the write's own transaction, which
    then makes the rows visible and the record gone at once (a reader that
    no longer sees the record sees the rows), one transaction fewer than a
    delete of its own: a claim by share is one statement, and the record's
    transactions were a third of its conductor CPU.
    """

    __slots__ = ("_record", "ended", "stamp")

    def __init__(self, record: int, stamp: datetime.datetime) -> None:
        self._record = record
        self.stamp = stamp
        #: :meth:`end` ran (if its transaction rolled back, the record is
        #: deleted again on the way out of :func:`record`)
        self.ended = False

    def end(self, connection: Connection) -> None:
        """Delete the record in ``connection``'s transaction (the write's)."""
        connection.execute(_END, {"record": self._record})
        self.ended = True

    def ending(self) -> dict[str, int]:
        """The values of a statement of the write's that ends its record
        itself (:data:`END_CTE`, one statement fewer than :meth:`end`); the
        record counts as ended (if that statement fails, or its transaction
        rolls back, :func:`record` deletes it on the way out)."""
        self.ended = True
        return {"record": self._record}


@contextlib.contextmanager
def record(db: Database, stamp: datetime.datetime | None = None) -> Iterator[OpenWrite]:
    """Record a write of node rows for its duration (see :func:`recorded`);
    yields the :class:`OpenWrite`, whose record the write may end in its
    own transaction.  Ended or not, the record is gone on the way out."""
    noted = utcnow() if stamp is None else min(utcnow(), stamp)
    with db.writing() as connection:
        added = connection.execute(_ADD, {"stamp": noted, "expires_at": noted + EXPIRY})
        assert added.inserted_primary_key is not None  # an INSERT of one row
        key = added.inserted_primary_key[0]
    # Stamped after the record committed (see the module's docstring).
    write = OpenWrite(key, max(noted, utcnow()) if stamp is None else stamp)
    failed = True
    try:
        yield write
        failed = False
    finally:
        if failed or not write.ended:  # its own transaction may have rolled back
            try:
                with db.writing() as connection:
                    connection.execute(_END, {"record": write._record})
            except DatabaseUnavailable:  # said once by the database; it expires
                LOG.debug("Record %s of a node write left to expire", write._record)


@contextlib.contextmanager
def recorded(db: Database, stamp: datetime.datetime | None = None) -> Iterator[datetime.datetime]:
    """Record a write of node rows for its duration; yields the stamp to write.

    ``stamp``: the change time the caller must write (tests); by default the
    time just after the record committed.
    """
    with record(db, stamp) as write:
        yield write.stamp


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
    return as_of(now, connection.execute(_HORIZON, {"now": now}).scalar())


def read_start(db: Database) -> datetime.datetime:
    """:func:`horizon` of now, in a read of its own: the "as of" of a read of
    every node (a full rebuild of the index) that a change read continues."""
    now = utcnow()
    with db.read() as connection:
        return horizon(connection, now)
