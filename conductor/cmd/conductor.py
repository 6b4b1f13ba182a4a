"""``ringfleet-conductor``: run one conductor (systemd ``Type=notify``).

SIGTERM/SIGINT stop it gracefully, SIGHUP reloads the mutable options.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from oslo_config import cfg

from conductor import conf as conductor_conf
from conductor.common import rpc
from conductor.common.prepare import prepare_service
from conductor.common.runner import run_service
from conductor.service import ConductorService


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conductor_conf.register_opts(conf)
    prepare_service(list(argv) if argv is not None else sys.argv, conf)
    return run_service(ConductorService(conf), "ringfleet-conductor")


if __name__ == "__main__":
    sys.exit(main())
