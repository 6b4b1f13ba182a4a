# SPDX-License-Identifier: Apache-2.0
"""An embedded conductor for CLI tests: in-process, no servers.

A real :class:`conductor.service.ConductorService` runs in a thread on
``kombu+memory:////``, SQLite and a tooz ``file://`` group; "agents" are
plain memberships in that group (``agent-1``, ``agent-2`` serving group
``rack-b``, and ``agent-old`` announcing another ring version), and nodes
are claimed for them through the agents' RPC method.  Commands are driven
through ``RingfleetApp().run([...])`` with ``--config-file``, as an
operator would type them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oslo_config import cfg

from conductor.cli.app import RingfleetApp
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.rpcapi import ConductorAPI
from conductor.service import ConductorService
from hashring.membership import Membership
from tests.dbutil import migrated
from tests.harness import wait_for

__all__ = ["Embedded", "Result", "embedded_fleet", "without_fleet_lines"]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Embedded:
    config: Path
    service: ConductorService
    api: ConductorAPI
    workdir: Path

    def run(self, *argv: str, config: tuple[Path, ...] = ()) -> Result:
        """``ringfleet --config-file CONFIG [--config-file C...] ARGV``;
        ``config``: more files, read after the fleet's (their options win)."""
        app = RingfleetApp()
        out, err = io.StringIO(), io.StringIO()
        app.stdout, app.stderr = out, err
        files = [arg for path in (self.config, *config) for arg in ("--config-file", str(path))]
        code = app.run([*files, *argv])
        return Result(code, out.getvalue(), without_fleet_lines(err.getvalue()))


#: What the fleet's own services, run in this process, log when a loaded
#: machine delays their heartbeats, when a membership first sees the agent
#: of another ring version, or a build's routing (a thread of an
#: earlier test's conductor, still winding down): it reaches the CLI's
#: stderr here only.
_FLEET_LINE = re.compile(
    r"^(Membership of \S+ in group |Agent \S+ membership |Instance \S+: "
    r"|Member \S+ is excluded from the ring )"
)


def without_fleet_lines(err: str) -> str:
    """``err`` without the lines of the services run in this process."""
    return "".join(line for line in err.splitlines(keepends=True) if not _FLEET_LINE.match(line))


@contextlib.contextmanager
def embedded_fleet(workdir: Path, group: str, extra_config: str = "") -> Iterator[Embedded]:
    """A conductor with its three agents' memberships, its configuration
    file (plus ``extra_config``) in ``workdir``; stopped on exit."""
    db_url = f"sqlite:///{workdir / 'ringfleet.db'}"
    migrated(db_url).dispose()
    coordination = workdir / "tooz"
    coordination.mkdir()
    url = f"file://{coordination}?timeout=5"
    config = workdir / "ringfleet.conf"
    config.write_text(
        "[DEFAULT]\n"
        "host = cond-1\n"
        "transport_url = kombu+memory:////\n"
        "[database]\n"
        f"connection = {db_url}\n"
        "[coordination]\n"
        f"backend_url = {url}\n"
        f"group = {group}\n"
        "watch_interval = 0.1\n"
        "[scheduler]\n"
        "index_refresh_interval = 0.1\n" + extra_config
    )
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf(["--config-file", str(config)], project="ringfleet")
    service = ConductorService(conf)
    thread = threading.Thread(target=service.run, name="conductor", daemon=True)
    thread.start()
    assert service.wait_started(30)
    agents = [
        Membership(url, "agent-1", group=group, watch_interval=0.1),
        Membership(
            url, "agent-2", group=group, watch_interval=0.1, capabilities={"groups": ["rack-b"]}
        ),
        # Another ring version: excluded from every view.
        Membership(url, "agent-old", group=group, watch_interval=0.1, ring_version=2),
    ]
    for agent in agents:
        agent.start()
    transport = rpc.get_transport(conf)
    api = ConductorAPI(transport, timeout=30)
    embedded = Embedded(config, service, api, workdir)
    try:

        def sees_all() -> bool:
            view = service.fleet.view() if service.fleet else None
            return (
                view is not None
                and set(view.members) == {"agent-1", "agent-2"}
                and bool(view.excluded)
            )

        wait_for(sees_all, 20, "the conductor sees both agents and the excluded one", step=0.05)
        yield embedded
    finally:
        for agent in agents:
            agent.stop()
        transport.cleanup()
        service.terminate()
        thread.join(30)
