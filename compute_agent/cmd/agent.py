"""``ringfleet-compute-agent``: run one compute agent (systemd ``Type=notify``).

SIGTERM/SIGINT stop it gracefully (pins kept), SIGHUP reloads the mutable
options.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from oslo_config import cfg

from compute_agent import conf as agent_conf
from compute_agent.service import AgentService
from conductor.common import rpc
from conductor.common.prepare import prepare_service
from conductor.common.runner import run_service


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    agent_conf.register_opts(conf)
    prepare_service(list(argv) if argv is not None else sys.argv, conf)
    return run_service(AgentService(conf), "ringfleet-compute-agent")


if __name__ == "__main__":
    sys.exit(main())
