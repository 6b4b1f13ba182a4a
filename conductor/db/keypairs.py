# SPDX-License-Identifier: Apache-2.0
"""Key pairs: users' SSH public keys by name (Nova's ``os-keypairs``).

Keyed by user, as Nova's: a name is unique per user, and a user sees and
uses only their own (in whichever project they act).  The project a key was
created in is kept for the record.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, Table, delete, func, select
from sqlalchemy.exc import IntegrityError

from conductor.common.clock import shown
from conductor.common.exception import DuplicateKeyPair, KeyPairNotFound, QuotaExceeded
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import KeyPairModel, utcnow

__all__ = ["KEY_PAIRS", "create", "get", "list_for", "remove"]

#: The quota's resource name, Nova's.
KEY_PAIRS = "key_pairs"

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
    limit: int,
) -> dict[str, Any]:
    """Store a key pair of ``user_id``.

    The count and the insert are one transaction; two creations racing at
    the limit may both pass (as Nova's own check without its recheck).

    :raises DuplicateKeyPair: the user has one of this name
    :raises QuotaExceeded: the user has ``limit`` already (``-1``: no limit)
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
            if limit >= 0:
                used = connection.execute(
                    select(func.count()).where(_KEYS.c.user_id == user_id)
                ).scalar_one()
                if used >= limit:
                    raise QuotaExceeded(resource=KEY_PAIRS, requested=1, used=used, limit=limit)
            connection.execute(_KEYS.insert().values(**row))
    except IntegrityError:
        raise DuplicateKeyPair(
            field="name", value=name, reason="you have a key pair of this name already"
        ) from None
    return {k: shown(v) if k == "created_at" else v for k, v in row.items() if k != "project_id"}


@retry_on_dead_connection
def list_for(db: Database, user_id: str) -> list[dict[str, Any]]:
    """A user's key pairs, by name (code point order)."""
    with db.read() as connection:
        rows = connection.execute(select(_KEYS).where(_KEYS.c.user_id == user_id)).all()
    # Sorted here, by code point: a database's collation may not be.
    return [_shown(row) for row in sorted(rows, key=lambda row: row.name)]


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
