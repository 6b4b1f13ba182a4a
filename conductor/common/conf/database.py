# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[database]`` group."""

from __future__ import annotations

from oslo_config import cfg

from conductor.common.conf.groups import GroupOptions

group = cfg.OptGroup("database", title="Database options")

opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help=(
            "SQLAlchemy URL of the conductors' database, shared by every "
            "conductor: 'postgresql+psycopg2://user:pass@host/ringfleet' in "
            "production. SQLite ('sqlite:////var/lib/ringfleet/ringfleet.db') "
            "serializes all writes: fine for one conductor host and the "
            "embedded mode, not for an active-active pair on two hosts."
        ),
    ),
    cfg.BoolOpt(
        "connection_debug",
        default=False,
        help="Log every SQL statement (very verbose; for debugging only).",
    ),
    cfg.IntOpt(
        "max_pool_size",
        default=20,
        min=1,
        help=(
            "Connections each process keeps open to the database (not used "
            "with SQLite). Size it to the threads that use the database at "
            "once: [conductor] workers plus the RPC executor threads busy with "
            "agent reports. Up to 10 more are opened under bursts, but each of "
            "those is closed again after use, and opening one costs far more "
            "than a transaction. Mind the server's max_connections times the "
            "number of conductors."
        ),
    ),
    cfg.IntOpt(
        "connect_timeout",
        default=10,
        min=1,
        help=(
            "Seconds to wait for a new connection to the database (PostgreSQL, "
            "MySQL/MariaDB). A PostgreSQL server that accepts TCP but never "
            "answers is then reported unreachable within this time instead of "
            "holding the caller forever; with MySQL/MariaDB the server's "
            "greeting is read under statement_timeout."
        ),
    ),
    cfg.IntOpt(
        "statement_timeout",
        default=60,
        min=0,
        help=(
            "Seconds one SQL statement may run before it is abandoned "
            "(0: no limit). PostgreSQL cancels it on the server "
            "(statement_timeout), and the conductor breaks the connection of "
            "one still unanswered 5 s later (a hung server); with MySQL/MariaDB "
            "the client gives up reading or writing the connection after this "
            "long, which also covers a server that stopped answering. The caller gets a "
            "retryable ServiceUnavailable. Every statement ringfleet runs "
            "takes milliseconds; keep this well above a slow server's worst."
        ),
    ),
]

OPTIONS = GroupOptions(group, opts)
