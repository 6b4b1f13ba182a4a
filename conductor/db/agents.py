# SPDX-License-Identifier: Apache-2.0
"""What conductors saw of agent membership: when each agent left.

The membership group says who is alive *now*; re-homing pinned nodes needs
to know for how long an agent has been gone, and that must survive a
conductor restart and agree between conductors, so it is stored.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import AgentModel, NodeModel, utcnow

__all__ = [
    "AgentRecord",
    "end_restart_hold",
    "hold_for_restart",
    "list_agents",
    "record_membership",
]


@dataclasses.dataclass(frozen=True, slots=True)
class AgentRecord:
    """One agent as stored (see :class:`conductor.db.models.AgentModel`)."""

    host: str
    first_seen: datetime.datetime
    last_seen: datetime.datetime
    gone_since: datetime.datetime | None
    restart_until: datetime.datetime | None
    weight: float


def record_membership(
    db: Database, live: Mapping[str, float], now: datetime.datetime | None = None
) -> None:
    """Record a membership view: ``live`` maps member id to ring weight.

    Members are (re)marked present; every known agent that is absent, and
    every node owner never seen as a member, is marked gone since ``now``
    unless it already was (the earliest departure wins, whichever conductor
    saw it).
    """
    now = now or utcnow()
    for attempt in range(3):
        try:
            _record(db, live, now)
            return
        except IntegrityError:
            # Another conductor inserted the same new agent first: re-read.
            if attempt == 2:
                raise


@retry_on_dead_connection
def _record(db: Database, live: Mapping[str, float], now: datetime.datetime) -> None:
    with db.transaction() as session:
        known = {row.host: row for row in session.scalars(select(AgentModel))}
        for host, weight in live.items():
            row = known.get(host)
            if row is None:
                session.add(AgentModel(host=host, first_seen=now, last_seen=now, weight=weight))
            else:
                if row.gone_since is not None:
                    # Back after a departure: a restart hold has served.
                    row.restart_until = None
                row.last_seen = now
                row.gone_since = None
                row.weight = weight
        session.execute(
            update(AgentModel)
            .where(AgentModel.host.not_in(list(live)), AgentModel.gone_since.is_(None))
            .values(gone_since=now)
            .execution_options(synchronize_session=False)
        )
        # Owners that died while no conductor watched: never seen, already gone.
        strangers = session.scalars(
            select(NodeModel.owner)
            .where(NodeModel.owner.is_not(None), NodeModel.owner.not_in(list(live)))
            .distinct()
        ).all()
        for stranger in strangers:
            if stranger is not None and stranger not in known:
                session.add(
                    AgentModel(host=stranger, first_seen=now, last_seen=now, gone_since=now)
                )


@retry_on_dead_connection
def hold_for_restart(
    db: Database, host: str, seconds: float, now: datetime.datetime | None = None
) -> datetime.datetime:
    """``host`` stops for a restart: none of its nodes moves for ``seconds``.

    Called by the agent before it leaves the group, so that no peer claims
    its nodes in between.  Returns the deadline.
    """
    now = now or utcnow()
    until = now + datetime.timedelta(seconds=seconds)
    with db.transaction() as session:
        row = session.get(AgentModel, host)
        if row is None:
            session.add(AgentModel(host=host, first_seen=now, last_seen=now, restart_until=until))
        else:
            row.restart_until = until
    return until


@retry_on_dead_connection
def end_restart_hold(db: Database, host: str) -> None:
    """``host`` is back (or will not come back): its nodes move as usual again."""
    with db.transaction() as session:
        session.execute(
            update(AgentModel)
            .where(AgentModel.host == host, AgentModel.restart_until.is_not(None))
            .values(restart_until=None)
            .execution_options(synchronize_session=False)
        )


@retry_on_dead_connection
def list_agents(db: Database) -> list[AgentRecord]:
    """Every agent ever seen, by host."""
    columns = [getattr(AgentModel, field.name) for field in dataclasses.fields(AgentRecord)]
    with db.read() as connection:
        rows = connection.execute(select(*columns).order_by(AgentModel.host))
        return [AgentRecord(*row) for row in rows]
