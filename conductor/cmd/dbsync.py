# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-dbsync``: create, upgrade or check the conductors' database schema.

``ringfleet-dbsync [--config-file F] upgrade`` brings the schema to the
newest version (idempotent, safe to run on every deploy); ``upgrade --sql
[--from REV]`` writes the SQL of that upgrade instead, without connecting,
for a DBA who applies schema changes by hand; ``version`` prints the current
and newest revisions; ``check`` exits 0 when the schema is current, 1 when
it needs an upgrade (for deployment tools and monitoring).  Every command
exits 2 with one line on stderr when the database cannot be reached or the
configuration is unusable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from oslo_config import cfg

from conductor import conf as conductor_conf
from conductor.common.exception import ConfigurationError, DatabaseUnavailable
from conductor.common.prepare import prepare_service
from conductor.db import migration
from conductor.db.engine import Database, database_from_conf

#: Exit statuses.
CURRENT, BEHIND, FAILED = 0, 1, 2


def _add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    upgrade = subparsers.add_parser(
        "upgrade", help="create or upgrade the schema to the newest version"
    )
    upgrade.add_argument(
        "--sql",
        action="store_true",
        help="write the SQL of the upgrade to stdout instead of running it (no connection)",
    )
    upgrade.add_argument(
        "--from",
        dest="start",
        metavar="REVISION",
        help="with --sql: the revision the database is at (default: an empty database)",
    )
    subparsers.add_parser("version", help="print the current and the newest schema version")
    subparsers.add_parser(
        "check", help="exit 0 when the schema is current, 1 when it needs an upgrade"
    )


def _fail(message: str) -> int:
    print(f"ringfleet-dbsync: {message}", file=sys.stderr)
    return FAILED


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    conf.register_cli_opt(
        cfg.SubCommandOpt("command", title="Commands", handler=_add_commands, dest="command")
    )
    conductor_conf.register_opts(conf)
    prepare_service(list(argv) if argv is not None else sys.argv, conf)
    # This command says in one line of its own what failed, and stdout may
    # be SQL for a DBA: the database's WARNING and alembic's progress of an
    # offline run would only repeat or pollute it.
    logging.getLogger("conductor.db.engine").setLevel(logging.ERROR)
    command = conf.command
    if command.name == "upgrade" and command.sql:
        if not conf.database.connection:
            return _fail("[database] connection: must be set (it names the SQL dialect)")
        migration.upgrade_sql(conf.database.connection, command.start, sys.stdout)
        return CURRENT
    if command.name == "upgrade" and command.start:
        return _fail("--from is only for --sql: online, the database says where it is")
    try:
        db = database_from_conf(conf)
    except ConfigurationError as exc:
        return _fail(str(exc))
    try:
        return _run(command.name, db)
    except DatabaseUnavailable as exc:
        return _fail(f"database {db.location} unreachable: {exc.cause}")
    finally:
        db.dispose()


def _run(name: str, db: Database) -> int:
    if name == "upgrade":
        migration.upgrade(db)
        print(f"schema at {migration.current_version(db)}")
        return CURRENT
    current, head = migration.current_version(db), migration.head_version()
    if name == "version":
        print(f"current: {current}  newest: {head}")
        return CURRENT
    if current == head:
        print(f"schema current at {head}")
        return CURRENT
    print(f"schema at {current or 'nothing'}, newest is {head}: run ringfleet-dbsync upgrade")
    return BEHIND


if __name__ == "__main__":
    sys.exit(main())
