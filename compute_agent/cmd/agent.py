# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-compute-agent``: run one compute agent (systemd ``Type=notify``).

SIGTERM/SIGINT stop it gracefully (pins kept), SIGHUP reloads the mutable
options.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from oslo_config import cfg

from compute_agent.service import AgentService
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.prepare import prepare_service
from conductor.common.runner import run_service


def configure(argv: Sequence[str]) -> cfg.ConfigOpts:
    """An agent's configuration: the options it reads (and no others) registered,
    ``argv[1:]`` and the config files parsed, logging set up."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.COMPUTE_AGENT)
    prepare_service(argv, conf, prog="ringfleet-compute-agent")
    return conf


def main(argv: Sequence[str] | None = None) -> int:
    conf = configure(list(argv) if argv is not None else sys.argv)
    return run_service(AgentService(conf), "ringfleet-compute-agent")


if __name__ == "__main__":
    sys.exit(main())
