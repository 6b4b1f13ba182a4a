# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-conductor``: run one conductor (systemd ``Type=notify``).

SIGTERM/SIGINT stop it gracefully, SIGHUP reloads the mutable options.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from oslo_config import cfg

from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.prepare import prepare_service
from conductor.common.runner import run_service
from conductor.service import ConductorService


def configure(argv: Sequence[str]) -> cfg.ConfigOpts:
    """A conductor's configuration: the options it reads registered, ``argv[1:]``
    and the config files parsed, logging set up."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    prepare_service(argv, conf, prog="ringfleet-conductor")
    return conf


def main(argv: Sequence[str] | None = None) -> int:
    conf = configure(list(argv) if argv is not None else sys.argv)
    return run_service(ConductorService(conf), "ringfleet-conductor")


if __name__ == "__main__":
    sys.exit(main())
