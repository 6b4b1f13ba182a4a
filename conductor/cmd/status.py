# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-status upgrade check``: is this deployment ready for (or done with) an upgrade?

The checks are in :mod:`conductor.upgrade_checks`; the output and exit
statuses are oslo.upgradecheck's, as ``nova-status`` and ``ironic-status``.
A configuration that cannot be read (a file missing, unreadable or
malformed, a value not valid) is one line on stderr and exit status 255,
oslo.upgradecheck's "the check itself failed", never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from conductor import upgrade_checks
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.prepare import CONFIG_ERRORS, PROJECT, config_error

__all__ = ["main"]

#: oslo.upgradecheck's exit status when the check itself failed.
CHECK_FAILED = 255

DESCRIPTION = (
    "Check that this deployment is ready for an upgrade, or that an upgrade "
    "is complete. Run it with a host's configuration, before and after "
    "upgrading the host; deployment tools run it for you. Checks: the "
    "database schema is at the newest revision of this release; the RPC "
    "version pins of [upgrade_levels] agree with the conductors and agents "
    "that are up; no option is set under a deprecated name or deprecated for "
    "removal."
)

EPILOG = (
    "exit status: 0 every check succeeded; 1 a warning (read the details, the "
    "upgrade may go on); 2 a failure (fix it before going on); 255 the check "
    "itself failed (a configuration file missing, unreadable or malformed, or "
    "a value not valid: one line on stderr). Files: /etc/ringfleet/ringfleet.conf "
    "unless --config-file or --config-dir is given."
)


def _add_commands(checks: upgrade_checks.UpgradeChecks) -> object:
    def add(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
        upgrade = subparsers.add_parser(
            "upgrade",
            help="upgrade readiness checks",
            description=DESCRIPTION,
            epilog=EPILOG,
        )
        upgrade.add_argument(
            "check",
            choices=["check"],
            help="run every check and print a table of their results",
        )
        upgrade.add_argument(
            "--json",
            action="store_true",
            help="print the results as JSON (name, and per check: check, result 0/1/2, "
            "details) instead of a table",
        )
        upgrade.set_defaults(action_fn=_one_line_on_bad_values(checks.check))

    return add


def _fail(message: str) -> int:
    print(f"ringfleet-status: {message}", file=sys.stderr)
    return CHECK_FAILED


def _one_line_on_bad_values(check: Callable[[], int]) -> Callable[[], int]:
    """*check*, with an option value that is not valid (read by a check,
    possibly of a library) said in one line: oslo.upgradecheck would print
    the traceback on stdout."""

    def run() -> int:
        try:
            return check()
        except cfg.ConfigSourceValueError as exc:
            return _fail(config_error(exc))

    return run


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    checks = upgrade_checks.UpgradeChecks(conf)
    conf.register_cli_opt(
        cfg.SubCommandOpt(
            "command",
            title="Commands",
            handler=_add_commands(checks),
            help="'upgrade check' is the only command",
        )
    )
    try:
        conf(
            list(sys.argv[1:] if argv is None else argv),
            project=PROJECT,
            prog="ringfleet-status",
            description=DESCRIPTION,
            epilog=EPILOG,
        )
    except CONFIG_ERRORS as exc:
        return _fail(config_error(exc))
    # oslo.upgradecheck reads --json from its module's CONF (as its own main
    # sets it); the checks themselves use ``conf`` only.
    upgradecheck.CONF = conf
    # The schema check's details say it: not the database's WARNING too,
    # written for a service's log ("requests get ServiceUnavailable").
    engine_log = logging.getLogger("conductor.db.engine")
    level = engine_log.level
    engine_log.setLevel(logging.ERROR)
    try:
        return upgradecheck.run(conf)
    finally:
        engine_log.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
