# SPDX-License-Identifier: Apache-2.0
"""Microversion 1.14 (conductor API 1.24): a marker not in its list is 400,
as Nova's; key pairs a page at a time (Nova's 2.35) and another user's for
admins (Nova's 2.10).  In-process (a fake conductor) for the API and the
CLI, on SQLite with the real endpoint for the conductor."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conductor.api import openapi, v1
from conductor.cli.keypair import KeypairCreate, KeypairDelete, KeypairList, KeypairShow
from conductor.common.exception import (
    Forbidden,
    InstanceActionNotFound,
    InstanceNotFound,
    InvalidInput,
    KeyPairNotFound,
)
from conductor.db import quotas
from conductor.db.engine import Database
from conductor.endpoints.keypairs import KeyPairsEndpoint
from conductor.rpcapi_labels import LabelCalls
from tests.dbutil import migrated
from tests.unit.test_api import call, errors, make_app
from tests.unit.test_api_nova_listing import UUID, app_with

V113 = {"OpenStack_API_Version": "baremetal-fleet 1.13"}
V114 = {"OpenStack_API_Version": "baremetal-fleet 1.14"}
#: The token file of :func:`tests.unit.test_api.make_app`: its users' ids.
ADMIN, MEMBER = {"X_Auth_Token": "adm"}, {"X_Auth_Token": "mem"}
MEMBER_USER = "token-3"
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@host"


# -- markers: 400 from 1.14 ------------------------------------------------------------


def _unknown(exc: Exception) -> Any:
    def answer(*args: Any, **kwargs: Any) -> Any:
        raise exc

    return answer


def test_an_instance_marker_not_in_the_list_is_400_from_1_14(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    marker = "0b5e2d4c-3f8a-4b6c-9d4e-3f2a1b9a1f2c"
    fake._list_instances = _unknown(InstanceNotFound(marker))
    path = f"/v1/instances?sort_key=created_at&marker={marker}"
    old = call(application, "GET", path, **V113)
    assert old.status_code == 404 and errors(old)[0]["code"] == "ringfleet.not_found"
    new = call(application, "GET", path, **V114)
    assert new.status_code == 400, new.json
    [error] = errors(new)
    assert (error["field"], error["reason"]) == ("marker", "not found in this list")
    assert marker in error["value"]


def test_an_action_marker_not_in_the_history_is_400_from_1_14(tmp_path: Path) -> None:
    application, fake = app_with(tmp_path)
    fake._list_instance_actions = _unknown(InstanceActionNotFound("req-nope"))
    path = f"/v1/instances/{UUID}/actions?marker=req-nope"
    assert call(application, "GET", path, **V113).status_code == 404
    new = call(application, "GET", path, **V114)
    assert new.status_code == 400 and errors(new)[0]["field"] == "marker"
    # An unknown instance is still 404: not the marker's fault.
    fake._list_instance_actions = _unknown(InstanceNotFound(UUID))
    assert call(application, "GET", path, **V114).status_code == 404


def test_limits_show_max_server_meta_from_1_14(tmp_path: Path) -> None:
    application, _ = app_with(tmp_path)
    old = call(application, "GET", "/v1/limits?tenant_id=p1", **V113).json["limits"]
    assert "maxServerMeta" not in old["absolute"]
    new = call(application, "GET", "/v1/limits?tenant_id=p1", **V114).json["limits"]
    assert new["absolute"]["maxServerMeta"] == 128


# -- key pairs over HTTP ----------------------------------------------------------------


def test_key_pairs_page_from_1_14_with_a_next_link(tmp_path: Path) -> None:
    application, fake = make_app(tmp_path, "token")
    fake._list_keypairs = lambda **kwargs: [{"name": "a"}, {"name": "b"}][: kwargs.get("limit")]
    page = call(application, "GET", "/v1/keypairs?limit=2&marker=0", **MEMBER, **V114).json
    assert page["keypairs"] == [{"keypair": {"name": "a"}}, {"keypair": {"name": "b"}}]
    assert "marker=b" in page["next"] and "limit=2" in page["next"]
    assert fake.calls[-1][2] == {"limit": 2, "marker": "0"}
    old = call(application, "GET", "/v1/keypairs?limit=2", **MEMBER, **V113)
    assert old.status_code == 400 and errors(old)[0]["field"] == "limit"
    # The API checks the limit; the conductor the marker (a name of the user's).
    zero = call(application, "GET", "/v1/keypairs?limit=0", **MEMBER, **V114)
    assert zero.status_code == 400 and errors(zero)[0]["field"] == "limit"


def test_another_users_key_pairs_are_for_admins_from_1_14(tmp_path: Path) -> None:
    application, fake = make_app(tmp_path, "token")
    fake._list_keypairs = lambda **kwargs: []
    fake._show_keypair = lambda name, **kwargs: {"name": name}
    fake._create_keypair = lambda name, public_key, **kwargs: {"name": name}
    routes = (
        ("GET", "/v1/keypairs?user_id={}", None, "user_id"),
        ("GET", "/v1/keypairs/k?user_id={}", None, "user_id"),
        ("DELETE", "/v1/keypairs/k?user_id={}", None, "user_id"),
        ("POST", "/v1/keypairs", {"keypair": {"name": "k", "user_id": "{}"}}, "keypair.user_id"),
    )
    for method, path, body, field in routes:
        made = len(fake.calls)
        # A member naming another user: 403 naming the field, no conductor call.
        other = _with_user(body, "someone")
        refused = call(application, method, path.format("someone"), other, **MEMBER, **V114)
        assert refused.status_code == 403, (method, path)
        assert errors(refused)[0]["field"] == field
        assert len(fake.calls) == made
        # Its own user id is always taken; an admin names anyone.
        own = _with_user(body, MEMBER_USER)
        taken = call(application, method, path.format(MEMBER_USER), own, **MEMBER, **V114)
        assert taken.status_code < 300 and fake.calls[-1][2]["user_id"] == MEMBER_USER
        taken = call(application, method, path.format("someone"), other, **ADMIN, **V114)
        assert taken.status_code < 300 and fake.calls[-1][2]["user_id"] == "someone"
        # Below 1.14 it is unknown.
        old = call(application, method, path.format("someone"), other, **ADMIN, **V113)
        assert old.status_code == 400 and errors(old)[0]["field"] == field
    created = call(
        application, "POST", "/v1/keypairs", _with_user(routes[3][2], "someone"), **ADMIN, **V114
    )
    assert created.status_code == 201
    assert created.headers["Location"].endswith("/v1/keypairs/k?user_id=someone")


def _with_user(body: dict[str, Any] | None, user: str) -> dict[str, Any] | None:
    if body is None:
        return None
    return {"keypair": {**body["keypair"], "user_id": user}}


def test_the_openapi_document_states_the_1_14_parameters() -> None:
    document = openapi.document(v1.ROUTES)
    listed = {p.get("name"): p for p in document["paths"]["/v1/keypairs"]["get"]["parameters"]}
    for name in ("user_id", "limit", "marker"):
        assert listed[name]["x-min-version"] == "1.14", name
    for method in ("get", "delete"):
        names = [
            p.get("name") for p in document["paths"]["/v1/keypairs/{keypair}"][method]["parameters"]
        ]
        assert "user_id" in names
    inner = document["components"]["schemas"]["KeyPairCreate"]["properties"]["keypair"]
    assert inner["properties"]["user_id"]["x-min-version"] == "1.14"


# -- the conductor's key pairs -----------------------------------------------------------

ALICE = {"request_id": "req-a", "project_id": "p1", "user_id": "alice", "roles": ["member"]}
ADMIN_CTXT = {"request_id": "req-o", "project_id": "p1", "user_id": "root", "roles": ["admin"]}
#: The operator over RPC: an admin of no user.
OPERATOR = {"request_id": "req-r", "roles": ["admin"]}


@pytest.fixture
def keys(tmp_path: Path) -> Iterator[KeyPairsEndpoint]:
    db: Database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield KeyPairsEndpoint(db, lambda: quotas.Defaults(key_pairs=10))
    db.dispose()


def test_key_pairs_list_a_page_after_a_marker_by_code_point(keys: KeyPairsEndpoint) -> None:
    for name in ("b", "a", "B", "c d", "_"):
        keys.create_keypair(ALICE, name=name, public_key=ED25519)

    def names(**paged: Any) -> list[str]:
        return [k["name"] for k in keys.list_keypairs(ALICE, **paged)]

    assert names() == ["B", "_", "a", "b", "c d"]
    assert names(limit=2) == ["B", "_"]
    assert names(limit=2, marker="_") == ["a", "b"]
    assert names(marker="b") == ["c d"]
    assert names(marker="c d") == []
    with pytest.raises(InvalidInput) as unknown:
        names(marker="zz")
    assert [e.field for e in unknown.value.errors] == ["marker"]
    for bad in ({"limit": 0}, {"limit": "2"}, {"marker": " a"}):
        with pytest.raises(InvalidInput):
            names(**bad)


def test_an_admin_reaches_another_users_key_pairs(keys: KeyPairsEndpoint) -> None:
    made = keys.create_keypair(ADMIN_CTXT, name="for-alice", public_key=ED25519, user_id="alice")
    assert made["user_id"] == "alice"
    assert [k["name"] for k in keys.list_keypairs(ALICE)] == ["for-alice"]
    assert keys.list_keypairs(ADMIN_CTXT) == []  # the admin's own: none
    for admin in (ADMIN_CTXT, OPERATOR):
        assert [k["name"] for k in keys.list_keypairs(admin, user_id="alice")] == ["for-alice"]
        assert keys.show_keypair(admin, name="for-alice", user_id="alice")["user_id"] == "alice"
    # Alice naming herself is Alice; naming another is refused, whoever it is.
    assert keys.list_keypairs(ALICE, user_id="alice") == keys.list_keypairs(ALICE)
    with pytest.raises(Forbidden):
        keys.list_keypairs(ALICE, user_id="root")
    with pytest.raises(Forbidden):
        keys.create_keypair(ALICE, name="x", public_key=ED25519, user_id="root")
    with pytest.raises(InvalidInput) as bad:
        keys.list_keypairs(ADMIN_CTXT, user_id="has space")
    [error] = bad.value.errors
    assert (error.field, error.reason.split(" (")[0]) == ("user_id", "a user id")
    keys.delete_keypair(OPERATOR, name="for-alice", user_id="alice")
    with pytest.raises(KeyPairNotFound):
        keys.show_keypair(ALICE, name="for-alice")
    # The operator naming no user has no key pairs of its own to reach.
    with pytest.raises(Forbidden):
        keys.list_keypairs(OPERATOR)


def test_the_client_sends_1_24_only_with_a_new_argument() -> None:
    sent: list[tuple[str, str, dict[str, Any]]] = []

    class Client(LabelCalls):
        def _call(self, answer: Any, method: str, version: str = "1.0", **kwargs: Any) -> Any:
            sent.append((method, version, kwargs))
            return {}

    client = Client()
    client.list_keypairs()
    client.list_keypairs(limit=5)
    client.show_keypair("k")
    client.delete_keypair("k", user_id="u")
    client.create_keypair("k", None, user_id="u")
    assert sent == [
        ("list_keypairs", "1.21", {}),
        ("list_keypairs", "1.24", {"limit": 5}),
        ("show_keypair", "1.21", {"name": "k"}),
        ("delete_keypair", "1.24", {"name": "k", "user_id": "u"}),
        ("create_keypair", "1.24", {"name": "k", "public_key": None, "user_id": "u"}),
    ]


# -- the CLI -------------------------------------------------------------------------------


class _Client:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if name == "list_keypairs":
                return [{"name": "k", "type": "ssh", "fingerprint": "aa"}]
            return {"name": "k", "public_key": ED25519}

        return record


class _App:
    def __init__(self) -> None:
        self.client = _Client()

    def conductor_client(self) -> _Client:
        return self.client


def _run(command_class: Any, *argv: str) -> _App:
    app = _App()
    command = command_class(app, argparse.Namespace())
    command.take_action(command.get_parser("ringfleet x").parse_args(list(argv)))
    return app


def test_the_keypair_commands_take_user_limit_and_marker() -> None:
    assert _run(KeypairList).client.calls == [("list_keypairs", (), {})]
    assert _run(KeypairList, "--user", "u1", "--limit", "2", "--marker", "k").client.calls == [
        ("list_keypairs", (), {"user_id": "u1", "limit": 2, "marker": "k"})
    ]
    assert _run(KeypairShow, "--user", "u1", "k").client.calls == [
        ("show_keypair", ("k",), {"user_id": "u1"})
    ]
    assert _run(KeypairDelete, "k").client.calls == [("delete_keypair", ("k",), {})]
    assert _run(KeypairCreate, "--user", "u1", "k").client.calls == [
        ("create_keypair", ("k", None), {"user_id": "u1"})
    ]
    with pytest.raises(InvalidInput) as bad:
        _run(KeypairList, "--limit", "0")
    assert [e.field for e in bad.value.errors] == ["--limit"]
