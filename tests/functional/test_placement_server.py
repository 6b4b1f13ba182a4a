# SPDX-License-Identifier: Apache-2.0
"""The test Placement works through the test-server scripts: providers are
written and read back, survive a restart, and a kill leaves nothing serving."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from keystoneauth1 import adapter, session, token_endpoint
from keystoneauth1 import exceptions as ks_exceptions

from tests.harness.servers import server_ctl

TIMEOUT = 10


@pytest.fixture
def placement(placement_url: str) -> Iterator[adapter.Adapter]:
    """A keystoneauth1 client of the test Placement, as its admin (noauth2
    takes the token ``admin`` for the admin user), at microversion 1.39."""
    auth = token_endpoint.Token(placement_url, "admin")
    sess = session.Session(auth=auth, timeout=TIMEOUT)
    client = adapter.Adapter(
        sess,
        service_type="placement",
        default_microversion="1.39",
        raise_exc=False,
    )
    try:
        yield client
    finally:
        sess.session.close()


def _create_provider(placement: adapter.Adapter) -> tuple[str, str]:
    name = f"rf-test-{uuid.uuid4().hex[:12]}"
    created = placement.post("/resource_providers", json={"name": name})
    assert created.status_code == 200, created.text
    return str(created.json()["uuid"]), name


def _provider(placement: adapter.Adapter, rp_uuid: str) -> dict[str, object]:
    shown = placement.get(f"/resource_providers/{rp_uuid}")
    assert shown.status_code == 200, shown.text
    body: dict[str, object] = shown.json()
    return body


def _group(pgid: int) -> set[int]:
    """Live processes of process group PGID (gunicorn's master and worker)."""
    members = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.add(int(stat.parent.name))
    return members


def _refused(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_provider_is_read_back_and_survives_a_restart(placement: adapter.Adapter) -> None:
    rp_uuid, name = _create_provider(placement)
    provider = _provider(placement, rp_uuid)
    assert (provider["name"], provider["generation"]) == (name, 0)
    inventory = {
        "inventories": {"CUSTOM_BAREMETAL": {"total": 1}},
        "resource_provider_generation": 0,
    }
    assert placement.put("/resource_classes/CUSTOM_BAREMETAL").status_code in (201, 204)
    put = placement.put(f"/resource_providers/{rp_uuid}/inventories", json=inventory)
    assert put.status_code == 200, put.text
    old_pid = server_ctl("pid placement").strip()

    server_ctl("restart-placement")

    assert server_ctl("pid placement").strip() != old_pid
    provider = _provider(placement, rp_uuid)
    assert (provider["name"], provider["generation"]) == (name, 1)
    listed = placement.get("/resource_providers", params={"name": name}).json()
    assert [p["uuid"] for p in listed["resource_providers"]] == [rp_uuid]


def test_a_killed_placement_leaves_nothing_serving(
    placement: adapter.Adapter, placement_url: str
) -> None:
    rp_uuid, name = _create_provider(placement)
    master = int(server_ctl("pid placement"))
    group = _group(master)
    assert len(group) >= 2, group  # the gunicorn master and its worker

    server_ctl("kill-placement")
    try:
        assert _group(master) == set()
        assert _refused(placement_url)
        with pytest.raises(ks_exceptions.ConnectFailure):
            placement.get("/resource_providers")
    finally:
        server_ctl("start-placement")

    assert _provider(placement, rp_uuid)["name"] == name
