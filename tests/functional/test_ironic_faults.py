"""ringfleet on a real Ironic under Ironic's own faults.

The faults are Ironic's, not ringfleet's: its process killed (-9) in the
middle of deploys or of teardowns and started again a few seconds later,
stopped for half a minute, a deploy that fails in Ironic (a node switched to
the ``custom-agent`` deploy interface, whose ramdisk never calls back:
``deploy failed`` after ``[conductor] deploy_callback_timeout``), a node
deleted from Ironic under a build.  As measured on Ironic 39 (fake
hardware), an Ironic started again after a kill moves an interrupted deploy
to ``deploy failed`` and keeps ``target_provision_state = active``, and an
interrupted teardown to ``error`` with no target.

Real etcd, RabbitMQ and PostgreSQL, a conductor and agents as processes
with the ``ironic`` driver, ``build_timeout`` at its default (half an hour):
only the agents' handling of Ironic's states can settle a build in time.
Every test asserts that

* the builds or deletes settle within :data:`RECOVERY_SETTLE` (TTL +
  rehome_grace + 10 s) of the fault clearing (the time is printed: ``-s``);
* no build is lost: every instance ends in the state expected of it;
* no node is orphaned: a node of the test's shards that Ironic shows claimed
  is held by exactly that instance in ringfleet, and the other way round
  (:func:`ironic_disagreements`);
* a deploy that failed in Ironic left Ironic's ``last_error`` in the fault
  of the instance (``attempt N on node X: ...``).

Ironic is killed, stopped and started through ``$RINGFLEET_TEST_CTL``
(:func:`server_ctl`: by PID, on 127.0.0.1); the tests are skipped without
the test Ironic, like ``test_ironic.py``.  An :class:`IronicWatch` lists
the test's nodes ten times a second throughout: it catches the states that
last a moment (a ``deploy failed`` the agent tears down at its next poll)
with their ``last_error``, and its timeline is in every failure message.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.functional.fleet_harness import (
    RECOVERY_SETTLE,
    Fleet,
    ironic_disagreements,
    ironic_fleet,
    log_tails,
    start_processes,
)
from tests.harness import server_ctl, wait_for
from tests.harness.ironic import IronicHarness, IronicWatch, Sighting, unique_shard

#: ``[conductor] deploy_callback_timeout`` of the test Ironic
#: (``tools/test-servers-ctl.sh``): a custom-agent node's deploy fails this
#: long after it began waiting in ``wait call-back``.
CALLBACK_TIMEOUT = float(os.environ.get("RINGFLEET_TEST_IRONIC_CALLBACK_TIMEOUT", "20"))
#: How long Ironic stays dead after a kill -9 ...
KILLED_FOR = 6.0
#: ... and stopped in the outage test.
OUTAGE = 30.0
#: Ironic 39's last_error on a transition its restart interrupted
#: (``ironic/conductor/base_manager.py``).
INTERRUPTED = "can't be resumed by conductor"
#: Ironic 39's last_error on a deploy whose ramdisk never called back.
CALLBACK_TIMED_OUT = "Timeout reached while waiting for callback"


@pytest.fixture
def other_shard() -> str:
    """A second shard of the test's own (the fleet imports both)."""
    return unique_shard()


@pytest.fixture
def fleet(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    shard: str,
    other_shard: str,
) -> Iterator[Fleet]:
    with ironic_fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        ironic_url=ironic_url,
        shards=[shard, other_shard],
    ) as f:
        yield f


@pytest.fixture
def watch(ironic_url: str, shard: str, other_shard: str) -> Iterator[IronicWatch]:
    with IronicWatch(ironic_url, [shard, other_shard]) as watcher:
        yield watcher


@pytest.fixture
def restarts_ironic() -> Iterator[None]:
    """The test kills or stops Ironic: it is running again afterwards, whatever happened."""
    server_ctl("pid ironic")  # skips the test without tools/with-test-servers.sh
    try:
        yield
    finally:
        server_ctl("start-ironic")


# -- helpers -------------------------------------------------------------------------


def _start(
    fleet: Fleet,
    agents: Iterable[str] = ("agent-1",),
    *,
    extra: Mapping[str, str] | None = None,
    owned: Iterable[str] | None = None,
) -> None:
    """Conductor ``cond-1`` and ``agents`` serving, Ironic's nodes imported,
    flavor ``bm``; once ``owned`` (by default every node) have an owner."""
    start_processes(fleet, agents=tuple(agents), extra=extra)
    fleet.api.sync_ironic_nodes()
    fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
    nodes = list(owned) if owned is not None else list(fleet.owners())
    wait_for(lambda: all(fleet.owners()[n][0] is not None for n in nodes), 30, "the nodes owned")


