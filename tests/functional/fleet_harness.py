# SPDX-License-Identifier: Apache-2.0
"""A whole fleet as processes: conductors and compute agents on real servers.

Every process gets its own config file and log; the simulated driver of all
agents appends to one shared action log, which the tests check for fencing
violations after every fault.  A fleet of the ``ironic`` driver
(:func:`ironic_fleet`) is checked against Ironic's own records instead
(:func:`ironic_disagreements`).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import oslo_messaging as messaging
from sqlalchemy import select

from compute_agent.drivers.simulated.action_log import Action, check_fencing, read_log
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from hashring.ring import ring_of
from tests.dbutil import fresh_database, migrated
from tests.functional.conductor_harness import client
from tests.functional.harness import unique_group
from tests.harness import ServiceProcess
from tests.harness.ironic import IronicHarness, fleet_config

TTL = 3  # membership_timeout: etcd grants no less than ~2.3 s
REHOME_GRACE = 8.0
#: Every build and teardown in flight ends within this many seconds of a
#: fault clearing (design invariant 9): a dead owner's pins are re-homed
#: after the TTL and rehome_grace, and a few seconds more finish the work.
RECOVERY_SETTLE = TTL + REHOME_GRACE + 10.0


class Fleet:
    """Config, processes and a client for one test's fleet."""

    def __init__(
        self,
        workdir: Path,
        *,
        db_url: str,
        transport_url: str,
        etcd_url: str,
        step_duration: float = 0.05,
        failure_rate: float = 0.0,
        restart_grace: float = 60.0,
        driver: str = "simulated",
        common_extra: str = "",
        client_transport_url: str | None = None,
        client_db_url: str | None = None,
        backend_url: str | None = None,
        watch_interval: float = 0.2,
    ) -> None:
        """``driver`` is every agent's compute driver; ``common_extra`` is
        appended to every process's config (whole groups, e.g. ``[ironic]``).
        ``client_transport_url`` and ``client_db_url`` are what the test's own
        RPC client and database reads use, when not the processes' URLs (the
        processes' go through a proxy the test cuts, the test's must not).
        ``backend_url`` is the whole ``[coordination] backend_url`` when not
        ``etcd_url`` with the test TTL (a Redis one, say); ``watch_interval``
        is ``[coordination] watch_interval``."""
        self.workdir = workdir
        self.db_url = db_url
        self.group = unique_group("fleet")
        self.action_log = workdir / "actions.jsonl"
        self.common = (
            f"transport_url = {transport_url}\n"
            "debug = true\n"
            "[database]\n"
            f"connection = {db_url}\n"
            "[coordination]\n"
            f"backend_url = {backend_url or f'{etcd_url}?membership_timeout={TTL}'}\n"
            f"group = {self.group}\n"
            f"watch_interval = {watch_interval:g}\n"
            "[conductor]\n"
            f"rehome_grace = {REHOME_GRACE}\n"
            f"restart_grace = {restart_grace}\n"
            "accept_timeout = 5\n"
            "[scheduler]\n"
            "index_refresh_interval = 0.2\n"
            "[compute_agent]\n"
            f"driver = {driver}\n"
            "reconcile_interval = 1\n"
            "report_interval = 2\n"
            "quiet_reconcile_interval = 1\n"
            "graceful_timeout = 20\n"
            "[simulated_driver]\n"
            f"action_log = {self.action_log}\n"
            f"node_store = {workdir / 'nodes.sqlite'}\n"
            f"step_duration = {step_duration}\n"
            "clean_duration = 0.05\n"
            f"failure_rate = {failure_rate}\n"
            f"{common_extra}"
        )
        self.procs: dict[str, ServiceProcess] = {}
        self.api, self._transport = client(client_transport_url or transport_url)
        self.db = Database(client_db_url or db_url)

    def _spawn(self, module: str, name: str, extra: str = "") -> ServiceProcess:
        """Start a daemon; ``extra`` is appended to its config file (whole groups)."""
        config = self.workdir / f"{name}.conf"
        log = self.workdir / f"{name}.log"
        config.write_text(f"[DEFAULT]\nhost = {name}\nlog_file = {log}\n{self.common}{extra}")
        proc = ServiceProcess(module, name, config, log).start()
        self.procs[name] = proc
        return proc

    def conductor(self, name: str = "cond-1", extra: str = "") -> ServiceProcess:
        proc = self._spawn("conductor.cmd.conductor", name, extra)
        proc.wait_serving()
        return proc

    def agent(self, name: str, wait: bool = True, extra: str = "") -> ServiceProcess:
        proc = self._spawn("compute_agent.cmd.agent", name, extra)
        if wait:
            proc.wait_serving()
        return proc

    def owners(self) -> dict[str, tuple[str | None, int, str | None]]:
        """node uuid -> (owner, epoch, instance) straight from the database."""
        with self.db.transaction() as session:
            rows = session.execute(
                select(
                    NodeModel.uuid, NodeModel.owner, NodeModel.owner_epoch, NodeModel.instance_uuid
                )
            ).all()
        return {u: (o, e, i) for u, o, e, i in rows}

    def owned_by(self) -> dict[str | None, set[str]]:
        result: dict[str | None, set[str]] = {}
        for node, (owner, _epoch, _inst) in self.owners().items():
            result.setdefault(owner, set()).add(node)
        return result

    def actions(self) -> list[Action]:
        return read_log(self.action_log) if self.action_log.exists() else []

    def fencing_violations(self) -> list[str]:
        if not self.action_log.exists():
            return []
        return check_fencing(read_log(self.action_log))

    def close(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        close_in_background(self._transport)
        self.db.dispose()


def close_in_background(transport: messaging.Transport) -> None:
    """Clean a test client's transport up without waiting for it.

    Its reply listener sees the stop only when its idle wait on the broker
    ends (oslo.messaging: up to 5 s): every test's teardown waited for that.
    Nothing of the test depends on it; the next test has its own client.
    """
    threading.Thread(target=transport.cleanup, name="close-test-client", daemon=True).start()


def start_processes(
    fleet: Fleet,
    conductors: Sequence[str] = ("cond-1",),
    agents: Sequence[str] = (),
    timeout: float = 60,
    extra: Mapping[str, str] | None = None,
) -> None:
    """Start the conductors together, then the agents together; wait until each serves.

    (:meth:`Fleet.conductor` and :meth:`Fleet.agent` wait for one process
    after the other; on a 2-core machine starting them together saves
    seconds per test.)  Conductors come first: an agent's first call to a
    conductor topic that nobody consumes yet is dropped by the broker and
    waits for its whole ``conductor_timeout``.  ``extra`` maps a process
    name to config appended to its file (whole groups).
    """
    for group, module in (
        (conductors, "conductor.cmd.conductor"),
        (agents, "compute_agent.cmd.agent"),
    ):
        procs = [fleet._spawn(module, name, (extra or {}).get(name, "")) for name in group]
        for proc in procs:
            proc.wait_log("serving topic", timeout)


@contextlib.contextmanager
def running_fleet(
    workdir: Path,
    *,
    database_url: str,
    db_prefix: str,
    transport_url: str,
    etcd_url: str,
    agents: Sequence[str] = (),
    step_duration: float = 0.05,
) -> Iterator[Fleet]:
    """A :class:`Fleet` on a fresh database (dropped afterwards), one
    conductor ``cond-1`` and ``agents`` serving; every process killed at the end."""
    with fresh_database(database_url, db_prefix) as url:
        migrated(url).dispose()
        fleet = Fleet(
            workdir,
            db_url=url,
            transport_url=transport_url,
            etcd_url=etcd_url,
            step_duration=step_duration,
        )
        try:
            start_processes(fleet, ["cond-1"], agents)
            yield fleet
        finally:
            fleet.close()


@contextlib.contextmanager
def ironic_fleet(
    workdir: Path,
    *,
    db_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    shards: Sequence[str],
) -> Iterator[Fleet]:
    """A :class:`Fleet` of the ``ironic`` driver on the test Ironic, importing
    the nodes of ``shards`` only, on a migrated database (``db_url``); no
    process started; every process killed at the end."""
    migrated(db_url).dispose()
    fleet = Fleet(
        workdir,
        db_url=db_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        driver="ironic",
        common_extra=fleet_config(ironic_url, ",".join(shards)),
    )
    try:
        yield fleet
    finally:
        fleet.close()


def ironic_disagreements(fleet: Fleet, ironic: IronicHarness, *shards: str) -> list[str]:
    """Where Ironic's records of the nodes of ``shards`` and ringfleet's
    differ (nothing is building any more): an instance on a node in one and
    not in the other, or a node whose Ironic state does not fit."""
    with fleet.db.transaction() as session:
        hosted = {
            row.uuid: row.instance_uuid
            for row in session.execute(select(NodeModel.uuid, NodeModel.instance_uuid))
        }
    wrong = []
    listed = set()
    for shard in shards:
        for record in ironic.nodes(shard):
            listed.add(record["uuid"])
            ours = hosted.get(record["uuid"])
            theirs = record["instance_uuid"]
            state = record["provision_state"]
            if ours != theirs:
                wrong.append(f"node {record['uuid']}: ringfleet {ours}, Ironic {theirs} ({state})")
            elif theirs is not None and state != "active":
                wrong.append(f"node {record['uuid']}: instance {theirs} but Ironic shows {state}")
            elif theirs is None and state != "available":
                wrong.append(f"node {record['uuid']}: no instance but Ironic shows {state}")
    for node, instance in hosted.items():
        if instance is not None and node not in listed:
            wrong.append(f"node {node}: ringfleet {instance}, not in Ironic")
    return wrong


def log_lines(fleet: Fleet, process: str, *texts: str) -> list[str]:
    """The lines of ``process``'s log that contain every one of ``texts``."""
    return [
        line for line in fleet.procs[process].log().splitlines() if all(t in line for t in texts)
    ]


def shared_nodes(
    agents: Sequence[str], names: Sequence[str], **fields: object
) -> list[dict[str, object]]:
    """Node specs named ``names`` (with ``fields``), whose uuids give every
    one of ``agents`` (each of weight 1, serving every group) a share of
    at least one node.

    A node's owner is its uuid's place on the ring: with random uuids one
    agent of three had no node of 16 in one run of 200 or so, and a test
    waiting for every agent to own some waited in vain.  These uuids are
    the same in every run.
    """
    ring = ring_of(dict.fromkeys(agents, 1.0))
    for salt in itertools.count():
        uuids = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"ringfleet-{salt}-{name}")) for name in names]
        if set(ring.assign(uuids)) == set(agents):
            return [{"name": n, "uuid": u, **fields} for n, u in zip(names, uuids, strict=True)]
    raise AssertionError("unreachable")


