"""``ringfleet-dbsync``: create or upgrade the conductors' database schema.

``ringfleet-dbsync [--config-file F] upgrade`` brings the schema to the
newest version (idempotent, safe to run on every deploy); ``version`` prints
the current and newest revisions.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from oslo_config import cfg

from conductor import conf as conductor_conf
from conductor.common.exception import ConfigurationError
from conductor.common.prepare import prepare_service
from conductor.db import migration
from conductor.db.engine import database_from_conf


def _add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    subparsers.add_parser("upgrade", help="create or upgrade the schema to the newest version")
    subparsers.add_parser("version", help="print the current and the newest schema version")


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    conf.register_cli_opt(
        cfg.SubCommandOpt("command", title="Commands", handler=_add_commands, dest="command")
    )
    conductor_conf.register_opts(conf)
    prepare_service(list(argv) if argv is not None else sys.argv, conf)
    try:
        db = database_from_conf(conf)
    except ConfigurationError as exc:
        print(f"ringfleet-dbsync: {exc}", file=sys.stderr)
        return 2
    try:
        if conf.command.name == "upgrade":
            migration.upgrade(db)
            print(f"schema at {migration.current_version(db)}")
        else:
            print(f"current: {migration.current_version(db)}  newest: {migration.head_version()}")
    finally:
        db.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
