# SPDX-License-Identifier: Apache-2.0
"""ringfleet on a real Ironic under Ironic's own faults.

The faults are Ironic's, not ringfleet's: its process killed (-9) in the
middle of deploys or of teardowns and started again a few seconds later,
killed for 15 s, its API answering 503 for half a minute, a deploy that
fails in Ironic (a node switched to
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
import signal
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from conductor.common.conf import ironic as ironic_conf
from tests.functional.fleet_harness import (
    RECOVERY_SETTLE,
    Fleet,
    error_lines,
    ironic_disagreements,
    ironic_fleet,
    log_tails,
    start_processes,
)
from tests.harness import server_ctl, wait_for
from tests.harness.http_proxy import Http503Proxy
from tests.harness.ironic import IronicHarness, IronicWatch, Sighting, unique_shard

#: ``[conductor] deploy_callback_timeout`` of the test Ironic
#: (``tools/test-servers-ctl.sh``): a custom-agent node's deploy fails this
#: long after it began waiting in ``wait call-back``.
CALLBACK_TIMEOUT = float(os.environ.get("RINGFLEET_TEST_IRONIC_CALLBACK_TIMEOUT", "20"))
#: How long Ironic stays dead after a kill -9 ...
KILLED_FOR = 6.0
#: ... and stopped in the outage test.
OUTAGE = 15.0
#: ... and how long its API answers 503 in the 503 test.
API_503_FOR = 30.0
#: How long Ironic stays frozen (SIGSTOP) in the hung-Ironic test.
FROZEN_FOR = 60.0
#: ``[ironic] timeout`` at its default: a request to a hung Ironic fails then.
REQUEST_TIMEOUT = ironic_conf.REQUEST_TIMEOUT
#: Within how long of the freeze every agent says it: an idle agent probes
#: once a timeout has passed since its last request, and the probe fails a
#: timeout later; a second of the check's interval, three of margin.
SAID_WITHIN = 2 * REQUEST_TIMEOUT + 4.0
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
def fleet(fleet_on_ironic: Fleet) -> Fleet:
    return fleet_on_ironic


@pytest.fixture
def ironic_shards(shard: str, other_shard: str) -> list[str]:
    """The fleet imports both shards (and the watch lists them)."""
    return [shard, other_shard]


@pytest.fixture
def watch(ironic_url: str, ironic_shards: list[str]) -> Iterator[IronicWatch]:
    with IronicWatch(ironic_url, ironic_shards) as watcher:
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


def _kill_ironic_for(seconds: float) -> tuple[float, float]:
    """Ironic killed (-9), dead for ``seconds``, started again: when it was
    killed and when it was back (``time.monotonic()``)."""
    killed = time.monotonic()
    server_ctl("kill-ironic")
    time.sleep(max(0.0, killed + seconds - time.monotonic()))
    server_ctl("start-ironic")
    return killed, time.monotonic()


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


def _assert_released(ironic: IronicHarness, node: str) -> None:
    """Ironic shows the node torn down and unclaimed."""
    record = ironic.node(node)
    assert (record["provision_state"], record["instance_uuid"]) == ("available", None)


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
            if errors:
                assert any(e and e in line for e in errors), (line, errors)
            else:
                assert reason in line, line
        attempts += shown["attempts"]
    return attempts


# -- the faults ---------------------------------------------------------------------


def test_builds_deploying_when_ironic_is_killed_end_active(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
    restarts_ironic: None,
) -> None:
    ironic.enroll(5, shard=shard)  # 3 builds and 2 spare nodes
    _start(fleet, ("agent-1", "agent-2"))
    built = _build(fleet, 3)
    deploying = _claimed_in(ironic, shard, built, ["deploying"])
    old_pid = server_ctl("pid ironic").strip()

    killed, back = _kill_ironic_for(KILLED_FOR)
    assert server_ctl("pid ironic").strip() != old_pid

    took = _settle(fleet, watch, dict.fromkeys(built, "active"), back, "builds after kill -9")
    print(f"kill -9 of Ironic mid-deploy: 3 builds ACTIVE {took:.1f} s after its start")
    _assert_agree(fleet, ironic, [shard, other_shard], active=built)
    # The kill did interrupt deploys: Ironic failed them on its start, and
    # each instance that was rescheduled says why, in Ironic's words.
    interrupted = [n for n in deploying.values() if watch.first(n, "deploy failed", after=killed)]
    failed = _assert_faults_carry_ironic_errors(fleet, watch, built, INTERRUPTED)
    assert interrupted or failed, watch.timeline(back)
    print(f"  {len(interrupted)} interrupted deploys seen in Ironic, {failed} failed attempts")


def test_deletes_tearing_down_when_ironic_is_killed_end_deleted(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
    restarts_ironic: None,
) -> None:
    nodes = ironic.enroll(3, shard=shard)
    _start(fleet, ("agent-1", "agent-2"))
    built = _build(fleet, 3)
    _settle(fleet, watch, dict.fromkeys(built, "active"), time.monotonic(), "builds", 60)
    for instance in built:
        fleet.api.delete_instance(instance)
    wait_for(
        lambda: all(n["provision_state"] == "deleting" for n in ironic.nodes(shard)),
        30,
        "Ironic tearing the 3 nodes down",
        step=0.05,
    )

    killed, back = _kill_ironic_for(KILLED_FOR)

    took = _settle(fleet, watch, dict.fromkeys(built, "deleted"), back, "deletes after kill -9")
    print(f"kill -9 of Ironic mid-teardown: 3 deletes DELETED {took:.1f} s after its start")
    for node in nodes:
        _assert_released(ironic, node)
    _assert_agree(fleet, ironic, [shard, other_shard])
    # The kill did interrupt teardowns (Ironic shows them error on its start).
    interrupted = [n for n in nodes if watch.first(n, "error", after=killed)]
    print(f"  {len(interrupted)} interrupted teardowns seen in Ironic")


def test_a_deploy_failing_in_ironic_is_torn_down_and_rescheduled_with_its_error(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
) -> None:
    (bad,) = ironic.enroll(1, shard=shard, name_prefix=f"{shard}-bad")
    _waits_for_a_callback(ironic, bad)
    _start(fleet)
    [instance] = _build(fleet, 1)
    _claimed_in(ironic, shard, [instance], ["wait call-back"])  # the only node
    # A good node arrives while the bad one waits for its callback.
    (good,) = ironic.enroll(1, shard=shard, name_prefix=f"{shard}-good")
    fleet.api.sync_ironic_nodes()
    wait_for(lambda: fleet.owners()[good][0] is not None, 30, "the good node owned")

    def failed() -> float | None:
        seen = watch.first(bad, "deploy failed")
        if seen is not None:
            return seen.at
        return time.monotonic() if fleet.api.show_instance(instance)["attempts"] else None

    failed_at: float = wait_for(failed, CALLBACK_TIMEOUT + 30, "Ironic failed the deploy")
    took = _settle(fleet, watch, {instance: "active"}, failed_at, "the rescheduled build")
    print(f"deploy failed in Ironic: rescheduled build ACTIVE {took:.1f} s after the failure")

    shown = fleet.api.show_instance(instance)
    assert shown["node_uuid"] == good
    assert shown["tried_nodes"] == [bad]
    assert _assert_faults_carry_ironic_errors(fleet, watch, [instance], CALLBACK_TIMED_OUT) == 1
    _assert_released(ironic, bad)
    assert fleet.owners()[bad][2] is None
    _assert_agree(fleet, ironic, [shard, other_shard], active=[instance])


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
    _assert_released(ironic, node)
    _assert_agree(fleet, ironic, [shard, other_shard])


def test_builds_across_an_ironic_outage_end_active_and_the_outage_is_logged_once(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
    restarts_ironic: None,
) -> None:
    """Ironic gone for 15 s, killed: a SIGTERM would let it finish
    the deploys it runs first (5.5 s measured), which the driver before the
    fix survived; a kill leaves them to fail on its start, as a crash or a
    host lost would."""
    agents = ("agent-1", "agent-2")
    ironic.enroll(6, shard=shard)  # 5 builds and a spare node
    _start(fleet, agents)
    before = _build(fleet, 3)
    deploying = _claimed_in(ironic, shard, before, ["deploying"])
    busy = {fleet.owners()[node][0] for node in deploying.values()}

    stopped = time.monotonic()
    server_ctl("kill-ironic")
    during = _build(fleet, 2)  # routed while Ironic is away
    time.sleep(max(0.0, stopped + OUTAGE - time.monotonic()))
    server_ctl("start-ironic")
    back = time.monotonic()

    built = before + during
    took = _settle(fleet, watch, dict.fromkeys(built, "active"), back, "builds after the outage")
    print(f"Ironic away {back - stopped:.0f} s: 5 builds ACTIVE {took:.1f} s after its start")
    _assert_agree(fleet, ironic, [shard, other_shard], active=built)
    _assert_faults_carry_ironic_errors(fleet, watch, built, INTERRUPTED)
    # One WARNING when Ironic went, one INFO when it came back, per agent
    # that had work in Ironic meanwhile: not a line per poll or per build.
    busy |= {fleet.api.show_instance(u)["host"] for u in during}
    _wait_return_said(fleet, agents)
    for agent in agents:
        went, came = _outage_said(fleet, agent)
        expected = 1 if agent in busy else len(went)
        assert len(went) == expected <= 1, f"{agent}: {went}"
        assert [" WARNING " in line for line in went] == [True] * len(went), went
        assert len(came) == len(went), f"{agent}: {came}"
        assert [" INFO " in line for line in came] == [True] * len(came), came
    print(f"  agents that had work during the outage: {sorted(map(str, busy))}")


def test_a_node_deleted_from_ironic_under_a_build_is_refused_and_the_build_rescheduled(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
) -> None:
    """The build is allocated to a node Ironic no longer has (the inventory
    sync has not retired it yet).  For the first node to be the one routed
    to, the spare is in another group (its own shard) that no agent serves
    yet: a reschedule waits for its owner, who starts once the first node
    was refused."""
    (gone,) = ironic.enroll(1, shard=shard)
    (spare,) = ironic.enroll(1, shard=other_shard)
    _start(fleet, extra={"agent-1": f"[compute_agent]\ngroups = {shard}\n"}, owned=[gone])
    assert fleet.owners()[spare][0] is None
    ironic.delete(gone)
    removed = time.monotonic()

    [instance] = _build(fleet, 1)

    # Routed to the only node with a live owner (a refusal may already have
    # cleared it by the first look: the node is then in tried_nodes).
    def routed() -> list[str]:
        shown = fleet.api.show_instance(instance)
        return list(shown["tried_nodes"]) or [n for n in [shown["node_uuid"]] if n]

    assert wait_for(routed, 10, "routed") == [gone]
    try:
        wait_for(
            lambda: fleet.api.show_instance(instance)["attempts"] >= 1,
            10,
            "the node refused and the build rescheduled",
        )
    except AssertionError:
        shown = fleet.api.show_instance(instance)
        pytest.fail(
            f"still {shown['vm_state']}/{shown['task_state']} on node {shown['node_uuid']} "
            f"after {time.monotonic() - removed:.1f} s, never rescheduled:\n"
            + log_tails(fleet, mentioning=[instance, gone])
        )
    fleet.agent("agent-2", extra=f"[compute_agent]\ngroups = {other_shard}\n")

    took = _settle(fleet, watch, {instance: "active"}, removed, "the rescheduled build")
    print(f"node gone from Ironic: build ACTIVE on another node {took:.1f} s after the removal")
    shown = fleet.api.show_instance(instance)
    assert (shown["node_uuid"], shown["tried_nodes"], shown["attempts"]) == (spare, [gone], 1)
    assert fleet.owners()[gone][2] is None
    _assert_agree(fleet, ironic, [shard, other_shard], active=[instance])

    asked = time.monotonic()
    fleet.api.delete_instance(instance)
    took = _settle(fleet, watch, {instance: "deleted"}, asked, "the delete")
    print(f"  and DELETED {took:.1f} s after the delete")
    _assert_released(ironic, spare)
    _assert_agree(fleet, ironic, [shard, other_shard])


def test_a_stopping_agent_does_not_wait_for_ironic_and_its_restart_picks_the_build_up(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
) -> None:
    """SIGTERM while the agent follows a deploy Ironic is still running (a
    ramdisk that never calls back): the agent stops at once instead of
    waiting ``graceful_timeout`` for Ironic, touches nothing there, and its
    restart picks the build up from Ironic's record -- a delete then ends at
    once."""
    graceful = "[compute_agent]\ngraceful_timeout = 60\n"
    (node,) = ironic.enroll(1, shard=shard)
    _waits_for_a_callback(ironic, node)
    _start(fleet, extra={"agent-1": graceful})
    [instance] = _build(fleet, 1)
    wait_for(lambda: watch.first(node, "wait call-back"), 30, "Ironic waiting for a callback")
    before = ironic.node(node)

    stopping = time.monotonic()
    # Before the fix the stop waited out graceful_timeout (60 s) for the deploy.
    assert fleet.procs["agent-1"].terminate(timeout=30) == 0
    stopped_in = time.monotonic() - stopping
    after = ironic.node(node)
    for field in ("provision_state", "instance_uuid", "provision_updated_at"):
        assert after[field] == before[field], field
    assert fleet.api.show_instance(instance)["vm_state"] == "building"

    fleet.agent("agent-1", extra=graceful)  # back within restart_grace: same node, same epoch
    fleet.procs["agent-1"].wait_log("resuming from deploying", 30)
    asked = time.monotonic()
    fleet.api.delete_instance(instance)
    took = _settle(fleet, watch, {instance: "deleted"}, asked, "the delete after the restart")
    print(
        f"SIGTERM while following a deploy: agent stopped in {stopped_in:.1f} s "
        f"(graceful_timeout 60 s); DELETED {took:.1f} s after the delete"
    )
    _assert_released(ironic, node)
    _assert_agree(fleet, ironic, [shard, other_shard])


def test_an_ironic_api_answering_503_for_half_a_minute_is_waited_out_and_said_once(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
) -> None:
    """Ironic's API answers 503 (a load balancer with no healthy back end)
    for 30 s while builds deploy and more are routed: every build ends
    ACTIVE once it answers again, each agent says so once (WARNING, INFO),
    and the conductor does not log a line per retry of the builds routed
    meanwhile: the agents accept them and wait for Ironic themselves."""
    agents = ("agent-1", "agent-2")
    with (
        Http503Proxy(ironic_url) as proxy,
        ironic_fleet(
            tmp_path,
            db_url=pg_url,
            transport_url=transport_url,
            etcd_url=etcd_url,
            ironic_url=proxy.url,
            shards=[shard, other_shard],
        ) as fleet,
    ):
        ironic.enroll(6, shard=shard)
        _start(fleet, agents)
        before = _build(fleet, 3)
        _claimed_in(ironic, shard, before, ["deploying", "active"])
        failing = time.monotonic()
        proxy.fail()
        during = _build(fleet, 2)
        wait_for(lambda: all(fleet.api.show_instance(u)["node_uuid"] for u in during), 30, "placed")
        time.sleep(max(0.0, failing + API_503_FOR - time.monotonic()))
        proxy.heal()
        healed = time.monotonic()
        built = before + during
        took = _settle(
            fleet, watch, dict.fromkeys(built, "active"), healed, "builds after the 503s"
        )
        print(
            f"Ironic API 503 for {healed - failing:.0f} s ({proxy.answered_503} answers): "
            f"5 builds ACTIVE {took:.1f} s after it answered again"
        )
        _assert_agree(fleet, ironic, [shard, other_shard], active=built)
        _wait_return_said(fleet, agents)
        for agent in agents:
            went, came = _outage_said(fleet, agent)
            assert len(went) <= 1 and len(came) == len(went), (agent, went, came)
            # The 503 itself, or, for an agent whose first use of Ironic (its
            # version discovery) fell in the outage, keystoneauth's discovery
            # failure, which does not keep the status it got.
            assert all(
                " WARNING " in line
                and ("503" in line or "Unable to find a version discovery document" in line)
                for line in went
            ), went
        assert proxy.answered_503 > 0
        # The builds routed during the outage: at most one line each at
        # WARNING or INFO in the conductor while they waited, not one per retry.
        conductor = fleet.procs["cond-1"].log().splitlines()
        for instance in during:
            waits = [
                line
                for line in conductor
                if instance in line
                and ("retrying" in line or "waits for" in line)
                and (" WARNING " in line or " INFO " in line)
            ]
            assert len(waits) <= 1, "\n".join(waits)


def test_a_hung_ironic_is_said_once_per_agent_and_a_stop_does_not_wait_for_it(
    fleet: Fleet,
    ironic: IronicHarness,
    watch: IronicWatch,
    shard: str,
    other_shard: str,
    restarts_ironic: None,
) -> None:
    """Ironic frozen (SIGSTOP) for a minute under builds, at the default
    request timeout: every agent, busy or idle, says it once (WARNING) within
    the timeout and the idle probe's wait, and ``fleet check`` reports each
    BACKEND-UNREACHABLE; an agent told to stop meanwhile stops in less than
    the timeout (a deploy inside a request is left there, not waited for).
    After the thaw each agent says once that Ironic answers, the check
    clears, the builds are ACTIVE within RECOVERY_SETTLE, Ironic agrees,
    and no service logged an ERROR or a traceback."""
    agents = ("agent-1", "agent-2", "agent-3")
    ironic.enroll(6, shard=shard)
    _start(fleet, agents)
    before = _build(fleet, 2)
    _claimed_in(ironic, shard, before, ["deploying", "active"])
    offsets = {name: len(proc.log()) for name, proc in fleet.procs.items()}
    # The whole process group: Ironic forks its API workers.
    ironic_group = int(server_ctl("pid ironic"))
    os.killpg(ironic_group, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        during = _build(fleet, 2)  # their accepts read Ironic: they wait
        said_in: dict[str, float] = {}
        reported: set[str] = set()
        stopped_in: float | None = None
        while time.monotonic() - frozen < FROZEN_FOR:
            for agent in agents:
                if agent not in said_in and _outage_said(fleet, agent, offsets[agent])[0]:
                    said_in[agent] = time.monotonic() - frozen
            reported |= _backend_unreachable(fleet)
            if stopped_in is None and len(said_in) == len(agents):
                stopping = time.monotonic()
                assert fleet.procs["agent-3"].terminate(timeout=60) == 0
                stopped_in = time.monotonic() - stopping
                left = "left group" in fleet.procs["agent-3"].log()
                fleet.agent("agent-3")  # restarted, as systemd does: its nodes wait for it
            time.sleep(0.5)
    finally:
        os.killpg(ironic_group, signal.SIGCONT)
    thawed = time.monotonic()
    built = before + during
    took = _settle(fleet, watch, dict.fromkeys(built, "active"), thawed, "builds after the thaw")
    wait_for(lambda: not _backend_unreachable(fleet), SAID_WITHIN + 10, "the check clears")
    print(
        f"Ironic frozen {FROZEN_FOR:.0f} s: said by "
        + ", ".join(f"{a} in {s:.1f} s" for a, s in sorted(said_in.items()))
        + f"; agent-3 stopped in {stopped_in or 0:.1f} s"
        + f"; 4 builds ACTIVE {took:.1f} s after the thaw"
    )
    assert set(said_in) == set(agents), said_in
    assert max(said_in.values()) <= SAID_WITHIN, said_in
    assert reported == set(agents), reported
    # Not one request's timeout: the deploy inside a request is left there.
    assert stopped_in is not None and stopped_in < REQUEST_TIMEOUT, stopped_in
    assert left, log_tails(fleet)
    _assert_agree(fleet, ironic, [shard, other_shard], active=built)
    assert not any(error_lines(fleet).values()), error_lines(fleet)
    for name in fleet.procs:
        went, came = _outage_said(fleet, name, offsets[name])
        assert all(" WARNING " in line for line in went), (name, went)
        if name == "agent-3":  # once per life: the first ended before Ironic was back
            assert len(went) <= 2 and len(came) <= 1, (name, went, came)
        else:
            assert len(went) <= 1 and len(came) == len(went), (name, went, came)


def _outage_said(fleet: Fleet, process: str, since: int = 0) -> tuple[list[str], list[str]]:
    """The lines of ``process``'s log (from offset ``since``) saying Ironic
    went, and saying it answers again."""
    lines = fleet.procs[process].log()[since:].splitlines()
    went = [line for line in lines if "Ironic unavailable" in line]
    return went, [line for line in lines if "answers again" in line]


def _wait_return_said(fleet: Fleet, agents: Iterable[str]) -> None:
    """Wait until every agent that said Ironic went has said it answers
    again.  An agent whose builds were all on its peer learns of the return
    at its next own request (its sync pass, or the idle probe after
    ``[ironic] timeout``), which may come after the builds settled."""

    def all_returns_said() -> bool:
        said = [_outage_said(fleet, agent) for agent in agents]
        return all(len(came) >= len(went) for went, came in said)

    wait_for(all_returns_said, 30, "every agent that said Ironic went to say it answers again")


def _backend_unreachable(fleet: Fleet) -> set[str]:
    """The agents ``fleet check`` reports BACKEND-UNREACHABLE."""
    problems = fleet.api.fleet_check()["problems"]
    return {p["host"] for p in problems if p["kind"] == "backend-unreachable"}
