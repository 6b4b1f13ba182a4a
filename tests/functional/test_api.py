# SPDX-License-Identifier: Apache-2.0
"""ringfleet-api under gunicorn against a real conductor and agents.

Real etcd, RabbitMQ and PostgreSQL; one conductor, two agents (simulated
driver); the API is driven over HTTP with requests, authenticated with the
static tokens of ``api_harness.TOKENS``.  One fleet for the module: the
tests run in order and each leaves the fleet as it found it, bar the nodes
and flavor the first one enrolls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from conductor.api import microversion
from conductor.api.v1 import ROUTES
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import (
    Fleet,
    log_lines,
    log_tails,
    running_fleet,
    start_processes,
)
from tests.harness import wait_for

NODES = 110
BUILDS = 100
TIMEOUT = 30


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Fleet]:
    with running_fleet(
        tmp_path_factory.mktemp("api-fleet"),
        database_url=database_url,
        db_prefix="rf_api",
        transport_url=transport_url,
        etcd_url=etcd_url,
        agents=["agent-1", "agent-2"],
        step_duration=0.02,
    ) as f:
        yield f
        assert f.fencing_violations() == []


@pytest.fixture(scope="module")
def server(fleet: Fleet, transport_url: str) -> Iterator[ApiServer]:
    api = ApiServer(fleet.workdir, transport_url).start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="module")
def admin(server: ApiServer) -> requests.Session:
    return server.session("admin-token")


def _ok(response: requests.Response, status: int) -> Any:
    assert response.status_code == status, (response.status_code, response.text[:2000])
    return response.json() if response.content else None


def _error(response: requests.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text[:2000])
    assert response.headers["Content-Type"].startswith("application/json")
    errors = response.json()["errors"]
    assert errors and all(e["status"] == status for e in errors)
    assert errors[0]["request_id"] == response.headers["x-openstack-request-id"]
    return errors[0]  # type: ignore[no-any-return]


def _all(session: requests.Session, url: str, key: str) -> list[dict[str, Any]]:
    """Every item of a list, following the next links."""
    items: list[dict[str, Any]] = []
    next_url: str | None = url
    while next_url:
        body = _ok(session.get(next_url, timeout=TIMEOUT), 200)
        items.extend(body[key])
        next_url = body.get("next")
    return items


def test_discovery_and_openapi_are_public(server: ApiServer) -> None:
    anonymous = server.session(None)
    root = _ok(anonymous.get(server.url + "/", timeout=TIMEOUT), 200)
    assert root["versions"][0]["version"] == str(microversion.MAX_VERSION)
    links = {link["rel"]: link["href"] for link in root["versions"][0]["links"]}
    spec = _ok(anonymous.get(links["describedby"], timeout=TIMEOUT), 200)
    assert spec["openapi"].startswith("3.")
    assert spec == json.loads((Path(__file__).parents[2] / "docs/openapi.json").read_text())
    # Everything else needs a token: 401, and nothing is called.
    _error(anonymous.get(server.url + "/v1/nodes", timeout=TIMEOUT), 401)
    _error(server.session("wrong").get(server.url + "/v1/nodes", timeout=TIMEOUT), 401)


def test_enroll_build_100_watch_active_and_delete(
    fleet: Fleet, server: ApiServer, admin: requests.Session
) -> None:
    url = server.url
    member, reader = server.session("member-token"), server.session("reader-token")
    specs = [{"name": f"node-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]

    # Policy: enrolling nodes and flavors is admin-only; nothing was stored.
    for session in (reader, member):
        _error(session.post(f"{url}/v1/nodes/import", json={"nodes": specs}, timeout=TIMEOUT), 403)
        _error(session.post(f"{url}/v1/flavors", json={"name": "x"}, timeout=TIMEOUT), 403)
    assert _ok(admin.get(f"{url}/v1/nodes", timeout=TIMEOUT), 200) == {"nodes": []}
    # The node inventory is the operator's, as Nova's hypervisors.
    _error(reader.get(f"{url}/v1/nodes", timeout=TIMEOUT), 403)

    # A dry run stores nothing, then the import stores them all.
    dry = admin.post(f"{url}/v1/nodes/import", json={"nodes": specs, "dry_run": True})
    assert _ok(dry, 200)["checked"] == NODES
    assert _ok(admin.post(f"{url}/v1/nodes/import", json={"nodes": specs}), 201)["created"] == NODES
    # Again, naming every clash (1.6): a 400 on each row, nothing stored.
    every = admin.post(
        f"{url}/v1/nodes/import",
        json={
            "nodes": [*specs[:2], {"name": "fresh", "resource_class": "baremetal"}],
            "every_clash": True,
        },
        headers={"OpenStack-API-Version": "baremetal-fleet 1.6"},
        timeout=TIMEOUT,
    )
    assert every.status_code == 400, every.text[:2000]
    assert [e["field"] for e in every.json()["errors"]] == ["nodes[0].name", "nodes[1].name"]
    # One node on its own: 201 with its Location, which shows it.
    chosen = str(uuid.uuid4())
    created = admin.post(
        f"{url}/v1/nodes", json={"name": "solo", "uuid": chosen, "resource_class": "baremetal"}
    )
    node = _ok(created, 201)
    assert created.headers["Location"] == f"{url}/v1/nodes/{chosen}"
    assert _ok(admin.get(created.headers["Location"]), 200)["name"] == "solo"
    # Its retry: 409 naming the uuid.
    again = admin.post(
        f"{url}/v1/nodes", json={"name": "solo-2", "uuid": chosen, "resource_class": "baremetal"}
    )
    assert _error(again, 409)["field"] == "uuid"
    assert node["uuid"] == chosen

    # Paging: pages of 25, each with a next link, every node once.
    listed = _all(admin, f"{url}/v1/nodes?limit=25&resource_class=baremetal", "nodes")
    assert len(listed) == NODES + 1 == len({n["uuid"] for n in listed})
    first = _ok(admin.get(f"{url}/v1/nodes?limit=25"), 200)
    assert "marker=" in first["next"] and len(first["nodes"]) == 25

    # Flavor: 201 + Location; a duplicate is 409 naming the name.
    flavor = admin.post(f"{url}/v1/flavors", json={"name": "small", "resource_class": "baremetal"})
    _ok(flavor, 201)
    assert _ok(reader.get(flavor.headers["Location"]), 200)["name"] == "small"
    dup = admin.post(f"{url}/v1/flavors", json={"name": "small", "resource_class": "baremetal"})
    assert _error(dup, 409)["field"] == "name"
    assert [f["name"] for f in _ok(reader.get(f"{url}/v1/flavors"), 200)["flavors"]] == ["small"]

    # Every node owned before building (the agents claim them at start).
    wait_for(lambda: None not in fleet.owned_by(), 60, "every node owned")

    # A reader cannot build; a member builds 100 with ids of its choosing.
    uuids = [str(uuid.uuid4()) for _ in range(BUILDS)]
    request = {"flavor": "small", "count": BUILDS, "instance_uuids": uuids, "name": "api"}
    _error(reader.post(f"{url}/v1/instances", json=request), 403)
    origin = f"req-{uuid.uuid4()}"  # another service's request id
    built = member.post(
        f"{url}/v1/instances",
        json=request,
        headers={"X-OpenStack-Request-ID": origin},
        timeout=TIMEOUT,
    )
    assert [i["uuid"] for i in _ok(built, 202)["instances"]] == uuids
    # Our request id, and the caller's as the global one, reached the conductor's log.
    request_id = built.headers["x-openstack-request-id"]
    assert request_id != origin
    assert f"{origin} {request_id}" in fleet.procs["cond-1"].log()
    # A retry of the same request is safe: the same instances, nothing built twice.
    retry = member.post(f"{url}/v1/instances", json=request, timeout=TIMEOUT)
    assert [i["uuid"] for i in _ok(retry, 202)["instances"]] == uuids
    # Another request reusing one of the ids: 409 naming instance_uuids.
    reused = member.post(f"{url}/v1/instances", json={**request, "name": "other"})
    assert _error(reused, 409)["field"] == "instance_uuids"

    def active() -> bool:
        got = _all(reader, f"{url}/v1/instances?vm_state=active&limit=40", "instances")
        return len(got) == BUILDS

    try:
        wait_for(active, 120, f"{BUILDS} instances ACTIVE through the API")
    except AssertionError:
        raise AssertionError(log_tails(fleet)) from None
    # Where it runs is shown to admins only, as Nova's extended attributes.
    one = _ok(reader.get(f"{url}/v1/instances/{uuids[0]}"), 200)
    assert one["vm_state"] == "active" and "node_uuid" not in one and "host" not in one
    one = _ok(admin.get(f"{url}/v1/instances/{uuids[0]}"), 200)
    assert one["node_uuid"] and one["host"] in ("agent-1", "agent-2")
    _error(reader.get(f"{url}/v1/instances?host={one['host']}"), 403)
    assert (
        _ok(admin.get(f"{url}/v1/nodes?pinned=true&limit=1000"), 200)["nodes"].__len__() == BUILDS
    )

    # The fleet reports over HTTP.
    status = _ok(reader.get(f"{url}/v1/fleet/status"), 200)
    assert {a["host"] for a in status["agents"]} == {"agent-1", "agent-2"}
    _ok(admin.get(f"{url}/v1/fleet/check"), 200)
    _error(reader.get(f"{url}/v1/fleet/check"), 403)  # it names every project's instances
    _ok(reader.get(f"{url}/v1/fleet/ring"), 200)

    # A reader cannot delete; a member deletes them all.
    _error(reader.delete(f"{url}/v1/instances/{uuids[0]}"), 403)
    for instance_uuid in uuids:
        assert _ok(member.delete(f"{url}/v1/instances/{instance_uuid}"), 202)["vm_state"] in (
            "deleting",
            "deleted",
        )

    def deleted() -> bool:
        got = _all(reader, f"{url}/v1/instances?vm_state=deleted", "instances")
        return len(got) == BUILDS

    wait_for(deleted, 120, f"{BUILDS} instances deleted through the API")
    assert _ok(admin.get(f"{url}/v1/nodes?pinned=true"), 200)["nodes"] == []


def test_error_paths(fleet: Fleet, server: ApiServer, admin: requests.Session) -> None:
    url = server.url
    # 404: unknown node, flavor, instance; unknown path.
    assert _error(admin.get(f"{url}/v1/nodes/no-such-node"), 404)["value"] == "no-such-node"
    _error(admin.get(f"{url}/v1/flavors/nope"), 404)
    _error(admin.get(f"{url}/v1/instances/{uuid.uuid4()}"), 404)
    _error(admin.get(f"{url}/v1/nothing"), 404)
    # 405 with Allow.
    wrong = admin.put(f"{url}/v1/nodes", json={})
    _error(wrong, 405)
    assert wrong.headers["Allow"] == "GET, POST, HEAD"
    # 400 naming the field: the conductor's InvalidInput, every field.
    bad = admin.post(f"{url}/v1/nodes", json={"name": "", "resource_class": 7, "colour": "red"})
    assert bad.status_code == 400
    fields = {e["field"] for e in bad.json()["errors"]}
    assert {"node.name", "node.resource_class", "node.colour"} <= fields
    assert _error(admin.get(f"{url}/v1/instances/not-a-uuid"), 400)["field"] == "instance"
    assert _error(admin.get(f"{url}/v1/nodes?limit=0"), 400)["field"] == "limit"
    assert _error(admin.get(f"{url}/v1/nodes?maintenance=perhaps"), 400)["field"] == "maintenance"
    assert _error(admin.get(f"{url}/v1/nodes?colour=red"), 400)["field"] == "colour"
    # 409 naming the option: a node sync asked of conductors without [ironic].
    not_configured = _error(admin.post(f"{url}/v1/nodes/sync"), 409)
    assert not_configured["code"] == "ringfleet.not_configured"
    assert not_configured["field"] == "[ironic] auth_type"
    build = {"flavor": "no-such-flavor", "count": 1}
    _error(admin.post(f"{url}/v1/instances", json=build), 404)
    assert (
        _error(admin.post(f"{url}/v1/instances", json={"flavor": "small", "count": 0}), 400)[
            "field"
        ]
        == "count"
    )
    # 409: moving a node away from its live owner.
    node = _ok(admin.get(f"{url}/v1/nodes/node-000"), 200)
    other = "agent-2" if node["owner"] == "agent-1" else "agent-1"
    moved = admin.post(f"{url}/v1/nodes/node-000/move", json={"host": other})
    assert _error(moved, 409)["field"] == "owner"
    # Drain of an agent that is not live: 409 naming host (the fleet's state,
    # not the request, refuses it); no agent drained.
    assert _error(admin.post(f"{url}/v1/agents/agent-9/drain"), 409)["field"] == "host"
    # Maintenance and node changes (admin), with 400 on wrong types.
    on = admin.put(
        f"{url}/v1/nodes/node-000/maintenance", json={"maintenance": True, "reason": "disk"}
    )
    assert _ok(on, 200)["maintenance"] is True
    off = admin.put(f"{url}/v1/nodes/node-000/maintenance", json={"maintenance": False})
    assert _ok(off, 200)["maintenance"] is False
    assert (
        _error(admin.put(f"{url}/v1/nodes/node-000/maintenance", json={"maintenance": "yes"}), 400)[
            "field"
        ]
        == "maintenance"
    )
    assert _error(
        server.session("member-token").patch(
            f"{url}/v1/nodes/node-000", json={"resource_class": "gpu"}
        ),
        403,
    )
    changed = admin.patch(f"{url}/v1/nodes/node-001", json={"add_traits": ["CUSTOM_X"]})
    assert "CUSTOM_X" in _ok(changed, 200)["traits"], changed.text
    owner = _ok(admin.get(f"{url}/v1/nodes/node-001/owner"), 200)
    assert owner["owner"] in ("agent-1", "agent-2")
    # Microversions: 406 out of range, 400 malformed; the served one echoed.
    too_new = admin.get(f"{url}/v1/nodes", headers={microversion.HEADER: "baremetal-fleet 9.0"})
    _error(too_new, 406)
    _error(admin.get(f"{url}/v1/nodes", headers={microversion.HEADER: "baremetal-fleet x"}), 400)
    latest = admin.get(f"{url}/v1/flavors", headers={microversion.HEADER: "baremetal-fleet latest"})
    assert latest.headers[microversion.HEADER] == f"baremetal-fleet {microversion.MAX_VERSION}"


STABLE = (
    "uuid",
    "name",
    "resource_class",
    "traits",
    "properties",
    "group",
    "maintenance",
    "maintenance_reason",
    "provision_state",
    "owner",
    "owner_epoch",
    "instance_uuid",
)


def _snapshot(admin: requests.Session, url: str) -> Any:
    """What a refused request must not change (not the timestamps agents' reports touch)."""
    nodes = [{k: n[k] for k in STABLE} for n in _all(admin, f"{url}/v1/nodes", "nodes")]
    flavors = _ok(admin.get(f"{url}/v1/flavors"), 200)["flavors"]
    instances = _all(admin, f"{url}/v1/instances?vm_state=deleted", "instances")
    live = _all(admin, f"{url}/v1/instances", "instances")
    return nodes, flavors, instances, live


JUNK_VALUES: list[Any] = [None, True, 1.5, -1, "", "x" * 5000, [], [1, "a"], {}, {"a": {"b": []}}]
JUNK_IDS = ["x" * 300, "..", "%00", "n%20o", "-1", "a.b", "ü", str(uuid.UUID(int=0))]


def test_junk_barrage_changes_nothing_and_never_answers_500(
    fleet: Fleet, server: ApiServer, admin: requests.Session
) -> None:
    url = server.url
    before = _snapshot(admin, url)
    statuses: dict[int, int] = {}

    def send(method: str, path: str, **kwargs: Any) -> None:
        response = admin.request(method, url + path, timeout=TIMEOUT, **kwargs)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, (
            method,
            path,
            kwargs.get("data", "")[:200] if isinstance(kwargs.get("data"), str) else "",
            response.text[:500],
        )
        if response.status_code >= 400:
            assert response.json()["errors"][0]["status"] == response.status_code

    deep = "[" * 100_000 + "]" * 100_000
    for route in ROUTES:
        for ident in JUNK_IDS:
            path = route.path
            for var in ("{node}", "{flavor}", "{instance}", "{host}"):
                path = path.replace(var, ident)
            bodies: list[Any] = ["{bad json", deep, "x" * (1024 * 1024 + 10), "NaN", "null"]
            bodies += [json.dumps(v) for v in JUNK_VALUES]
            if route.body is not None:
                keys = sorted(
                    route.body_keys
                    or {
                        "name",
                        "flavor",
                        "count",
                        "resource_class",
                        "nodes",
                        "instance_uuids",
                        "traits",
                    }
                )
                bodies += [json.dumps({k: v for k in keys}) for v in JUNK_VALUES]
            for body in bodies if route.body is not None else bodies[:2]:
                send(route.method, path, data=body, headers={"Content-Type": "application/json"})
            send(route.method, path + "?limit=abc&marker=%00&junk=1")
            for version in (
                "baremetal-fleet 0.9",
                "baremetal-fleet 1",
                "baremetal-fleet 1.0 1.0",
                "baremetal-fleet 99999.0",
                "baremetal-fleet ",
                "baremetal-fleet latest",
            ):
                send(
                    route.method,
                    path,
                    headers={microversion.HEADER: version},
                    data="{" if route.body else None,
                )
            send(route.method, path, data="{}", headers={"Content-Type": "text/plain"})
    # Real ids with junk bodies: refused, nothing changed.
    for path in ("/v1/nodes/node-002", "/v1/nodes/node-002/maintenance", "/v1/nodes/node-002/move"):
        for value in JUNK_VALUES:
            for method in ("PATCH", "PUT", "POST"):
                send(
                    method,
                    path,
                    json={"maintenance": value, "host": value, "resource_class": value},
                )
    assert _snapshot(admin, url) == before
    assert 500 not in statuses and statuses.get(400, 0) > 100, statuses


RINGFLEET = Path(sys.executable).with_name("ringfleet")


def test_the_cli_goes_through_the_api_with_os_endpoint(fleet: Fleet, server: ApiServer) -> None:
    """``ringfleet --os-endpoint``: the same commands and the same error lines
    over HTTP, the config file not read (no transport_url given at all)."""

    def ringfleet(token: str, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(RINGFLEET), "--os-endpoint", server.url, "--os-token", token, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "OS_ENDPOINT": "", "OS_TOKEN": ""},
        )

    listed = ringfleet("admin-token", "node", "list", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == NODES + 1
    hidden = ringfleet("reader-token", "node", "list")
    assert hidden.returncode == 1 and "403" in hidden.stderr, hidden.stderr
    missing = ringfleet("admin-token", "node", "show", "no-such-node")
    assert missing.returncode == 1
    assert missing.stderr == "ringfleet node show: error: node 'no-such-node' not found\n"
    refused = ringfleet("reader-token", "flavor", "create", "big", "--resource-class", "bm")
    assert refused.returncode == 1 and "403" in refused.stderr, refused.stderr
    bad = ringfleet("admin-token", "flavor", "create", "bad name", "--resource-class", "bm")
    assert bad.returncode == 1, bad.stderr
    assert bad.stderr.startswith("ringfleet flavor create: error: ") and "name" in bad.stderr
    built = ringfleet(
        "member-token",
        "instance",
        "create",
        "--flavor",
        "small",
        "--count",
        "2",
        "--wait",
        "--wait-timeout",
        "120",
        "-f",
        "json",
    )
    assert built.returncode == 0, built.stderr
    instances = json.loads(built.stdout)
    assert {i["State"] for i in instances} == {"active"}, instances
    deleted = ringfleet("member-token", "instance", "delete", *[i["UUID"] for i in instances])
    assert deleted.returncode == 0, deleted.stderr
    status = ringfleet("reader-token", "fleet", "status", "-f", "json")
    assert {row["Host"] for row in json.loads(status.stdout)} == {"agent-1", "agent-2"}
    wrong = subprocess.run(
        [str(RINGFLEET), "--os-endpoint", server.url, "--os-token", "nope", "node", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert wrong.returncode == 1 and "401" in wrong.stderr, wrong.stderr


def test_two_apis_on_two_conductors_never_exceed_a_quota(
    fleet: Fleet, server: ApiServer, transport_url: str
) -> None:
    """Invariant 12 end to end: 50 builds at once through two API processes
    served by two conductors, against a quota of 10; another project's
    member neither sees nor deletes the instances."""
    url = server.url
    admin = server.session("admin-token")
    admin.headers["OpenStack-API-Version"] = "baremetal-fleet 1.2"  # quotas, all_projects
    start_processes(fleet, ["cond-2"])
    second = ApiServer(fleet.workdir, transport_url, name="api-2").start()
    try:
        quota = admin.put(f"{url}/v1/quotas/other", json={"quotas": {"instances": 10}})
        assert _ok(quota, 200)["quotas"]["instances"]["limit"] == 10
        bases = [server.url, second.url] * 25
        start = threading.Barrier(len(bases))

        def build(base: str) -> requests.Response:
            session = server.session("other-member-token")  # one per thread
            start.wait()
            return session.post(f"{base}/v1/instances", json={"flavor": "small"}, timeout=TIMEOUT)

        with ThreadPoolExecutor(len(bases)) as pool:
            answers = list(pool.map(build, bases))
        built = [a.json()["instances"][0] for a in answers if a.status_code == 202]
        refused = [_error(a, 403) for a in answers if a.status_code != 202]
        assert (len(built), len(refused)) == (10, 40)
        assert {e["code"] for e in refused} == {"ringfleet.quota_exceeded"}
        assert "already used 10 of 10 instances" in refused[-1]["detail"]
        # Both conductors took builds (the race was across them).
        for name in ("cond-1", "cond-2"):
            assert log_lines(fleet, name, "for project other"), name
        shown = _ok(admin.get(f"{url}/v1/quotas/other"), 200)["quotas"]["instances"]
        assert (shown["in_use"], shown["default"]) == (10, False)

        # Another project's member: 404, nothing deleted; its own list is blind to them.
        mine = server.session("member-token")
        for instance in built[:2]:
            _error(mine.get(f"{url}/v1/instances/{instance['uuid']}"), 404)
            _error(mine.delete(f"{url}/v1/instances/{instance['uuid']}"), 404)
        listed = {i["uuid"] for i in _all(mine, f"{url}/v1/instances", "instances")}
        assert not listed & {i["uuid"] for i in built}
        other = server.session("other-member-token")
        every = _all(admin, f"{url}/v1/instances?all_projects=1&project_id=other", "instances")
        assert {i["uuid"] for i in every} == {i["uuid"] for i in built}

        # Deleting frees the quota: the fleet is left as it was found.
        for instance in built:
            _ok(other.delete(f"{url}/v1/instances/{instance['uuid']}"), 202)

        def freed() -> bool:
            used = _ok(admin.get(f"{url}/v1/quotas/other"), 200)["quotas"]["instances"]
            return used["in_use"] == 0

        wait_for(freed, 120, "the quota freed by the deletes")
        _ok(admin.delete(f"{url}/v1/quotas/other"), 200)
    finally:
        second.stop()
        fleet.procs["cond-2"].terminate()
