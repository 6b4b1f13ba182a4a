# SPDX-License-Identifier: Apache-2.0
"""K compute agents in one Python process, for the scale benchmark.

Run as ``python benchmarks/multi_agent.py --config-file FILE --host a --host b ...``
(by path, not ``-m``: with ``scale_bench --code DIR`` the services come from
another checkout, which may have no such module; this file imports only the
product's packages, found through ``PYTHONPATH``).

Why: 50 or 100 agent processes on a 2-core machine each import the whole
package (oslo.messaging, SQLAlchemy, tooz...) and cost minutes of CPU and
~100 MB each before the first one serves, so the benchmark measured the
interpreter start-up more than the fleet.  Here each agent is what
``ringfleet-compute-agent`` builds -- an
:class:`compute_agent.service.AgentService` on a ``cfg.ConfigOpts`` of its
own (oslo.config's global ``CONF`` is not used by the services, see
:mod:`fleet_demo.fleet`), from the same config file with its own
``[DEFAULT] host`` -- and its ``run()`` in a native thread.  Every agent
keeps its own RPC transport, etcd membership (its own lease and
heartbeats), ownership manager, driver and metrics registry, and serves its
metrics on its own port (``[metrics] port = 0``: a free one, logged as
``<host> serving metrics on URL``), so the per-agent counters stay apart.
What the agents share: the interpreter (and its GIL), the log file (each
line names its host) and the resident memory, which the benchmark divides
by K for a per-agent share.

``--start-gate FILE``: load the code and build the agents, log
:data:`LOADED`, then start them only once ``FILE`` exists.  The benchmark
opens the gate when every process has loaded: on one host per agent, the
interpreters' start-up (about 1.5 s of CPU each) runs on the agents' own
hosts; here, on two cores, ten of them would otherwise run beside the
conductor during its cold start, and slow it by as much as they take.

Nothing forks: the threads start after the configuration is read, and the
process is started by ``subprocess`` from a fresh interpreter.  SIGTERM or
SIGINT stops every agent gracefully, side by side; the benchmark usually
kills the process (SIGKILL) instead.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from oslo_config import cfg
from oslo_log import log as oslo_log

from compute_agent.service import AgentService
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.prepare import PROJECT, prepare_service
from conductor.common.runner import tune_process

LOG = logging.getLogger("benchmarks.multi_agent")

#: Seconds each agent's graceful stop may take when the process is stopped.
STOP_TIMEOUT = 60.0

#: Logged once the agents are built, before they wait at the start gate.
LOADED = "agents loaded, waiting for the start gate"

#: Seconds between two looks for the start gate's file.
GATE_POLL = 0.02


def agent_conf_for(config_file: str, host: str, setup_logging: bool) -> cfg.ConfigOpts:
    """One agent's private configuration: ``config_file`` with ``host``.

    The same options ``compute_agent.cmd.agent.configure`` registers; logging
    is set up once per process (``setup_logging`` for the first agent only:
    oslo.log configures the root logger, a second setup would only reopen
    the same file).
    """
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.COMPUTE_AGENT)
    argv = [PROJECT, "--config-file", config_file]
    if setup_logging:
        prepare_service(argv, conf)
    else:
        oslo_log.register_options(conf)
        common_conf.register_opts(conf)
        conf(argv[1:], project=PROJECT)
    conf.set_override("host", host)
    return conf


def run_agents(config_file: str, hosts: Sequence[str], gate: Path | None = None) -> int:
    """Run an agent per host until SIGTERM/SIGINT (or until every one
    returned); with ``gate``, start them once that file exists."""
    services = [
        AgentService(agent_conf_for(config_file, host, setup_logging=index == 0))
        for index, host in enumerate(hosts)
    ]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if gate is not None:
        LOG.info("%d %s %s", len(services), LOADED, gate)
        while not gate.exists():
            if stop.wait(GATE_POLL):
                return 0
    failures: list[str] = []

    def serve(service: AgentService) -> None:
        try:
            service.run()
        except BaseException as exc:  # one agent failing ends the process: a bench fault
            LOG.exception("Agent %s failed", service.host)
            failures.append(f"{service.host}: {exc}")
            stop.set()

    runners = [
        threading.Thread(target=serve, args=(service,), name=f"agent-{service.host}", daemon=True)
        for service in services
    ]
    for runner in runners:
        runner.start()
    LOG.info("%d agents started in process: %s", len(services), ", ".join(hosts))
    while not stop.wait(0.5):
        if not any(runner.is_alive() for runner in runners):
            break
    # Side by side: each graceful stop waits for its RPC server and its leave.
    stoppers = [
        threading.Thread(target=service.terminate, name=f"stop-{service.host}", daemon=True)
        for service in services
    ]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join(STOP_TIMEOUT)
    if failures:
        print(f"multi_agent: {'; '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/multi_agent.py",
        description="Run several compute agents as threads of one process (scale benchmark).",
    )
    parser.add_argument("--config-file", required=True, help="every agent's config file")
    parser.add_argument(
        "--host", action="append", required=True, help="an agent's [DEFAULT] host (repeat)"
    )
    parser.add_argument(
        "--start-gate",
        type=Path,
        help=f"start the agents once this file exists (logged: {LOADED!r})",
    )
    args = parser.parse_args(argv)
    if len(set(args.host)) != len(args.host):
        parser.error("hosts must be distinct")
    tune_process()  # as each agent's own process does (run_service)
    return run_agents(args.config_file, args.host, args.start_gate)


if __name__ == "__main__":
    sys.exit(main())
