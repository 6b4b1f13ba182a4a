# SPDX-License-Identifier: Apache-2.0
"""Microversion 1.13 (conductor API 1.23): the key_pairs quota in the quota
routes and /v1/limits, Nova's tag filters, the action history's pages and a
rebuild's key_name; in-process (a fake conductor) for the API, on SQLite
with the real endpoints for the conductor."""

from __future__ import annotations

import datetime
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from conductor.api import openapi, v1
from conductor.common.exception import InstanceActionNotFound, InvalidInput, QuotaExceeded
from conductor.common.instance_states import Event
from conductor.common.list_filters import check_list_filters
from conductor.common.nova_limits import nova_limits
from conductor.db import instances, keypairs, quotas
from conductor.db.models import InstanceActionModel, InstanceModel
from conductor.endpoints.instance_labels import InstanceLabelsEndpoint
from conductor.endpoints.keypairs import KeyPairsEndpoint
from conductor.endpoints.quotas import QuotasEndpoint
from tests.unit.test_api import call
from tests.unit.test_api_nova_listing import QUOTA, UUID, app_with
from tests.unit.test_instance_actions import Env, env  # noqa: F401 -- the fixture

V112 = {"OpenStack_API_Version": "baremetal-fleet 1.12"}
V113 = {"OpenStack_API_Version": "baremetal-fleet 1.13"}
KEYED_QUOTA = {
    **QUOTA,
    "quotas": {**QUOTA["quotas"], "key_pairs": {"limit": 100, "in_use": 2, "default": True}},
}
ALICE: dict[str, Any] = {"request_id": "req-a", "project_id": "p1", "user_id": "alice"}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@host"


# -- the API ---------------------------------------------------------------------------


def _keyed_app(tmp_path: Path) -> tuple[Any, Any]:
    application, fake = app_with(tmp_path, "token")
    fake._show_quota = lambda project_id: {**KEYED_QUOTA, "project_id": project_id}
    fake._set_quota = lambda project_id, quotas: {**KEYED_QUOTA, "project_id": project_id}
    return application, fake


def test_limits_show_the_key_pair_quota_from_1_13(tmp_path: Path) -> None:
    application, _ = _keyed_app(tmp_path)
    old = call(application, "GET", "/v1/limits", X_Auth_Token="mem", **V112).json
    assert "maxTotalKeypairs" not in old["limits"]["absolute"]
    new = call(application, "GET", "/v1/limits", X_Auth_Token="mem", **V113).json
    absolute = new["limits"]["absolute"]
    assert (absolute["maxTotalKeypairs"], absolute["totalKeyPairsUsed"]) == (100, 2)


def test_the_quota_routes_show_and_set_key_pairs_from_1_13(tmp_path: Path) -> None:
    application, fake = _keyed_app(tmp_path)
    path = "/v1/quotas/p1"
    old = call(application, "GET", path, X_Auth_Token="adm", **V112).json
    assert "key_pairs" not in old["quotas"] and "instances" in old["quotas"]
    new = call(application, "GET", path, X_Auth_Token="adm", **V113).json
    assert new["quotas"]["key_pairs"] == {"limit": 100, "in_use": 2, "default": True}
    body = {"quotas": {"key_pairs": 5}}
    refused = call(application, "PUT", path, body, X_Auth_Token="adm", **V112)
    assert refused.status_code == 400
    assert refused.json["errors"][0]["field"] == "quotas.key_pairs"
    assert [c for c in fake.calls if c[0] == "set_quota"] == []
    assert call(application, "PUT", path, body, X_Auth_Token="adm", **V113).status_code == 200
    [(_, args, _kw)] = [c for c in fake.calls if c[0] == "set_quota"]
    assert args == ("p1", {"key_pairs": 5})


