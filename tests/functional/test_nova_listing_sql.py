# SPDX-License-Identifier: Apache-2.0
"""Nova's list filters, sort pages and action history on real PostgreSQL and
MariaDB: the database matches ``name`` (its own regular expressions), a
pattern it refuses is the caller's 400, never a 500, and the action table
of migration 0015 stores and finishes actions on both."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from conductor.common.exception import InvalidInput
from conductor.common.instance_states import Event
from conductor.db import instances
from conductor.db.models import InstanceModel
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import migrated
from tests.endpoint_stubs import RecordingQueue

CTXT: dict[str, Any] = {
    "request_id": "req-sql",
    "project_id": "p1",
    "user_id": "u1",
    "roles": ["member"],
    "is_admin": False,
}


def test_filters_sort_pages_and_actions(sql_url: str) -> None:
    db = migrated(sql_url)
    try:
        InventoryEndpoint(db, FleetView(db)).create_flavor(
            {"request_id": "req-op"}, flavor={"name": "small", "resource_class": "baremetal"}
        )
        endpoint = InstancesEndpoint(db, RecordingQueue())
        built = endpoint.build_instances(
            CTXT, request={"flavor": "small", "count": 4, "name": "Web"}
        )
        uuids = [i["uuid"] for i in built]
        assert instances.set_state(db, uuids[0], Event.DEPLOYED)
        with db.writing() as connection:
            connection.execute(
                update(InstanceModel)
                .where(InstanceModel.uuid == uuids[1])
                .values(vm_state="stopped", task_state=None)
            )

        def names(**filters: Any) -> list[str]:
            return [i["name"] for i in endpoint.list_instances(CTXT, **filters)]

        # Case-sensitive on both (MariaDB's columns compare byte for byte).
        assert sorted(names(name="^Web-[12]$")) == ["Web-1", "Web-2"]
        assert names(name="^web") == []
        assert names(status="ACTIVE") == ["Web-1"]
        assert names(status="SHUTOFF") == ["Web-2"]
        assert sorted(names(status="BUILD")) == ["Web-3", "Web-4"]
        seen, marker = [], None
        while page := endpoint.list_instances(
            CTXT, limit=1, marker=marker, sort_key="display_name", sort_dir="desc"
        ):
            seen.append(page[0]["name"])
            marker = page[0]["uuid"]
        assert seen == ["Web-4", "Web-3", "Web-2", "Web-1"]
        # A pattern Python takes and a database may not: named, never a 500.
        for pattern in ("(?P<x>Web)", "a{2,1}", "[[:alpha:]]+-1"):
            try:
                names(name=pattern)
            except InvalidInput as exc:
                assert exc.errors[0].field == "name"
        with pytest.raises(InvalidInput):
            names(name="(")
        # The create actions were recorded with the build; the deploy finished one.
        actions = endpoint.list_instance_actions(CTXT, uuids[0])
        assert [(a["action"], a["request_id"]) for a in actions] == [("create", "req-sql")]
        assert actions[0]["finish_time"] is not None
        assert endpoint.list_instance_actions(CTXT, uuids[2])[0]["finish_time"] is None
    finally:
        db.dispose()