def _build(fleet: Fleet, count: int) -> list[str]:
    return [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": count})]


def _claimed_in(
    ironic: IronicHarness, shard: str, instances: Iterable[str], states: Iterable[str]
) -> dict[str, str]:
    """instance -> node, once Ironic shows each of ``instances`` claiming a
    node of ``shard`` in one of ``states``."""
    wanted, within = set(instances), set(states)

    def claimed() -> dict[str, str] | None:
        found = {
            n["instance_uuid"]: n["uuid"]
            for n in ironic.nodes(shard)
            if n["instance_uuid"] in wanted and n["provision_state"] in within
        }
        return found if set(found) == wanted else None

    found: dict[str, str] = wait_for(
        claimed, 60, f"Ironic shows {len(wanted)} instances {'/'.join(within)}", step=0.05
    )
    return found


def _waits_for_a_callback(ironic: IronicHarness, node: str) -> None:
    """Switch the node to the custom-agent deploy interface: its deploy waits
    in ``wait call-back`` for a ramdisk that never calls.  No automated
    cleaning: custom-agent would wait for a ramdisk in ``clean wait`` too."""
    ironic.update(node, deploy_interface="custom-agent", automated_clean=False)


def _settle(
    fleet: Fleet,
    watch: IronicWatch,
    expected: Mapping[str, str],
    since: float,
    what: str,
    limit: float = RECOVERY_SETTLE,
) -> float:
    """Seconds after ``since`` until every instance is in its expected
    vm_state; fails at once when one ends in another, or after ``limit`` s."""
    deadline = since + limit
    while True:
        shown = {u: fleet.api.show_instance(u) for u in expected}
        if all(shown[u]["vm_state"] == state for u, state in expected.items()):
            return time.monotonic() - since
        lost = [
            u
            for u, state in expected.items()
            if shown[u]["vm_state"] in ("active", "error", "deleted")
            and shown[u]["vm_state"] != state
        ]
        if lost or time.monotonic() > deadline:
            verdict = "ended in another state" if lost else f"not within {limit:.0f} s"
            pytest.fail(
                f"{what}: {verdict} (at {time.monotonic() - since:.1f} s):\n"
                + "\n".join(
                    f"  {u}: {i['vm_state']}/{i['task_state']} (expected {expected[u]}) "
                    f"node {i['node_uuid']} attempts {i['attempts']} fault {i['fault']!r}"
                    for u, i in shown.items()
                )
                + f"\nIronic, in s after the fault cleared:\n{watch.timeline(since)}\n"
                + log_tails(fleet, mentioning=list(expected))
            )
        time.sleep(0.1)


def _assert_agree(
    fleet: Fleet, ironic: IronicHarness, shards: Iterable[str], active: Iterable[str] = ()
) -> None:
    """No orphan: Ironic's claims are ringfleet's, and each ``active``
    instance is deployed in Ironic on the node ringfleet shows it on."""
    wrong = ironic_disagreements(fleet, ironic, *shards)
    assert not wrong, "Ironic disagrees with ringfleet:\n  " + "\n  ".join(wrong)
    for instance in active:
        node = fleet.api.show_instance(instance)["node_uuid"]
        record = ironic.node(node)
        assert (record["provision_state"], record["instance_uuid"]) == ("active", instance)
        assert fleet.owners()[node][2] == instance


def _assert_faults_carry_ironic_errors(
    fleet: Fleet, watch: IronicWatch, instances: Iterable[str], reason: str
) -> int:
    """Each failed attempt of ``instances`` carries Ironic's ``last_error``:
    the one the watch saw on that node for that instance, else ``reason``
    (Ironic's wording, when the agent tore the node down before the watch
    looked).  The number of failed attempts."""
    failures = watch.failures()
    attempts = 0
    for instance in instances:
        shown = fleet.api.show_instance(instance)
        lines = (shown["fault"] or "").splitlines()
        assert len(lines) == shown["attempts"] == len(shown["tried_nodes"]), shown
        for node, line in zip(shown["tried_nodes"], lines, strict=True):
            assert f"on node {node}" in line, shown
            errors = {s.last_error for s in failures.get(node, ()) if s.instance_uuid == instance}
            assert reason in line or any(e and e in line for e in errors), (line, errors)
            if errors:
                assert any(e and e in line for e in errors), (line, errors)
        attempts += shown["attempts"]
    return attempts


def _ironic_log_lines(fleet: Fleet, agent: str, text: str) -> list[str]:
    return [line for line in fleet.procs[agent].log().splitlines() if text in line]


# -- the faults ---------------------------------------------------------------------


def test_a_delete_of_a_build_waiting_for_its_callback_ends_before_the_timeout(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
) -> None:
    (node,) = ironic.enroll(1, shard=shard)
    _waits_for_a_callback(ironic, node)
    _start(fleet)
    [instance] = _build(fleet, 1)
    waiting: Sighting = wait_for(
        lambda: watch.first(node, "wait call-back"), 30, "Ironic waiting for a callback"
    )
    assert waiting.instance_uuid == instance

    asked = time.monotonic()
    fleet.api.delete_instance(instance)
    # Far below the callback timeout: the delete stops the deploy, it does
    # not wait for Ironic to give up on it.
    limit = min(RECOVERY_SETTLE, CALLBACK_TIMEOUT / 2)
    took = _settle(fleet, watch, {instance: "deleted"}, asked, "the delete", limit)
    print(
        f"delete in wait call-back: DELETED {took:.1f} s after the delete, "
        f"{time.monotonic() - waiting.at:.1f} s after the wait began "
        f"(callback timeout {CALLBACK_TIMEOUT:.0f} s)"
    )
    assert watch.first(node, "deploy failed") is None, watch.timeline(asked)
    record = ironic.node(node)
    assert (record["provision_state"], record["instance_uuid"]) == ("available", None)
    _assert_agree(fleet, ironic, [shard, other_shard])