def test_tag_filters_reach_the_conductor_from_1_13(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    query = "tags=a,b&tags-any=c&not-tags=d,e&not-tags-any=f"
    assert call(application, "GET", f"/v1/instances?{query}", **V113).status_code == 200
    [(_, _, kwargs)] = [c for c in fake.calls if c[0] == "list_instances"]
    assert (kwargs["tags"], kwargs["tags_any"], kwargs["not_tags"], kwargs["not_tags_any"]) == (
        "a,b",
        "c",
        "d,e",
        "f",
    )
    old = call(application, "GET", "/v1/instances?tags=a", **V112)
    assert old.status_code == 400 and old.json["errors"][0]["field"] == "tags"
    for bad in ("tags=a/b", "tags-any=a,,b", "not-tags=" + "x" * 61):
        answer = call(application, "GET", f"/v1/instances?{bad}", **V113)
        assert answer.status_code == 400, bad
        assert answer.json["errors"][0]["field"] == bad.split("=")[0]
    assert len([c for c in fake.calls if c[0] == "list_instances"]) == 1


def test_the_action_history_pages_from_1_13(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path, "token")
    fake._list_instance_actions = lambda instance, **paged: [
        {"action": "stop", "request_id": "req-2"},
        {"action": "create", "request_id": "req-1"},
    ][: paged.get("limit") or 2]
    path = f"/v1/instances/{UUID}/actions"
    query = "?limit=1&changes-since=2026-11-29T20:00:00Z&changes-before=2026-11-30T00:00:00Z"
    page = call(application, "GET", path + query, X_Auth_Token="rd", **V113).json
    assert page["instanceActions"] == [{"action": "stop", "request_id": "req-2"}]
    assert "marker=req-2" in page["next"] and "limit=1" in page["next"]
    kwargs = fake.calls[-1][2]
    assert (kwargs["limit"], kwargs["marker"]) == (1, None)
    assert kwargs["changes_since"] == "2026-11-29T20:00:00Z"
    assert kwargs["changes_before"] == "2026-11-30T00:00:00Z"
    bad = call(application, "GET", path + "?changes-before=noon", X_Auth_Token="rd", **V113)
    assert bad.status_code == 400 and bad.json["errors"][0]["field"] == "changes-before"
    old = call(application, "GET", path + "?limit=1", X_Auth_Token="rd", **V112)
    assert old.status_code == 400 and old.json["errors"][0]["field"] == "limit"


def test_a_rebuilds_key_name_from_1_13(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    path = f"/v1/instances/{UUID}/action"
    for body, expected in (({"key_name": "laptop"}, "laptop"), ({"key_name": None}, "")):
        answer = call(application, "POST", path, {"rebuild": body}, **V113)
        assert answer.status_code == 202
        assert fake.calls[-1][0] == "rebuild_instance"
        assert fake.calls[-1][2]["key_name"] == expected
    old = call(application, "POST", path, {"rebuild": {"key_name": "laptop"}}, **V112)
    assert old.status_code == 400 and old.json["errors"][0]["field"] == "rebuild.key_name"


def test_the_openapi_document_states_the_new_parameters_and_fields() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    document = openapi.document(v1.ROUTES)
    listing = {p.get("name"): p for p in document["paths"]["/v1/instances"]["get"]["parameters"]}
    for name in ("tags", "tags-any", "not-tags", "not-tags-any"):
        assert listing[name]["x-min-version"] == "1.13"
    actions = document["paths"]["/v1/instances/{instance}/actions"]["get"]["parameters"]
    assert {p.get("name") for p in actions} >= {
        "limit",
        "marker",
        "changes-since",
        "changes-before",
    }
    limits = {"limits": nova_limits(KEYED_QUOTA)}
    schema = {"$ref": "#/components/schemas/Limits", "components": document["components"]}
    jsonschema.Draft202012Validator(schema).validate(limits)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(
            {"limits": {**limits["limits"], "absolute": {"maxTotalKeypairs": 1}}}
        )


# -- the conductor ---------------------------------------------------------------------


def test_tag_filters_have_novas_semantics(env: Env) -> None:  # noqa: F811
    labels = InstanceLabelsEndpoint(env.db)
    tagged = {"ab": ["a", "b"], "a": ["a"], "c": ["c"], "none": []}
    uuids = {env.instance: "ab"}
    env.set(project_id="p1", name="ab")
    for name in ("a", "c", "none"):
        uuid = str(uuidlib.uuid4())
        with env.db.transaction() as session:
            session.execute(InstanceModel.__table__.insert().values(**_row(uuid, name)))
        uuids[uuid] = name
    for uuid, name in uuids.items():
        labels.set_instance_tags({}, instance=uuid, tags=tagged[name])

    def listed(**filters: str) -> list[str]:
        found = env.instances.list_instances(ALICE, **filters)
        return sorted(uuids[i["uuid"]] for i in found)

    assert listed(tags="a,b") == ["ab"]
    assert listed(tags="a") == ["a", "ab"]
    assert listed(tags_any="b,c") == ["ab", "c"]
    assert listed(not_tags="a,b") == ["a", "c", "none"]
    assert listed(not_tags_any="a,c") == ["none"]
    assert listed(tags="a", not_tags="b") == ["a"]
    with pytest.raises(InvalidInput) as bad:
        env.instances.list_instances(ALICE, tags="a/b", not_tags_any="")
    assert [e.field for e in bad.value.errors] == ["tags", "not-tags-any"]
    assert check_list_filters(tags="a,a,b").tags == ("a", "b")


def test_the_action_history_pages_by_request_id_and_time(env: Env) -> None:  # noqa: F811
    start = datetime.datetime(2026, 11, 29, 20, 0, 0)
    with env.db.transaction() as session:
        for i in range(5):
            session.add(
                InstanceActionModel(
                    instance_uuid=env.instance,
                    request_id=f"req-{i}",
                    action="reboot",
                    start_time=start + datetime.timedelta(minutes=i),
                    finish_time=None
                    if i == 4
                    else start + datetime.timedelta(minutes=i, seconds=30),
                )
            )
    actions = env.instances.list_instance_actions

    def ids(**paged: Any) -> list[str]:
        return [a["request_id"] for a in actions({}, instance=env.instance, **paged)]

    assert ids() == [f"req-{i}" for i in (4, 3, 2, 1, 0)]
    assert ids(limit=2) == ["req-4", "req-3"]
    assert ids(limit=2, marker="req-3") == ["req-2", "req-1"]
    assert ids(marker="req-1") == ["req-0"]
    assert ids(changes_since="2026-11-29T20:02:30Z") == ["req-4", "req-3", "req-2"]
    assert ids(changes_before="2026-11-29T20:01:30") == ["req-1", "req-0"]
    assert ids(changes_since="2026-11-29T21:02:30+01:00", limit=1) == ["req-4"]
    with pytest.raises(InstanceActionNotFound):
        ids(marker="req-nope")
    with pytest.raises(InvalidInput) as bad:
        ids(changes_since="noon", changes_before="later", limit=0)
    assert [e.field for e in bad.value.errors] == ["limit"]


def test_a_rebuild_replaces_or_drops_the_key_pair(env: Env) -> None:  # noqa: F811
    KeyPairsEndpoint(env.db).create_keypair(ALICE, name="new", public_key=KEY)
    env.set(
        project_id="p1",
        key_name="old",
        config_drive={"meta_data": {"uuid": env.instance, "public_keys": {"old": "ssh-rsa X"}}},
    )
    env.instances.rebuild_instance(ALICE, instance=env.instance, key_name="new")
    stored = instances.get_instance(env.db, env.instance)
    assert stored.key_name == "new"
    assert stored.config_drive["meta_data"]["public_keys"] == {"new": KEY}
    instances.set_state(env.db, env.instance, Event.REBUILT)
    env.instances.rebuild_instance(ALICE, instance=env.instance, key_name="")
    stored = instances.get_instance(env.db, env.instance)
    assert stored.key_name is None
    assert stored.config_drive["meta_data"] == {"uuid": env.instance}
    instances.set_state(env.db, env.instance, Event.REBUILT)
    with pytest.raises(InvalidInput) as bad:
        env.instances.rebuild_instance(ALICE, instance=env.instance, key_name="nope")
    assert bad.value.errors[0].field == "key_name"


def test_the_quota_shows_the_callers_key_pairs_and_an_admin_sets_their_limit(
    env: Env,  # noqa: F811
) -> None:
    keys = KeyPairsEndpoint(env.db, lambda: quotas.Defaults(key_pairs=3))
    for i in range(2):
        keys.create_keypair(ALICE, name=f"k{i}", public_key=KEY)
    endpoint = QuotasEndpoint(env.db, lambda: quotas.Defaults(key_pairs=3))
    shown = endpoint.show_quota(ALICE, project_id="p1")["quotas"]["key_pairs"]
    assert shown == {"limit": 3, "in_use": 2, "default": True}
    admin = {"project_id": "adm", "user_id": "root", "roles": ["admin"], "is_admin": True}
    endpoint.set_quota(admin, project_id="p1", quotas={"key_pairs": 2})
    with pytest.raises(QuotaExceeded) as refused:
        keys.create_keypair(ALICE, name="k2", public_key=KEY)
    assert (refused.value.resource, refused.value.limit) == ("key_pairs", 2)
    # Counted per user, in every project: the limit of the project created in.
    keys.create_keypair({**ALICE, "project_id": "p2"}, name="k2", public_key=KEY)
    with env.db.read() as connection:
        assert keypairs.count(connection, "alice") == 3


def _row(uuid: str, name: str) -> dict[str, Any]:
    return {"uuid": uuid, "name": name, "flavor": "f", "vm_state": "active", "project_id": "p1"}
