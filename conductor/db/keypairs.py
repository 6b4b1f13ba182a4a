# SPDX-License-Identifier: Apache-2.0
"""Key pairs: users' SSH public keys by name (Nova's ``os-keypairs``).

Keyed by user, as Nova's: a name is unique per user, and a user sees and
uses only their own (in whichever project they act).  The project a key was
created in is kept for the record.  Nova's ``key_pairs`` quota: a user may
have as many as the limit of the project they create in (its own, else
``[quota] key_pairs``), counted over all their key pairs, race-free.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, Table, delete, func, select
from sqlalchemy.exc import IntegrityError

from conductor.common.clock import shown
from conductor.common.exception import DuplicateKeyPair, KeyPairNotFound, QuotaExceeded
from conductor.db import quotas
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import KeyPairModel, utcnow

__all__ = ["KEY_PAIRS", "count", "create", "get", "list_for", "remove", "used_by"]

#: The quota's resource name, Nova's.
KEY_PAIRS = quotas.KEY_PAIRS

_KEYS: Table = KeyPairModel.__table__  # type: ignore[assignment]


def _shown(row: Row[Any]) -> dict[str, Any]:
    return {
        "name": row.name,
        "type": row.type,
        "fingerprint": row.fingerprint,
        "public_key": row.public_key,
        "user_id": row.user_id,
        "created_at": shown(row.created_at),
    }


@retry_on_dead_connection
def create(
    db: Database,
    *,
    user_id: str,
    project_id: str | None,
    name: str,
    public_key: str,
    fingerprint: str,
    defaults: quotas.Defaults,
) -> dict[str, Any]:
    """Store a key pair of ``user_id``, within the ``key_pairs`` quota of
    ``project_id`` (its own limit, else ``defaults``'; no project: the
    default), counted over the user's key pairs (Nova's, per user).

    Race-free: under a limit, the transaction locks the user's
    ``quota_users`` row before it counts, as a build locks its project's
    (:mod:`conductor.db.quotas`); a user's first limited creation makes the
    row and starts again.

    :raises DuplicateKeyPair: the user has one of this name
    :raises QuotaExceeded: the user has the limit already (``-1``: no limit)
    """
    now = utcnow()
    row: dict[str, Any] = {
        "user_id": user_id,
        "project_id": project_id,
        "name": name,
        "type": "ssh",
        "fingerprint": fingerprint,
        "public_key": public_key,
        "created_at": now,
    }
    try:
        with db.writing() as connection:
            _check_quota(connection, user_id, project_id, defaults)
            connection.execute(_KEYS.insert().values(**row))
    except quotas.NoLockRow:
        quotas.add_user(db, user_id)
        return create(
            db,
            user_id=user_id,
            project_id=project_id,
            name=name,
            public_key=public_key,
            fingerprint=fingerprint,
            defaults=defaults,
        )
    except IntegrityError:
        raise DuplicateKeyPair(
            field="name", value=name, reason="you have a key pair of this name already"
        ) from None
    return {k: shown(v) if k == "created_at" else v for k, v in row.items() if k != "project_id"}


def _limit(connection: Connection, project_id: str | None, defaults: quotas.Defaults) -> int:
    if project_id is None:
        return defaults.limit(KEY_PAIRS)
    return quotas.limits_of(connection, project_id, (KEY_PAIRS,), defaults)[KEY_PAIRS]


def _check_quota(
    connection: Connection, user_id: str, project_id: str | None, defaults: quotas.Defaults
) -> None:
    """Refuse a key pair over the limit, in the creation's transaction
    (the user's lock taken first when a limit applies).

    :raises QuotaExceeded:
    :raises NoLockRow: the user has no lock row yet
    """
    if _limit(connection, project_id, defaults) == quotas.UNLIMITED:
        return
    quotas.lock_user(connection, user_id)
    # Read again under the lock: an admin's change committed meanwhile counts.
    limit = _limit(connection, project_id, defaults)
    used = count(connection, user_id)
    if limit != quotas.UNLIMITED and used >= limit:
        raise QuotaExceeded(resource=KEY_PAIRS, requested=1, used=used, limit=limit)


def count(connection: Connection, user_id: str) -> int:
    """How many key pairs the user has (what their ``key_pairs`` quota counts)."""
    return int(
        connection.execute(select(func.count()).where(_KEYS.c.user_id == user_id)).scalar_one()
    )


@retry_on_dead_connection
def used_by(db: Database, user_id: str) -> int:
    """:func:`count`, in a read of its own."""
    with db.read() as connection:
        return count(connection, user_id)


@retry_on_dead_connection
def list_for(
    db: Database, user_id: str, *, limit: int | None = None, marker: str | None = None
) -> list[dict[str, Any]]:
    """A user's key pairs, by name (code point order): at most ``limit``,
    those after ``marker`` (the name of one of theirs, exclusive).

    The page is cut here, not by the database: its collation may order names
    otherwise, and a user's key pairs are few (their ``key_pairs`` quota).

    :raises KeyPairNotFound: ``marker`` is no key pair of the user's
    """
    with db.read() as connection:
        rows = connection.execute(select(_KEYS).where(_KEYS.c.user_id == user_id)).all()
    ordered = sorted(rows, key=lambda row: str(row.name))
    if marker is not None:
        names = [row.name for row in ordered]
        if marker not in names:
            raise KeyPairNotFound(marker)
        ordered = ordered[names.index(marker) + 1 :]
    return [_shown(row) for row in ordered[:limit]]


@retry_on_dead_connection
def get(db: Database, user_id: str, name: str) -> dict[str, Any]:
    """:raises KeyPairNotFound:"""
    with db.read() as connection:
        row = connection.execute(
            select(_KEYS).where(_KEYS.c.user_id == user_id, _KEYS.c.name == name)
        ).first()
    if row is None:
        raise KeyPairNotFound(name)
    return _shown(row)


@retry_on_dead_connection
def remove(db: Database, user_id: str, name: str) -> None:
    """:raises KeyPairNotFound:"""
    with db.writing() as connection:
        result = connection.execute(
            delete(_KEYS).where(_KEYS.c.user_id == user_id, _KEYS.c.name == name)
        )
    if not result.rowcount:
        raise KeyPairNotFound(name)
