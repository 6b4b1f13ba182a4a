# SPDX-License-Identifier: Apache-2.0
"""A build's image and config drive: stored with the instance, routed from the record.

The conductor side (the agent side is in ``test_agent_images.py``): the
request is validated and stored whole (the flavor's default image when it
names none), shown with the instance, and every route -- the first, a
re-route after a takeover, a restarted conductor's resume, an agent's
``resume_work`` -- sends what the *database* holds, never a copy in memory.
A build that cannot be sent with them (compute API pinned below 1.2, an
older agent) is refused with the reason, never deployed without them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from sqlalchemy import update

from conductor.common.exception import InvalidInput
from conductor.common.objects import Instance, Node, Ownership
from conductor.db import flavors, instances
from conductor.db.models import InstanceModel
from conductor.endpoints.instances import InstancesEndpoint
from conductor.lifecycle import BuildLifecycle
from conductor.lifecycle.queue import Stored
from conductor.validation import validate_build_request, validate_flavor_spec
from tests.unit.test_build_flow import (
    AGENTS,
    Flow,
    Routing,
    compress_timers,
    make_flow,
    make_routing,
    wait_for,
)

IMAGE = {
    "source": "https://images.test/ubuntu.qcow2",
    "os_hash_algo": "sha256",
    "os_hash_value": "a" * 64,
    "disk_format": "qcow2",
}
OTHER_IMAGE = {"source": "http://images.test/other.raw", "checksum": "b" * 32}
SECRET = "#cloud-config\npassword: hunter2-secret\n"
KEY = {"ops": "ssh-ed25519 AAAAC3Nza ops@test"}


@dataclass
class SpecRouter:
    """Records the image and config drive of every instance it is asked to route."""

    routed: list[tuple[str, Any, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None:
        with self.lock:
            self.routed.append((instance.uuid, instance.image, instance.config_drive))

    def destroy(self, instance: Instance) -> bool:
        return True

    def of(self, uuid: str) -> list[tuple[Any, Any]]:
        with self.lock:
            return [(i, d) for u, i, d in self.routed if u == uuid]


class _Queue:
    def __init__(self) -> None:
        self.stored: list[Stored] = []

    def submit(self, instance_uuids: list[str]) -> None: ...

    def submit_stored(self, stored: Any, flavor: Any) -> None:
        self.stored.append((stored, flavor))

    def delete(self, instance_uuid: str) -> None: ...


def _endpoint(flow: Flow) -> InstancesEndpoint:
    return InstancesEndpoint(flow.db, _Queue())  # type: ignore[arg-type]


def _request(**extra: Any) -> dict[str, Any]:
    return {
        "flavor": "small",
        "image": IMAGE,
        "user_data": SECRET,
        "meta_data": {"public_keys": KEY},
        "network_data": {"links": [{"id": "eth0", "type": "phy"}]},
        **extra,
    }


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Flow]:
    with make_flow(tmp_path, compress_timers(monkeypatch), routed=False) as made:
        yield made


@pytest.fixture
def routing(tmp_path: Path) -> Iterator[Routing]:
    with make_routing(tmp_path) as made:
        yield made


# -- stored whole, shown ----------------------------------------------------------------


def test_the_image_and_config_drive_are_stored_and_shown(flow: Flow) -> None:
    api = _endpoint(flow)
    [built] = api.build_instances({}, _request(name="web"))
    shown = api.show_instance({}, built["uuid"])
    assert shown["image"] == IMAGE
    assert shown["config_drive"] == {
        "user_data": SECRET,
        # cloud-init's instance id and name are the instance's own.
        "meta_data": {"public_keys": KEY, "uuid": built["uuid"], "name": "web"},
        "network_data": {"links": [{"id": "eth0", "type": "phy"}]},
    }
    # Read back from the database, not from the reply.
    stored = instances.get_instance(flow.db, built["uuid"])
    assert stored.image == IMAGE and stored.config_drive == shown["config_drive"]
    # A list leaves the user data out (up to 64 KiB each, 1000 a page).
    [listed] = api.list_instances({})
    assert listed["config_drive"] == {
        k: v for k, v in shown["config_drive"].items() if k != "user_data"
    }
    # The secret is in no repr a log line could print.
    assert SECRET not in repr(stored) and "hunter2" not in repr(validate_build_request(_request()))


def test_a_retry_of_the_same_request_is_idempotent_another_is_refused(flow: Flow) -> None:
    api = _endpoint(flow)
    uuid = "0f2c3d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
    first = api.build_instances({}, _request(instance_uuids=[uuid]))
    again = api.build_instances({}, _request(instance_uuids=[uuid]))
    assert again == first
    with pytest.raises(Exception, match="instance id not available"):
        api.build_instances({}, _request(instance_uuids=[uuid], image=OTHER_IMAGE))
    assert instances.get_instance(flow.db, uuid).image == IMAGE


def test_a_build_without_an_image_gets_its_flavors_default(flow: Flow) -> None:
    flavors.create_flavor(
        flow.db,
        validate_flavor_spec(
            {"name": "imaged", "resource_class": "baremetal", "default_image": OTHER_IMAGE}
        ),
    )
    assert flavors.get_flavor(flow.db, "imaged").default_image == OTHER_IMAGE
    api = _endpoint(flow)
    [default] = api.build_instances({}, {"flavor": "imaged"})
    [own] = api.build_instances({}, {"flavor": "imaged", "image": IMAGE})
    [plain] = api.build_instances({}, {"flavor": "small"})
    assert default["image"] == OTHER_IMAGE
    assert own["image"] == IMAGE  # the request's image wins
    assert plain["image"] is None and plain["config_drive"] is None  # today's builds


def test_a_refused_request_stores_nothing_and_never_shows_the_user_data(
    flow: Flow, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api = _endpoint(flow)
    huge = SECRET + "x" * 65536
    with pytest.raises(InvalidInput) as refused:
        api.build_instances(
            {},
            _request(
                user_data=huge,
                image={**IMAGE, "os_hash_value": "zz"},
                meta_data={"uuid": "mine"},
            ),
        )
    assert refused.value.fields == ["image.os_hash_value", "user_data", "meta_data.uuid"]
    assert "hunter2" not in str(refused.value)
    assert api.list_instances({}) == []  # invariant 8: nothing stored
    # And a build that is stored logs no user data either.
    api.build_instances({}, _request())
    assert "hunter2" not in caplog.text


# -- every route sends what the database holds ------------------------------------------


def _lifecycle(flow: Flow, router: SpecRouter) -> BuildLifecycle:
    return BuildLifecycle(flow.db, flow.scheduler, flow.fleet, workers=1, router=router)


def _change_stored_image(flow: Flow, uuid: str, image: dict[str, Any]) -> None:
    """Change the record behind the conductor's back: a route that still sent
    the old image would have sent a copy kept in memory."""
    with flow.db.transaction() as session:
        session.execute(update(InstanceModel).where(InstanceModel.uuid == uuid).values(image=image))


def test_a_restarted_conductor_and_a_resumed_agent_route_the_stored_image(
    flow: Flow,
) -> None:
    first = SpecRouter()
    builds = _lifecycle(flow, first)
    builds.start()
    try:
        [built] = _endpoint(flow).build_instances({}, _request())
        builds.submit([built["uuid"]])
        wait_for(lambda: len(first.of(built["uuid"])) == 1)
    finally:
        builds.stop()
    image, drive = first.of(built["uuid"])[0]
    assert image == IMAGE and drive["user_data"] == SECRET
    placed = instances.get_instance(flow.db, built["uuid"])
    assert placed.node_uuid is not None and placed.host in AGENTS

    # A new conductor: resume() re-reads every placed build and routes it again.
    _change_stored_image(flow, built["uuid"], OTHER_IMAGE)
    second = SpecRouter()
    restarted = _lifecycle(flow, second)
    restarted.start()
    try:
        wait_for(lambda: len(second.of(built["uuid"])) == 1)
        assert second.of(built["uuid"])[0] == (OTHER_IMAGE, drive)
        # The owner restarted (resume_work) and the node was re-homed: each
        # routes again from the record, whatever it holds now.
        _change_stored_image(flow, built["uuid"], IMAGE)
        assert placed.host is not None
        assert restarted.resume_agent(placed.host) == (1, 0)
        wait_for(lambda: len(second.of(built["uuid"])) == 2)
        assert second.of(built["uuid"])[1] == (IMAGE, drive)
        restarted.rehomed([placed.node_uuid])
        wait_for(lambda: len(second.of(built["uuid"])) == 3)
        assert second.of(built["uuid"])[2] == (IMAGE, drive)
    finally:
        restarted.stop()


# -- the router: image and config drive on the wire (compute API 1.2) -------------------


def _with_spec(routing: Routing) -> None:
    with routing.db.transaction() as session:
        session.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid == routing.instance)
            .values(image=IMAGE, config_drive={"user_data": SECRET})
        )


def test_the_router_sends_the_image_and_config_drive(routing: Routing) -> None:
    _with_spec(routing)
    routing.router.route(*routing.args())
    assert routing.compute.specs == [(routing.instance, IMAGE, {"user_data": SECRET})]
    assert routing.refusals == []


def test_a_build_without_them_is_sent_as_before(routing: Routing) -> None:
    routing.router.route(*routing.args())
    assert routing.compute.specs == [(routing.instance, None, None)]


def test_a_pin_below_1_2_refuses_a_build_with_an_image_leaving_the_node_clean(
    routing: Routing, caplog: pytest.LogCaptureFixture
) -> None:
    _with_spec(routing)
    routing.compute.pinned_at = "1.1"
    routing.router.route(*routing.args())
    assert routing.compute.builds == []  # never sent without its image
    [(instance, node, fault)] = routing.refusals
    assert (instance, node) == (routing.instance, routing.node)
    assert "[upgrade_levels] compute pins the agents' API below 1.2" in fault
    assert routing.router._refusals.clean == [True]  # type: ignore[attr-defined]
    assert "hunter2" not in caplog.text


def test_an_older_agent_refusing_1_2_fails_the_attempt_with_the_reason(
    routing: Routing,
) -> None:
    _with_spec(routing)
    routing.compute.behaviour["a1"] = messaging.RemoteError("UnsupportedVersion", "1.2", "")
    routing.router.route(*routing.args())
    [(_instance, _node, fault)] = routing.refusals
    assert "does not serve compute API 1.2 (UnsupportedVersion)" in fault
    assert routing.retries == []  # not retried there for ever


def test_the_pin_holds_on_a_single_call_too(routing: Routing) -> None:
    """``_route_one`` is also reached without the batch's check (a NotOwner
    re-read, an older agent's batch sent one by one): it refuses as well."""
    _with_spec(routing)
    routing.compute.pinned_at = "1.1"
    routing.router._route_one(*routing.args())
    assert routing.compute.builds == []
    assert len(routing.refusals) == 1 and "below 1.2" in routing.refusals[0][2]
