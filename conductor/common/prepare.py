# SPDX-License-Identifier: Apache-2.0
"""Process start-up shared by every ringfleet command: options, then logging.

Kept out of import time on purpose: a command builds its ``ConfigOpts``,
registers its own role's options on it (:mod:`conductor.conf` or
:mod:`compute_agent.conf`), calls :func:`prepare_service` with its argv, and
only then reads options.
"""

from __future__ import annotations

from collections.abc import Sequence

from oslo_config import cfg
from oslo_log import log

from conductor.common import conf as common_conf

__all__ = ["PROJECT", "prepare_service"]

PROJECT = "ringfleet"


def prepare_service(
    argv: Sequence[str],
    conf: cfg.ConfigOpts,
    *,
    default_config_files: Sequence[str] | None = None,
) -> None:
    """Register the logging and shared options, parse ``argv[1:]`` and config
    files, set up logging.  The role's own options must be registered before."""
    log.register_options(conf)
    common_conf.register_opts(conf)
    conf(
        list(argv[1:]),
        project=PROJECT,
        default_config_files=list(default_config_files)
        if default_config_files is not None
        else None,
    )
    for name in ("host", "my_ip"):
        try:
            getattr(conf, name)  # read now: a bad value is an error at start
        except ValueError as exc:  # oslo.config's ConfigFileValueError
            raise SystemExit(f"{argv[0] if argv else PROJECT}: [DEFAULT] {name}: {exc}") from None
    log.setup(conf, PROJECT)