def error_lines(fleet: Fleet, *processes: str) -> dict[str, list[str]]:
    """The ERROR and traceback lines of each of ``processes``' logs (all by
    default), by process: none is the expected."""
    return {
        name: [line for line in proc.log().splitlines() if " ERROR " in line or "Traceback" in line]
        for name, proc in sorted(fleet.procs.items())
        if not processes or name in processes
    }


def log_tails(
    fleet: Fleet, lines: int = 30, mentioning: Iterable[str] = (), per_match: int = 8
) -> str:
    """For a failure message: the end of every process log, DEBUG lines left
    out, and the lines that mention any of ``mentioning`` (e.g. the ids of
    stuck instances), the last ``per_match`` per id and process."""
    wanted = list(mentioning)
    out: list[str] = []
    for name, proc in sorted(fleet.procs.items()):
        text = proc.log().splitlines()
        state = "not started" if proc.proc is None else f"exit {proc.proc.poll()}"
        out.append(f"===== {name} ({state}, {proc.log_file}) =====")
        for item in wanted:
            hits = [line for line in text if item in line]
            if hits:
                out.append(f"--- lines mentioning {item} ({len(hits)}, the last {per_match}):")
                out.extend(hits[-per_match:])
        out.append(f"--- last {lines} lines above DEBUG:")
        out.extend([line for line in text if " DEBUG " not in line][-lines:])
    return "\n".join(out)
