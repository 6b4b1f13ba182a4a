# SPDX-License-Identifier: Apache-2.0
"""Process start-up shared by every ringfleet command: options, then logging.

Kept out of import time on purpose: a command builds its ``ConfigOpts``,
registers the options its role reads on it
(:func:`conductor.common.conf.register_opts`), calls :func:`prepare_service` with its argv, and
only then reads options.  A configuration file that is missing, unreadable
or malformed stops the command with one line naming it, never a traceback.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from oslo_config import cfg
from oslo_log import log

from conductor.common import conf as common_conf
from conductor.common.exception import first_line

__all__ = ["CONFIG_ERRORS", "PROJECT", "config_error", "invalid_option", "prepare_service"]

PROJECT = "ringfleet"

#: What reading the configuration files raises when one is missing,
#: unreadable (a directory, no permission, not text) or malformed.
CONFIG_ERRORS: tuple[type[Exception], ...] = (cfg.Error, OSError, UnicodeDecodeError)

_BAD_VALUE = re.compile(
    r"Value for option (?P<name>\S+) from (?P<where>.*) is not valid: (?P<why>.*)"
)
_LOCATION = re.compile(r"LocationInfo\(location=<[^>]*>, detail='(?P<file>[^']*)'\)")


def config_error(exc: BaseException, group: str | None = None) -> str:
    """One line for an error of :data:`CONFIG_ERRORS`, naming the file (when
    known) and the problem; *group* is the option's group, for a value that
    is not valid."""
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot read configuration file {exc.filename}: {exc.strerror}"
    if isinstance(exc, UnicodeDecodeError):
        return f"cannot read a configuration file (not text): {exc}"
    line = first_line(exc)
    bad = _BAD_VALUE.fullmatch(line) if isinstance(exc, cfg.ConfigSourceValueError) else None
    if bad is None:
        return line
    # oslo.config's "Value for option X from LocationInfo(...) is not valid: Y"
    location = _LOCATION.fullmatch(bad["where"])
    where = location["file"] if location else bad["where"]
    option = f"[{group}] {bad['name']}" if group else bad["name"]
    return f"{where}: {option}: not valid: {bad['why']}"


def invalid_option(conf: cfg.ConfigOpts, group: str) -> str | None:
    """One line for the first option of *group* whose value is not valid
    (oslo.config converts values when read), ``None`` when every one is."""
    options = conf[group]
    for name in sorted(options):
        try:
            getattr(options, name)
        except cfg.ConfigSourceValueError as exc:
            return config_error(exc, group)
    return None


def _stop(prog: str, line: str, exit_status: int) -> NoReturn:
    print(f"{prog}: {line}", file=sys.stderr)
    raise SystemExit(exit_status)


def prepare_service(
    argv: Sequence[str],
    conf: cfg.ConfigOpts,
    *,
    default_config_files: Sequence[str] | None = None,
    prog: str | None = None,
    exit_status: int = 1,
) -> None:
    """Register the logging and shared options, parse ``argv[1:]`` and config
    files, set up logging.  The role's own options must be registered before.

    A configuration that cannot be used (:data:`CONFIG_ERRORS`, a bad
    ``[DEFAULT] host`` or ``my_ip``) is one line on stderr, ``prog:
    reason`` (``prog``: the name of ``argv[0]``), and ``SystemExit`` with
    ``exit_status``.
    """
    prog = prog or (os.path.basename(argv[0]) if argv else PROJECT)
    log.register_options(conf)
    common_conf.register_opts(conf)
    try:
        conf(
            list(argv[1:]),
            project=PROJECT,
            default_config_files=list(default_config_files)
            if default_config_files is not None
            else None,
        )
    except CONFIG_ERRORS as exc:
        _stop(prog, config_error(exc), exit_status)
    for name in ("host", "my_ip"):
        try:
            getattr(conf, name)  # read now: a bad value is an error at start
        except ValueError as exc:  # oslo.config's ConfigFileValueError
            _stop(prog, f"[DEFAULT] {name}: {exc}", exit_status)
    log.setup(conf, PROJECT)
