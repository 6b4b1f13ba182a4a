# SPDX-License-Identifier: Apache-2.0
"""Key pairs, instance metadata and tags (Nova's), and base64 user data.

The rules (:mod:`conductor.validation.tenant_data`), the conductor's
endpoints on SQLite (migrated: 0014 included), and the HTTP API's routes,
microversions and policy in front of a recording fake.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conductor.api import app as api_app
from conductor.api import policy
from conductor.common.exception import (
    DuplicateKeyPair,
    Forbidden,
    InstanceLabelNotFound,
    InstanceNotFound,
    InstanceStateConflict,
    InvalidInput,
    KeyPairNotFound,
    QuotaExceeded,
)
from conductor.common.instance_states import Event
from conductor.db import flavors, instances, quotas
from conductor.db.engine import Database
from conductor.endpoints.instance_labels import InstanceLabelsEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.keypairs import KeyPairsEndpoint
from conductor.validation import validate_flavor_spec
from conductor.validation.fields import Errors
from conductor.validation.tenant_data import (
    check_key_name,
    check_metadata,
    check_public_key,
    check_tag,
    check_tags,
    generate_key_pair,
)
from tests.dbutil import migrated
from tests.endpoint_stubs import RecordingQueue
from tests.unit.test_api import call, errors, make_app

ALICE = {"request_id": "req-a", "project_id": "p1", "user_id": "alice", "roles": ["member"]}
BOB = {"request_id": "req-b", "project_id": "p1", "user_id": "bob", "roles": ["member"]}
EVE = {"request_id": "req-e", "project_id": "p2", "user_id": "eve", "roles": ["member"]}
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@host"


def _check(check: Any, value: Any) -> tuple[Any, list[str]]:
    errors = Errors()
    result = check(value, "f", errors)
    return result, [e.reason for e in errors.items]


# -- the rules ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mykey", "a b", "me@host.example", "k_1-2"])
def test_nova_key_names_are_taken(name: str) -> None:
    assert _check(check_key_name, name) == (name, [])


@pytest.mark.parametrize("name", ["", " lead", "trail ", "bad/slash", "x" * 256, 7, "é"])
def test_other_key_names_are_refused(name: Any) -> None:
    result, reasons = _check(check_key_name, name)
    assert result is None and reasons


def test_a_public_key_gets_novas_md5_fingerprint() -> None:
    (key, fingerprint), reasons = _check(check_public_key, ED25519 + "\n")
    assert reasons == [] and key == ED25519
    blob = base64.b64decode(ED25519.split()[1])
    import hashlib  # noqa: PLC0415 -- the expected value, computed as Nova does

    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    assert fingerprint == ":".join(digest[i : i + 2] for i in range(0, 32, 2))


@pytest.mark.parametrize("key", ["ssh-rsa AAAA", "not a key", "ssh-ed25519 !!!!", "", 3])
def test_what_is_not_a_public_key_is_refused_without_echoing_it(key: Any) -> None:
    result, reasons = _check(check_public_key, key)
    assert result is None and len(reasons) == 1


def test_a_generated_key_pair_is_usable() -> None:
    private, public, fingerprint = generate_key_pair()
    assert private.startswith("-----BEGIN RSA PRIVATE KEY-----")
    (key, again), reasons = _check(check_public_key, public)
    assert reasons == [] and again == fingerprint and key == public


def test_metadata_follows_novas_limits() -> None:
    assert _check(check_metadata, {"role": "db", "a:b.c d-e_f": ""}) == (
        {"role": "db", "a:b.c d-e_f": ""},
        [],
    )
    for bad in ({"": "x"}, {"k/ey": "x"}, {"k": "x" * 256}, {"k": 1}, ["k"]):
        assert _check(check_metadata, bad)[0] is None
    assert _check(check_metadata, {f"k{i}": "v" for i in range(129)})[0] is None


def test_tags_follow_novas_limits() -> None:
    assert _check(check_tag, "prod")[0] == "prod"
    for bad in ("", "a,b", "a/b", "x" * 61, None):
        assert _check(check_tag, bad)[0] is None
    assert _check(check_tags, ["b", "a", "b"])[0] == ("b", "a")
    assert _check(check_tags, [f"t{i}" for i in range(51)])[0] is None


# -- the conductor's endpoints --------------------------------------------------------


@dataclass
class Env:
    db: Database
    keys: KeyPairsEndpoint
    instances: InstancesEndpoint
    labels: InstanceLabelsEndpoint


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    flavors.create_flavor(db, validate_flavor_spec({"name": "small", "resource_class": "bm"}))
    yield Env(
        db,
        KeyPairsEndpoint(db, lambda: quotas.Defaults(key_pairs=3)),
        InstancesEndpoint(db, RecordingQueue()),
        InstanceLabelsEndpoint(db),
    )
    db.dispose()


def test_key_pairs_are_their_users_own(env: Env) -> None:
    created = env.keys.create_keypair(ALICE, name="mykey", public_key=ED25519)
    assert created["user_id"] == "alice" and "private_key" not in created
    assert [k["name"] for k in env.keys.list_keypairs(ALICE)] == ["mykey"]
    # Another user, even of the same project, neither sees it nor is stopped by its name.
    assert env.keys.list_keypairs(BOB) == []
    with pytest.raises(KeyPairNotFound):
        env.keys.show_keypair(BOB, name="mykey")
    with pytest.raises(KeyPairNotFound):
        env.keys.delete_keypair(EVE, name="mykey")
    env.keys.create_keypair(BOB, name="mykey", public_key=ED25519)
    with pytest.raises(DuplicateKeyPair):
        env.keys.create_keypair(ALICE, name="mykey", public_key=ED25519)
    env.keys.delete_keypair(ALICE, name="mykey")
    assert env.keys.list_keypairs(ALICE) == []
    assert [k["name"] for k in env.keys.list_keypairs(BOB)] == ["mykey"]


def test_a_generated_key_returns_its_private_half_once(env: Env) -> None:
    created = env.keys.create_keypair(ALICE, name="gen")
    assert created["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert "private_key" not in env.keys.show_keypair(ALICE, name="gen")


def test_key_pairs_are_limited_per_user_and_checked(env: Env) -> None:
    for i in range(3):
        env.keys.create_keypair(ALICE, name=f"k{i}", public_key=ED25519)
    with pytest.raises(QuotaExceeded) as exc:
        env.keys.create_keypair(ALICE, name="k3", public_key=ED25519)
    assert exc.value.resource == "key_pairs"
    env.keys.create_keypair(BOB, name="k3", public_key=ED25519)
    with pytest.raises(InvalidInput) as bad:
        env.keys.create_keypair(BOB, name=" x", public_key="nope")
    assert {e.field for e in bad.value.errors} == {"name", "public_key"}
    with pytest.raises(Forbidden):
        env.keys.list_keypairs({"request_id": "r", "project_id": "p1"})


def _built(env: Env, ctxt: dict[str, Any], **request: Any) -> dict[str, Any]:
    [instance] = env.instances.build_instances(ctxt, request={"flavor": "small", **request})
    return instance


def _activate(env: Env, uuid: str) -> None:
    with env.db.writing() as connection:
        connection.execute(
            instances._INSTANCES.update()
            .where(instances._INSTANCES.c.uuid == uuid)
            .values(vm_state="active", task_state=None, node_uuid=uuid)
        )


def test_a_build_with_a_key_name_carries_the_public_key_and_labels(env: Env) -> None:
    env.keys.create_keypair(ALICE, name="mykey", public_key=ED25519)
    built = _built(env, ALICE, key_name="mykey", metadata={"role": "db"}, tags=["prod", "a"])
    assert built["key_name"] == "mykey"
    assert built["metadata"] == {"role": "db"} and built["tags"] == ["a", "prod"]
    shown = env.instances.show_instance(ALICE, instance=built["uuid"])
    meta_data = shown["config_drive"]["meta_data"]
    assert meta_data["public_keys"] == {"mykey": ED25519}
    assert meta_data["meta"] == {"role": "db"}
    assert shown["metadata"] == {"role": "db"} and shown["tags"] == ["a", "prod"]
    [listed] = env.instances.list_instances(ALICE)
    assert listed["tags"] == ["a", "prod"] and listed["key_name"] == "mykey"
    # Another user's key name is not a key of the caller's: 400 naming key_name.
    with pytest.raises(InvalidInput) as exc:
        _built(env, BOB, key_name="mykey")
    assert exc.value.errors[0].field == "key_name"
    assert env.instances.list_instances(EVE) == []


def test_metadata_and_tags_change_while_active_only_and_stay_in_the_project(env: Env) -> None:
    uuid = _built(env, ALICE, metadata={"a": "1"})["uuid"]
    with pytest.raises(InstanceStateConflict):
        env.labels.add_instance_tag(ALICE, instance=uuid, tag="t")
    _activate(env, uuid)
    assert env.labels.set_instance_metadata(ALICE, instance=uuid, metadata={"b": "2"}) == {
        "a": "1",
        "b": "2",
    }
    assert env.labels.set_instance_metadata(
        BOB, instance=uuid, metadata={"c": "3"}, replace=True
    ) == {"c": "3"}
    env.labels.delete_instance_metadata(ALICE, instance=uuid, key="c")
    with pytest.raises(InstanceLabelNotFound):
        env.labels.delete_instance_metadata(ALICE, instance=uuid, key="c")
    assert env.labels.add_instance_tag(ALICE, instance=uuid, tag="t") is True
    assert env.labels.add_instance_tag(ALICE, instance=uuid, tag="t") is False
    assert env.labels.set_instance_tags(ALICE, instance=uuid, tags=["z", "y"]) == ["y", "z"]
    env.labels.delete_instance_tag(ALICE, instance=uuid, tag="y")
    assert env.labels.get_instance_tags(ALICE, instance=uuid) == ["z"]
    # Another project: as if the instance did not exist, and nothing changes.
    for attempt in (
        lambda: env.labels.get_instance_metadata(EVE, instance=uuid),
        lambda: env.labels.add_instance_tag(EVE, instance=uuid, tag="x"),
        lambda: env.labels.set_instance_metadata(EVE, instance=uuid, metadata={"x": "1"}),
    ):
        with pytest.raises(InstanceNotFound):
            attempt()
    assert env.labels.get_instance_metadata(ALICE, instance=uuid) == {}
    instances.set_state(env.db, uuid, Event.DELETE)
    with pytest.raises(InstanceStateConflict):
        env.labels.set_instance_tags(ALICE, instance=uuid, tags=[])


def test_labels_are_limited_as_novas(env: Env) -> None:
    uuid = _built(env, ALICE, metadata={f"k{i}": "v" for i in range(128)})["uuid"]
    _activate(env, uuid)
    with pytest.raises(QuotaExceeded) as exc:
        env.labels.set_instance_metadata(ALICE, instance=uuid, metadata={"one-more": "v"})
    assert exc.value.resource == "metadata_items"
    assert len(env.labels.get_instance_metadata(ALICE, instance=uuid)) == 128
    env.labels.set_instance_tags(ALICE, instance=uuid, tags=[f"t{i}" for i in range(50)])
    with pytest.raises(InvalidInput):
        env.labels.add_instance_tag(ALICE, instance=uuid, tag="t50")


# -- the HTTP API -----------------------------------------------------------------------

V16 = {"OpenStack_API_Version": "baremetal-fleet 1.6"}
V17 = {"OpenStack_API_Version": "baremetal-fleet 1.7"}
V18 = {"OpenStack_API_Version": "baremetal-fleet 1.8"}
V19 = {"OpenStack_API_Version": "baremetal-fleet 1.9"}


@pytest.fixture
def app(tmp_path: Path) -> tuple[api_app.Application, Any]:
    return make_app(tmp_path)


def test_user_data_is_base64_from_1_7_and_raw_text_before(app: tuple[Any, Any]) -> None:
    application, fake = app
    text = "#cloud-config\npackages: [nginx]\n"
    encoded = base64.b64encode(text.encode()).decode()
    body = {"flavor": "small", "instance_uuids": ["u1"], "user_data": encoded}
    assert call(application, "POST", "/v1/instances", body, **V17).status_code == 202
    assert fake.calls[-1][1][0]["user_data"] == text
    # Wrapped at 76 characters, as base64(1) writes it: taken.
    wrapped = "\n".join(encoded[i : i + 10] for i in range(0, len(encoded), 10))
    body = {"flavor": "small", "instance_uuids": ["u2"], "user_data": wrapped}
    assert call(application, "POST", "/v1/instances", body, **V19).status_code == 202
    assert fake.calls[-1][1][0]["user_data"] == text
    # Below 1.7 the raw text, as before.
    body = {"flavor": "small", "instance_uuids": ["u3"], "user_data": text}
    assert call(application, "POST", "/v1/instances", body, **V16).status_code == 202
    assert fake.calls[-1][1][0]["user_data"] == text


@pytest.mark.parametrize(
    "value",
    ["not base64!", base64.b64encode(b"\xff\xfe\x00").decode(), "QQ" * 40000, 5],
    ids=["not-base64", "not-utf8", "too-long", "not-a-string"],
)
def test_bad_base64_user_data_is_a_400_naming_it(app: tuple[Any, Any], value: Any) -> None:
    application, fake = app
    body = {"flavor": "small", "user_data": value}
    response = call(application, "POST", "/v1/instances", body, **V17)
    assert response.status_code == 400
    assert errors(response)[0]["field"] == "user_data"
    assert fake.calls == []
    rebuild = {"rebuild": {"user_data": value}}
    response = call(application, "POST", "/v1/instances/i1/action", rebuild, **V17)
    assert response.status_code == 400
    assert errors(response)[0]["field"] == "rebuild.user_data"


def test_new_fields_and_routes_need_their_microversion(app: tuple[Any, Any]) -> None:
    application, fake = app
    for field, value, version in (
        ("key_name", "k", "1.8"),
        ("metadata", {"a": "b"}, "1.9"),
        ("tags", ["t"], "1.9"),
    ):
        body = {"flavor": "small", field: value}
        response = call(application, "POST", "/v1/instances", body, **V17)
        assert response.status_code == 400
        assert f"needs microversion {version}" in errors(response)[0]["reason"]
    assert call(application, "GET", "/v1/keypairs", **V17).status_code == 404
    assert call(application, "GET", "/v1/instances/i1/tags", **V18).status_code == 404
    assert fake.calls == []


def test_instances_show_key_name_and_labels_from_their_microversions(
    app: tuple[Any, Any],
) -> None:
    application, fake = app
    fake.instances["i1"] = {"uuid": "i1", "key_name": "k", "metadata": {}, "tags": []}
    assert set(call(application, "GET", "/v1/instances/i1", **V17).json) == {"uuid"}
    assert set(call(application, "GET", "/v1/instances/i1", **V18).json) == {"uuid", "key_name"}
    shown = call(application, "GET", "/v1/instances/i1", **V19).json
    assert set(shown) == {"uuid", "key_name", "metadata", "tags"}


def test_key_pair_routes_have_novas_bodies(app: tuple[Any, Any]) -> None:
    application, fake = app
    fake._create_keypair = lambda name, public_key: {"name": name, "public_key": public_key}
    body = {"keypair": {"name": "mykey", "public_key": ED25519}}
    created = call(application, "POST", "/v1/keypairs", body, **V18)
    assert created.status_code == 201
    assert created.headers["Location"].endswith("/v1/keypairs/mykey")
    assert created.json == {"keypair": {"name": "mykey", "public_key": ED25519}}
    for bad, field in (
        ({"keypair": {"name": "k", "type": "x509"}}, "keypair.type"),
        ({"keypair": {"name": "k", "user_id": "u"}}, "keypair.user_id"),
        ({"keypair": "k"}, "keypair"),
        ({"name": "k"}, "name"),
    ):
        response = call(application, "POST", "/v1/keypairs", bad, **V18)
        assert response.status_code == 400, bad
        assert errors(response)[0]["field"] == field
    fake._list_keypairs = lambda: [{"name": "a"}]
    assert call(application, "GET", "/v1/keypairs", **V18).json == {
        "keypairs": [{"keypair": {"name": "a"}}]
    }
    assert call(application, "DELETE", "/v1/keypairs/a", **V18).status_code == 204
    assert fake.calls[-1][:2] == ("delete_keypair", ("a",))


def test_tag_and_metadata_routes_answer_as_novas(app: tuple[Any, Any]) -> None:
    application, fake = app
    tags: list[str] = []

    def add(instance: str, tag: str) -> bool:
        new = tag not in tags
        tags.append(tag)
        return new

    fake._add_instance_tag = add
    fake._get_instance_tags = lambda instance: tags
    fake._get_instance_metadata = lambda instance: {"a": "1"}
    put = call(application, "PUT", "/v1/instances/i1/tags/prod", **V19)
    assert put.status_code == 201 and put.headers["Location"].endswith("/v1/instances/i1/tags/prod")
    assert call(application, "PUT", "/v1/instances/i1/tags/prod", **V19).status_code == 204
    assert call(application, "GET", "/v1/instances/i1/tags/prod", **V19).status_code == 204
    assert call(application, "GET", "/v1/instances/i1/tags/other", **V19).status_code == 404
    assert call(application, "GET", "/v1/instances/i1/metadata/a", **V19).json == {
        "meta": {"a": "1"}
    }
    assert call(application, "GET", "/v1/instances/i1/metadata/b", **V19).status_code == 404
    mismatch = {"meta": {"b": "2"}}
    response = call(application, "PUT", "/v1/instances/i1/metadata/a", mismatch, **V19)
    assert response.status_code == 400 and errors(response)[0]["field"] == "meta"
    item = call(application, "PUT", "/v1/instances/i1/metadata/a.b", {"meta": {"a.b": "2"}}, **V19)
    assert item.status_code == 200 and item.json == {"meta": {"a.b": "2"}}
    assert fake.calls[-1][:2] == ("set_instance_metadata", ("i1", {"a.b": "2"}, False))
    body = {"metadata": {"x": "y"}}
    call(application, "PUT", "/v1/instances/i1/metadata", body, **V19)
    assert fake.calls[-1][:2] == ("set_instance_metadata", ("i1", {"x": "y"}, True))
    call(application, "POST", "/v1/instances/i1/metadata", body, **V19)
    assert fake.calls[-1][:2] == ("set_instance_metadata", ("i1", {"x": "y"}, False))
    assert call(application, "DELETE", "/v1/instances/i1/tags", **V19).status_code == 204
    assert fake.calls[-1][:2] == ("set_instance_tags", ("i1", []))


def test_the_new_rules_are_project_scoped_and_by_role(tmp_path: Path) -> None:
    application, _fake = make_app(tmp_path, "token")
    reader = {"X_Auth_Token": "rd", **V19}
    assert call(application, "GET", "/v1/keypairs", **reader).status_code == 200
    body = {"keypair": {"name": "k"}}
    assert call(application, "POST", "/v1/keypairs", body, **reader).status_code == 403
    assert call(application, "PUT", "/v1/instances/i1/tags/t", **reader).status_code == 403
    for rule in (
        "ringfleet:keypair:list",
        "ringfleet:keypair:create",
        "ringfleet:keypair:delete",
        "ringfleet:instance:metadata:list",
        "ringfleet:instance:metadata:update",
        "ringfleet:instance:tags:list",
        "ringfleet:instance:tags:update",
    ):
        assert policy.scope_types(rule) == ["project"]
