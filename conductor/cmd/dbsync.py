# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-dbsync``: create, upgrade or check the conductors' database schema.

``ringfleet-dbsync [--config-file F] upgrade`` brings the schema to the
newest version (idempotent, safe to run on every deploy); ``upgrade --sql
[--from REV]`` writes the SQL of that upgrade instead, without connecting,
for a DBA who applies schema changes by hand; ``version`` prints the current
and newest revisions; ``check`` exits 0 when the schema is current, 1 when
it needs an upgrade, 3 when the database is at a revision this code does not
know (a newer ringfleet upgraded it: upgrade this host's ringfleet), for
deployment tools and monitoring.  Every command exits 2 with one line on
stderr, never a traceback, when the database cannot be reached, the
configuration is unusable (a file missing, unreadable or malformed, a value
not valid), the database is newer than this code (``upgrade``) or
``--from`` names no revision of this code.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from oslo_config import cfg

from conductor.common import conf as common_conf
from conductor.common.exception import ConfigurationError, DatabaseUnavailable
from conductor.common.prepare import invalid_option, prepare_service
from conductor.db import migration
from conductor.db.engine import Database, database_from_conf

__all__ = ["main"]

#: Exit statuses: ``check`` says CURRENT, BEHIND or AHEAD (the database is
#: newer than this code); any command FAILED with one line on stderr.
CURRENT, BEHIND, FAILED, AHEAD = 0, 1, 2, 3


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
        "check",
        help="exit 0 when the schema is current, 1 when it needs an upgrade, "
        "3 when the database is newer than this ringfleet",
    )


def _fail(message: str) -> int:
    print(f"ringfleet-dbsync: {message}", file=sys.stderr)
    return FAILED


def _configure(argv: Sequence[str]) -> cfg.ConfigOpts | str:
    """The parsed configuration, or the one line saying why it cannot be."""
    conf = cfg.ConfigOpts()
    conf.register_cli_opt(
        cfg.SubCommandOpt("command", title="Commands", handler=_add_commands, dest="command")
    )
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    prepare_service(argv, conf, prog="ringfleet-dbsync", exit_status=FAILED)
    return invalid_option(conf, "database") or conf


def main(argv: Sequence[str] | None = None) -> int:
    conf = _configure(list(argv) if argv is not None else sys.argv)
    if isinstance(conf, str):
        return _fail(conf)
    # This command says in one line of its own what failed, and stdout may
    # be SQL for a DBA: the database's WARNING and alembic's progress of an
    # offline run would only repeat or pollute it.
    logging.getLogger("conductor.db.engine").setLevel(logging.ERROR)
    command = conf.command
    if command.name == "upgrade" and command.sql:
        return _upgrade_sql(conf.database.connection, command.start)
    if command.name == "upgrade" and command.start:
        return _fail("--from is only for --sql: online, the database says where it is")
    return _online(command.name, conf)


def _online(name: str, conf: cfg.ConfigOpts) -> int:
    try:
        db = database_from_conf(conf)
    except ConfigurationError as exc:
        return _fail(str(exc))
    try:
        return _run(name, db)
    except DatabaseUnavailable as exc:
        return _fail(f"database {db.location} unreachable: {exc.cause}")
    except migration.SchemaNewerThanCode as exc:
        return _fail(str(exc))
    finally:
        db.dispose()


def _upgrade_sql(url: str | None, start: str | None) -> int:
    if not url:
        return _fail("[database] connection: must be set (it names the SQL dialect)")
    try:
        migration.upgrade_sql(url, start, sys.stdout)
    except ConfigurationError as exc:
        return _fail(str(exc))
    except migration.UnknownRevision as exc:
        return _fail(f"--from: {exc}")
    return CURRENT


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
    if current is not None and not migration.is_known(current):
        print(migration.SchemaNewerThanCode(current))
        return AHEAD
    print(f"schema at {current or 'nothing'}, newest is {head}: run ringfleet-dbsync upgrade")
    return BEHIND


if __name__ == "__main__":
    sys.exit(main())
