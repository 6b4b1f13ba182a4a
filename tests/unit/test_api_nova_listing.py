# SPDX-License-Identifier: Apache-2.0
"""The HTTP API's Nova habits in-process (a fake conductor): status and
addresses (1.10), list filters and sorting, /v1/limits (1.11) and the
instance action history (1.12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conductor.api import openapi, v1
from conductor.common.nova_limits import nova_limits
from tests.unit.test_api import FakeConductors, call, make_app

V19 = {"OpenStack_API_Version": "baremetal-fleet 1.9"}
V110 = {"OpenStack_API_Version": "baremetal-fleet 1.10"}
V111 = {"OpenStack_API_Version": "baremetal-fleet 1.11"}
V112 = {"OpenStack_API_Version": "baremetal-fleet 1.12"}
UUID = "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a2"
INSTANCE = {
    "uuid": UUID,
    "name": "web-1",
    "vm_state": "active",
    "task_state": "rebooting_hard",
    "config_drive": {
        "network_data": {
            "links": [{"id": "eth0", "ethernet_mac_address": "52:54:00:00:00:01"}],
            "networks": [
                {"id": "n0", "type": "ipv4", "link": "eth0", "ip_address": "10.1.0.7"},
            ],
        }
    },
}
QUOTA = {
    "project_id": "p1",
    "quotas": {
        "instances": {"limit": 10, "in_use": 3, "default": False},
        "resource_class:baremetal-gold": {"limit": 2, "in_use": 1, "default": True},
    },
}


def app_with(tmp_path: Path, strategy: str = "noauth") -> tuple[Any, FakeConductors]:
    """The application and its fake conductor, answering as a conductor would."""
    application, fake = make_app(tmp_path, strategy)
    answers: dict[str, Any] = {
        "_show_instance": lambda instance: dict(INSTANCE),
        "_list_instances": lambda *args, **kwargs: [dict(INSTANCE)],
        "_show_quota": lambda project_id: {**QUOTA, "project_id": project_id},
        "_list_instance_actions": lambda instance: [{"action": "create", "request_id": "req-1"}],
        "_show_instance_action": lambda instance, request_id: {
            "action": "create",
            "request_id": request_id,
            "events": [],
        },
    }
    vars(fake).update(answers)
    return application, fake


def test_status_and_addresses_since_1_10(tmp_path: Path) -> None:
    application, _ = app_with(tmp_path)
    old = call(application, "GET", f"/v1/instances/{UUID}", **V19).json
    assert "status" not in old and "addresses" not in old
    shown = call(application, "GET", f"/v1/instances/{UUID}", **V110).json
    assert shown["status"] == "HARD_REBOOT" and shown["vm_state"] == "active"
    assert shown["addresses"] == {
        "n0": [
            {
                "addr": "10.1.0.7",
                "version": 4,
                "OS-EXT-IPS:type": "fixed",
                "OS-EXT-IPS-MAC:mac_addr": "52:54:00:00:00:01",
            }
        ]
    }
    listed = call(application, "GET", "/v1/instances", **V110).json["instances"]
    assert listed[0]["status"] == "HARD_REBOOT"


def test_the_list_filters_reach_the_conductor(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    query = "name=%5Eweb-&status=active&changes-since=2026-11-29T20:00:00Z&sort_key=created_at"
    assert call(application, "GET", f"/v1/instances?{query}", **V110).status_code == 200
    [(_, _, kwargs)] = [c for c in fake.calls if c[0] == "list_instances"]
    assert kwargs["name"] == "^web-" and kwargs["status"] == "active"
    assert kwargs["changes_since"] == "2026-11-29T20:00:00Z"
    assert kwargs["sort_key"] == "created_at" and "sort_dir" not in kwargs
    # Before 1.10 they are unknown parameters.
    old = call(application, "GET", "/v1/instances?sort_key=created_at", **V19)
    assert old.status_code == 400 and old.json["errors"][0]["field"] == "sort_key"


def test_a_bad_sort_key_is_400_naming_it_and_calls_nothing(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    for query, field in (
        ("sort_key=flavor", "sort_key"),
        ("sort_dir=sideways", "sort_dir"),
        ("status=RUNNING", "status"),
        ("changes-since=noon", "changes-since"),
        ("name=" + "x" * 256, "name"),
    ):
        answer = call(application, "GET", f"/v1/instances?{query}", **V110)
        assert answer.status_code == 400, query
        assert answer.json["errors"][0]["field"] == field
    assert "flavor" in call(application, "GET", "/v1/instances?sort_key=flavor", **V110).text
    assert fake.calls == []


def test_limits_are_novas_shape_of_the_callers_quota(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path, "token")
    assert call(application, "GET", "/v1/limits", X_Auth_Token="mem").status_code == 404
    answer = call(application, "GET", "/v1/limits", X_Auth_Token="mem", **V111)
    assert answer.status_code == 200
    assert answer.json == {
        "limits": {
            "rate": [],
            "absolute": {
                "maxTotalInstances": 10,
                "totalInstancesUsed": 3,
                "maxTotalCores": -1,
                "totalCoresUsed": 0,
                "maxTotalRAMSize": -1,
                "totalRAMUsed": 0,
            },
            "resource_classes": {"baremetal-gold": {"limit": 2, "in_use": 1}},
        }
    }
    assert fake.calls[-1][1] == ("p1",)
    # Another project's: admins only, as Nova's limits:other_project.
    other = call(application, "GET", "/v1/limits?tenant_id=p2", X_Auth_Token="mem", **V111)
    assert other.status_code == 403 and other.json["errors"][0]["field"] == "tenant_id"
    admin = call(application, "GET", "/v1/limits?tenant_id=p2", X_Auth_Token="adm", **V111)
    assert admin.status_code == 200 and fake.calls[-1][1] == ("p2",)
    # A token of no project must name one.
    none = call(application, "GET", "/v1/limits", X_Auth_Token="rd", **V111)
    assert none.status_code == 400 and none.json["errors"][0]["field"] == "tenant_id"


def test_the_action_history_since_1_12(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path, "token")
    path = f"/v1/instances/{UUID}/actions"
    assert call(application, "GET", path, X_Auth_Token="rd", **V111).status_code == 404
    listed = call(application, "GET", path, X_Auth_Token="rd", **V112)
    assert listed.json == {"instanceActions": [{"action": "create", "request_id": "req-1"}]}
    shown = call(application, "GET", f"{path}/req-9", X_Auth_Token="rd", **V112)
    assert shown.json["instanceAction"]["request_id"] == "req-9"
    assert [c[0] for c in fake.calls] == ["list_instance_actions", "show_instance_action"]


def test_the_new_routes_are_in_the_openapi_document() -> None:
    document = openapi.document(v1.ROUTES)
    listing = document["paths"]["/v1/instances"]["get"]["parameters"]
    sort_key = next(p for p in listing if p.get("name") == "sort_key")
    assert sort_key["schema"]["enum"] == [
        "created_at",
        "updated_at",
        "display_name",
        "uuid",
        "vm_state",
    ]
    assert sort_key["x-min-version"] == "1.10"
    assert document["paths"]["/v1/limits"]["get"]["x-min-version"] == "1.11"
    actions = document["paths"]["/v1/instances/{instance}/actions/{request_id}"]["get"]
    assert actions["x-policy-rule"] == "ringfleet:instance:actions:show"


def test_the_action_records_and_limits_validate_against_their_schemas() -> None:
    """The replies as the conductor makes them (conductor/db/instance_actions.py)
    against the document's schemas, formats checked (times with a zone)."""
    jsonschema = pytest.importorskip("jsonschema")
    document = openapi.document(v1.ROUTES)
    action = {
        "action": "stop",
        "instance_uuid": UUID,
        "request_id": "req-1",
        "project_id": "p1",
        "user_id": "u1",
        "start_time": "2026-11-29T21:00:44.782970+00:00",
        "finish_time": None,
        "updated_at": "2026-11-29T21:00:44.782970+00:00",
        "message": None,
    }
    event = {
        "event": "ringfleet_stop_instance",
        "start_time": action["start_time"],
        "finish_time": None,
        "result": None,
    }
    limits = {"limits": nova_limits(QUOTA)}
    for body, name in (
        ({"instanceActions": [action]}, "InstanceActionList"),
        ({"instanceAction": {**action, "events": [event]}}, "InstanceActionDetail"),
        (limits, "Limits"),
    ):
        schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
        )
        validator.validate(body)
    with pytest.raises(jsonschema.ValidationError):
        schema = {
            "$ref": "#/components/schemas/InstanceActionList",
            "components": document["components"],
        }
        jsonschema.Draft202012Validator(schema).validate({"instanceActions": [{"reboot": None}]})
