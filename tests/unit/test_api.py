# SPDX-License-Identifier: Apache-2.0
"""The HTTP API in-process: routing, errors, policy, microversions, bodies, paging.

The conductors are a fake :class:`~conductor.rpcapi.ConductorAPI` that
records the calls; ``tests/functional/test_api.py`` runs the real thing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
import webob
from oslo_config import cfg
from oslo_context import context as request_context
from oslo_policy import generator

from conductor.api import app as api_app
from conductor.api import auth, microversion, openapi, pipeline, policy, v1, wsgi
from conductor.common import exception, rpc
from conductor.common.conf import api as api_conf

REPO = Path(__file__).resolve().parents[2]
NODE = {"uuid": "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a1", "name": "n1"}


class FakeConductors:
    """Records every call; ``fail`` makes the next call raise it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.fail: BaseException | None = None
        self.request_ids: list[str | None] = []
        self.global_request_ids: list[str | None] = []
        self.instances: dict[str, dict[str, Any]] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            current = request_context.get_current()
            self.request_ids.append(current.request_id if current else None)
            self.global_request_ids.append(current.global_request_id if current else None)
            if self.fail is not None:
                failure, self.fail = self.fail, None
                raise failure
            return getattr(self, "_" + name, lambda *a, **k: {"called": name})(*args, **kwargs)

        return call

    def _list_nodes(self, filters: Any = None, limit: int = 1000, marker: Any = None) -> Any:
        return [{"uuid": f"u{i}"} for i in range(min(limit, 3))]

    def _create_node(self, node: dict[str, Any]) -> dict[str, Any]:
        return {**NODE, **node}

    def _create_flavor(self, flavor: dict[str, Any]) -> dict[str, Any]:
        return dict(flavor)

    def _build_instances(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        uuids = request.get("instance_uuids") or ["i1"]
        if any(u in self.instances for u in uuids):  # as the conductor: compare
            if all(self.instances.get(u, {}).get("flavor") == request["flavor"] for u in uuids):
                return [self.instances[u] for u in uuids]
            raise exception.DuplicateInstance(field="instance_uuids", value=uuids[0])
        for u in uuids:
            self.instances[u] = {"uuid": u, "flavor": request["flavor"], "vm_state": "building"}
        return [self.instances[u] for u in uuids]

    def _show_instance(self, instance: str) -> dict[str, Any]:
        if instance not in self.instances:
            raise exception.InstanceNotFound(instance)
        return self.instances[instance]


def make_app(
    tmp_path: Path, strategy: str = "noauth", **overrides: Any
) -> tuple[api_app.Application, FakeConductors]:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    api_conf.OPTIONS.register(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    tokens = tmp_path / "tokens"
    tokens.write_text("# comment\nadm admin,member,reader p1\nmem member,reader p1\nrd reader\n")
    conf.set_override("auth_strategy", strategy, "api")
    conf.set_override("token_file", str(tokens), "api")
    for name, value in overrides.items():
        # The body size limit is oslo.middleware's sizelimit filter's.
        group = "oslo_middleware" if name == "max_request_body_size" else "api"
        conf.set_override(name, value, group)
    fake = FakeConductors()
    return wsgi.build_application(conf, fake), fake  # type: ignore[arg-type]


def call(
    application: api_app.Application,
    method: str,
    path: str,
    body: Any = None,
    raw: bytes | None = None,
    **headers: str,
) -> webob.Response:
    request = webob.Request.blank(path, method=method)
    if raw is not None:
        request.body = raw
        request.content_type = "application/json"
    elif body is not None:
        request.json_body = body
    for name, value in headers.items():
        request.headers[name.replace("_", "-")] = value
    return request.get_response(application)


@pytest.fixture
def app(tmp_path: Path) -> tuple[api_app.Application, FakeConductors]:
    return make_app(tmp_path)


def errors(response: webob.Response) -> list[dict[str, Any]]:
    body = response.json
    assert all(e["status"] == response.status_code for e in body["errors"])
    return body["errors"]  # type: ignore[no-any-return]


# -- microversions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, "1.0"),
        ("baremetal-fleet 1.0", "1.0"),
        ("compute 2.90, baremetal-fleet 1.0", "1.0"),
        ("BAREMETAL-FLEET latest", str(microversion.MAX_VERSION)),
        ("compute 2.1", "1.0"),
    ],
)
def test_microversion_parsing(header: str | None, expected: str) -> None:
    assert str(microversion.requested(header)) == expected


@pytest.mark.parametrize(
    "header",
    [
        "baremetal-fleet",
        "baremetal-fleet 1",
        "baremetal-fleet 1.0.0",
        "baremetal-fleet 01.0",
        "baremetal-fleet x.y",
        "baremetal-fleet 1.0, baremetal-fleet 1.0",
    ],
)
def test_malformed_microversions(header: str) -> None:
    with pytest.raises(microversion.BadVersion):
        microversion.requested(header)


@pytest.mark.parametrize(
    "header", ["baremetal-fleet 0.9", "baremetal-fleet 1.99", "baremetal-fleet 2.0"]
)
def test_unsupported_microversions(header: str) -> None:
    with pytest.raises(microversion.UnsupportedVersion):
        microversion.requested(header)


def test_microversion_answers(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    ok = call(application, "GET", "/v1/flavors", OpenStack_API_Version="baremetal-fleet 1.0")
    assert ok.status_code == 200
    assert ok.headers["OpenStack-API-Version"] == "baremetal-fleet 1.0"
    assert ok.headers["Vary"] == "OpenStack-API-Version"
    assert (
        call(
            application, "GET", "/v1/flavors", OpenStack_API_Version="baremetal-fleet 7.0"
        ).status_code
        == 406
    )
    assert (
        call(
            application, "GET", "/v1/flavors", OpenStack_API_Version="baremetal-fleet one"
        ).status_code
        == 400
    )
    assert len(fake.calls) == 1


# -- routing and error mapping ----------------------------------------------------


def test_routes_and_methods(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    assert call(application, "GET", "/v1/nodes/n1").status_code == 200
    assert fake.calls[-1] == ("show_node", ("n1",), {})
    assert call(application, "GET", "/v1/fleet/ring").status_code == 200
    assert fake.calls[-1][0] == "ring_status"
    missing = call(application, "GET", "/v1/nodez")
    assert missing.status_code == 404 and errors(missing)[0]["code"] == "ringfleet.not_found"
    wrong = call(application, "DELETE", "/v1/nodes")
    assert wrong.status_code == 405 and wrong.headers["Allow"] == "GET, POST, HEAD"
    assert len(fake.calls) == 2
    # HEAD is a GET without the body; one trailing slash is ignored.
    head = call(application, "HEAD", "/v1/nodes/n1")
    assert head.status_code == 200 and head.body == b""
    assert int(head.headers["Content-Length"]) > 0  # the GET's length
    assert fake.calls[-1] == ("show_node", ("n1",), {})
    assert call(application, "GET", "/v1/nodes/n1/").status_code == 200
    assert call(application, "GET", "/v1/nodes/").json == call(application, "GET", "/v1/nodes").json
    missing_head = call(application, "HEAD", "/v1/instances/x")
    assert missing_head.status_code == 404 and missing_head.body == b""
    refused = call(application, "HEAD", "/v1/nodes/n1/move")
    assert refused.status_code == 405 and refused.headers["Allow"] == "POST"


@pytest.mark.parametrize(
    ("failure", "status", "field"),
    [
        (exception.InvalidInput([exception.FieldError("name", "must be text", "1")]), 400, "name"),
        (exception.NodeNotFound("n9"), 404, None),
        (exception.DuplicateNode(field="name", value="n1"), 409, "name"),
        (exception.ConfigurationError("ironic", "auth_type", "unset"), 409, "[ironic] auth_type"),
        (exception.ServiceUnavailable(reason="membership is lost"), 503, None),
        (exception.DatabaseUnavailable(), 503, None),
        (messaging.MessagingTimeout("slow"), 503, None),
        (messaging.RemoteError("UnsupportedVersion", "too new"), 503, None),
    ],
)
def test_conductor_errors_map_to_statuses(
    app: tuple[api_app.Application, FakeConductors],
    failure: BaseException,
    status: int,
    field: str | None,
) -> None:
    application, fake = app
    fake.fail = failure
    response = call(application, "POST", "/v1/nodes", {"name": "n1", "resource_class": "x"})
    assert response.status_code == status
    error = errors(response)[0]
    assert error["request_id"] == response.headers["x-openstack-request-id"]
    assert error.get("field") == field
    if status == 503:
        assert "Retry-After" in response.headers or "UnsupportedVersion" in repr(failure)


def test_every_invalid_field_is_listed(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    fake.fail = exception.InvalidInput(
        [exception.FieldError("name", "required"), exception.FieldError("traits[1]", "bad", "x")]
    )
    response = call(application, "POST", "/v1/nodes", {})
    assert [(e["field"], e["reason"]) for e in errors(response)] == [
        ("name", "required"),
        ("traits[1]", "bad"),
    ]


def test_an_unexpected_error_is_a_logged_500(
    app: tuple[api_app.Application, FakeConductors], caplog: pytest.LogCaptureFixture
) -> None:
    application, fake = app
    fake.fail = RuntimeError("boom")
    response = call(application, "GET", "/v1/flavors")
    assert response.status_code == 500
    assert "boom" not in response.text
    assert "Unexpected error serving GET /v1/flavors" in caplog.text


# -- bodies and queries --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{nope", "body"),
        (b"[1]", "body"),
        (b"", "body"),
        (b"NaN", "body"),
        (b"[" * 50000 + b"]" * 50000, "body"),
        (b'{"maintenance": true, "x": 1}', "x"),
        (b'{"reason": "r"}', "maintenance"),
        (b'{"maintenance": "yes"}', "maintenance"),
    ],
)
def test_bad_bodies_name_the_field_and_call_nothing(
    app: tuple[api_app.Application, FakeConductors], raw: bytes, field: str
) -> None:
    application, fake = app
    response = call(application, "PUT", "/v1/nodes/n1/maintenance", raw=raw)
    assert response.status_code == 400, response.text
    assert errors(response)[0]["field"] == field
    assert fake.calls == []


@pytest.mark.parametrize(
    ("method", "path", "body", "field", "reason"),
    [
        ("POST", "/v1/nodes/import", {"nodes": [], "dry_run": "yes"}, "dry_run", "true or false"),
        ("POST", "/v1/nodes/import", {"nodes": [], "dry_run": None}, "dry_run", "true or false"),
        ("PUT", "/v1/nodes/n1/maintenance", {"maintenance": 1}, "maintenance", "true or false"),
        (
            "PUT",
            "/v1/nodes/n1/maintenance",
            {"maintenance": True, "reason": 3},
            "reason",
            "or null",
        ),
        ("POST", "/v1/nodes/n1/move", {"host": ["a"]}, "host", "must be a string"),
        ("POST", "/v1/nodes/n1/move", {"host": None}, "host", "must be a string"),
    ],
)
def test_an_envelope_of_the_wrong_types_calls_nothing(
    app: tuple[api_app.Application, FakeConductors],
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
    reason: str,
) -> None:
    """The API's own bodies (Route.envelope) are checked before any call."""
    application, fake = app
    response = call(application, method, path, body)
    assert response.status_code == 400, response.text
    assert errors(response)[0]["field"] == field
    assert reason in errors(response)[0]["reason"]
    assert fake.calls == []


def test_a_good_envelope_is_passed_on(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    call(application, "PUT", "/v1/nodes/n1/maintenance", {"maintenance": True, "reason": None})
    call(application, "POST", "/v1/nodes/n1/move", {"host": "agent-1"})
    assert [name for name, _, _ in fake.calls] == ["set_node_maintenance", "move_node"]


def test_too_large_and_wrong_media_type(tmp_path: Path) -> None:
    application, fake = make_app(tmp_path, max_request_body_size=2048)
    big = call(application, "POST", "/v1/nodes", raw=b'{"name": "' + b"x" * 3000 + b'"}')
    assert big.status_code == 413
    request = webob.Request.blank("/v1/nodes", method="POST", body=b"{}")
    request.content_type = "text/plain"
    assert request.get_response(application).status_code == 415
    assert call(application, "GET", "/v1/flavors", raw=b"{}").status_code == 400
    assert fake.calls == []


def test_query_parameters(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    response = call(application, "GET", "/v1/nodes?maintenance=false&group=g&limit=3")
    assert response.status_code == 200
    assert fake.calls[-1] == (
        "list_nodes",
        (),
        {"filters": {"group": "g", "maintenance": False}, "limit": 3, "marker": None},
    )
    # A full page links the next one, with the same filters and the last uuid.
    assert response.json["next"] == (
        "http://localhost/v1/nodes?group=g&maintenance=false&limit=3&marker=u2"
    )
    # A short page has no next link; limit is capped to [api] max_limit.
    short = call(application, "GET", "/v1/nodes?limit=5000")
    assert "next" not in short.json and fake.calls[-1][2]["limit"] == 1000
    for query, field in [
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("pinned=maybe", "pinned"),
        ("colour=red", "colour"),
        ("group=a&group=b", "group"),
    ]:
        bad = call(application, "GET", f"/v1/nodes?{query}")
        assert bad.status_code == 400 and errors(bad)[0]["field"] == field, query
    assert len(fake.calls) == 2


def test_creation_answers_location(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, _fake = app
    node = call(application, "POST", "/v1/nodes", {"name": "n1", "resource_class": "x"})
    assert node.status_code == 201
    assert node.headers["Location"] == f"http://localhost/v1/nodes/{NODE['uuid']}"
    flavor = call(application, "POST", "/v1/flavors", {"name": "a b", "resource_class": "x"})
    assert flavor.headers["Location"] == "http://localhost/v1/flavors/a%20b"


def test_public_endpoint_is_used_in_links(tmp_path: Path) -> None:
    application, _ = make_app(tmp_path, public_endpoint="https://fleet.example.com/")
    response = call(application, "GET", "/v1/nodes?limit=3")
    assert response.json["next"].startswith("https://fleet.example.com/v1/nodes?")


def test_a_retried_build_is_the_conductors_answer(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, _fake = app
    request = {"flavor": "small", "count": 1, "instance_uuids": ["i-1"]}
    first = call(application, "POST", "/v1/instances", request)
    assert first.status_code == 202 and first.headers["Location"].endswith("/v1/instances/i-1")
    again = call(application, "POST", "/v1/instances", request)
    assert again.status_code == 202 and again.json["instances"][0]["uuid"] == "i-1"
    # Another flavor with the same uuid is a real conflict.
    clash = call(application, "POST", "/v1/instances", {**request, "flavor": "big"})
    assert clash.status_code == 409


# -- authentication and policy -------------------------------------------------------


def test_tokens_and_policy(tmp_path: Path) -> None:
    application, fake = make_app(tmp_path, "token")
    body = {"name": "n1", "resource_class": "x"}
    assert call(application, "GET", "/v1/nodes").status_code == 401
    assert call(application, "GET", "/v1/nodes", X_Auth_Token="bogus").status_code == 401
    # The node inventory is the operator's (as Nova's hypervisors).
    assert call(application, "GET", "/v1/nodes", X_Auth_Token="rd").status_code == 403
    assert call(application, "GET", "/v1/nodes/n1", X_Auth_Token="mem").status_code == 403
    assert call(application, "GET", "/v1/nodes", X_Auth_Token="adm").status_code == 200
    assert call(application, "POST", "/v1/nodes", body, X_Auth_Token="rd").status_code == 403
    assert call(application, "POST", "/v1/nodes", body, X_Auth_Token="mem").status_code == 403
    assert call(application, "POST", "/v1/nodes", body, X_Auth_Token="adm").status_code == 201
    build = {"flavor": "f"}
    assert call(application, "POST", "/v1/instances", build, X_Auth_Token="rd").status_code == 403
    assert call(application, "POST", "/v1/instances", build, X_Auth_Token="mem").status_code == 202
    move = {"host": "a"}
    assert (
        call(application, "POST", "/v1/nodes/n/move", move, X_Auth_Token="mem").status_code == 403
    )
    assert call(application, "POST", "/v1/agents/a/drain", X_Auth_Token="mem").status_code == 403
    assert call(application, "POST", "/v1/nodes/sync", X_Auth_Token="mem").status_code == 403
    assert call(application, "POST", "/v1/nodes/sync", X_Auth_Token="adm").status_code == 200
    # Discovery is public.
    assert call(application, "GET", "/").status_code == 200
    assert [c[0] for c in fake.calls] == [
        "list_nodes",
        "create_node",
        "build_instances",
        "sync_ironic_nodes",
    ]


def _behind_keystone_auth(tmp_path: Path) -> tuple[Any, FakeConductors]:
    """The application behind conductor.api.auth under auth_strategy =
    keystone, without keystonemiddleware: the requests say what it would
    have found (its X-Identity-Status headers, or the outage mark)."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    api_conf.OPTIONS.register(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("auth_strategy", "keystone", "api")
    fake = FakeConductors()
    with pipeline.loading(pipeline.Parts(conf, fake)):  # type: ignore[arg-type]
        application = pipeline.app_factory({})
    return auth.Authenticate(application, conf), fake


def test_keystone_headers_are_read(tmp_path: Path) -> None:
    application, _ = _behind_keystone_auth(tmp_path)
    confirmed = {"X_Identity_Status": "Confirmed", "X_Roles": "reader", "X_Project_Id": "p"}
    assert call(application, "GET", "/v1/flavors", **confirmed).status_code == 200
    assert call(application, "POST", "/v1/flavors", {}, **confirmed).status_code == 403
    invalid = {**confirmed, "X_Identity_Status": "Invalid"}
    assert call(application, "GET", "/v1/nodes", **invalid).status_code == 401


def test_a_token_keystone_could_not_check_is_503(tmp_path: Path) -> None:
    """Marked by conductor.api.auth_token when Keystone is unreachable: not
    the client's fault, so no 401; the conductors are not called."""
    application, fake = _behind_keystone_auth(tmp_path)
    request = webob.Request.blank("/v1/nodes")
    request.environ[auth.KEYSTONE_UNAVAILABLE] = True
    response = request.get_response(application)
    assert response.status_code == 503
    assert errors(response)[0]["code"] == "ringfleet.keystone_unavailable"
    assert response.headers["Retry-After"] == "5"
    assert fake.calls == []


def test_a_bad_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("only-a-token\n")
    with pytest.raises(ValueError, match=":1:"):
        auth.load_tokens(str(path))


def test_every_route_has_a_registered_rule_and_every_rule_is_used() -> None:
    rules = {r.name: r for r in policy.list_rules()}
    used = {route.rule for route in v1.ROUTES}
    # Checked by the application and a handler rather than by a route's own rule.
    checked_inside = {
        policy.CONTEXT_IS_ADMIN,
        v1.ALL_PROJECTS_RULE,
        v1.HOST_RULE,
        v1.LIMITS_OTHER_RULE,
        v1.KEYPAIR_OTHER_USER_RULE,
    }
    assert used | checked_inside == set(rules)
    # The operator's rules take a system-scoped token too; the rest are project-scoped.
    assert policy.SYSTEM_RULES.issubset(rules)
    for rule in rules.values():
        expected = ["system", "project"] if rule.name in policy.SYSTEM_RULES else ["project"]
        assert rule.scope_types == expected, rule.name
    for route in v1.ROUTES:
        ops = {(o["method"], o["path"]) for o in rules[str(route.rule)].operations}
        assert (route.method, route.path) in ops, route.path
    admin_only = {
        "ringfleet:node:create",
        "ringfleet:node:update",
        "ringfleet:node:move",
        "ringfleet:agent:drain",
        "ringfleet:flavor:create",
        "ringfleet:flavor:delete",
        "ringfleet:quota:list",
        "ringfleet:fleet:check",
        "ringfleet:quota:update",
        "ringfleet:instance:list:all_projects",
        policy.CONTEXT_IS_ADMIN,
        "ringfleet:node:power",
        "ringfleet:node:delete",
        "ringfleet:node:list",
        "ringfleet:node:get",
        v1.HOST_RULE,
        v1.LIMITS_OTHER_RULE,
    }
    for name in admin_only:
        assert rules[name].check_str == policy.ADMIN
    # Whoever may delete an instance may reboot, stop and start it.
    assert rules["ringfleet:instance:action"].check_str == "rule:ringfleet:instance:delete"


# -- power and lifecycle verbs (1.3) ------------------------------------------------------

V13 = {"OpenStack_API_Version": "baremetal-fleet 1.3"}
INSTANCE = "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a2"


@pytest.mark.parametrize(
    ("body", "method", "kwargs"),
    [
        ({"reboot": {"type": "SOFT"}}, "reboot_instance", {"hard": False}),
        ({"reboot": {"type": "HARD"}}, "reboot_instance", {"hard": True}),
        ({"reboot": {"type": "hard"}}, "reboot_instance", {"hard": True}),
        ({"os-stop": None}, "stop_instance", {}),
        ({"os-start": None}, "start_instance", {}),
        ({"rebuild": {}}, "rebuild_instance", {}),
    ],
)
def test_instance_actions_nova_style(
    app: tuple[api_app.Application, FakeConductors],
    body: dict[str, Any],
    method: str,
    kwargs: dict[str, Any],
) -> None:
    application, fake = app
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V13)
    assert response.status_code == 202
    assert fake.calls == [(method, (INSTANCE,), kwargs)]


@pytest.mark.parametrize(
    ("body", "field_name"),
    [
        ({}, "body"),
        ({"os-stop": None, "os-start": None}, "body"),
        ({"reboot": {"type": "WARM"}}, "reboot.type"),
        ({"reboot": {}}, "reboot"),
        ({"reboot": None}, "reboot"),
        ({"os-stop": {"now": True}}, "os-stop"),
        ({"resize": {"flavor": "x"}}, "resize"),
        ({"rebuild": {"imageRef": "x"}}, "rebuild.imageRef"),
        ({"rebuild": {"image": {"source": "http://i/x"}}}, "rebuild.image"),
        ({"rebuild": None}, "rebuild"),
    ],
)
def test_a_bad_instance_action_names_the_field_and_calls_nothing(
    app: tuple[api_app.Application, FakeConductors], body: dict[str, Any], field_name: str
) -> None:
    application, fake = app
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V13)
    assert response.status_code == 400, response.json
    assert errors(response)[0]["field"] == field_name
    assert fake.calls == []


V14 = {"OpenStack_API_Version": "baremetal-fleet 1.4"}
NEW_IMAGE = {"source": "http://images.example/new.raw", "checksum": "a" * 32}


def test_a_rebuild_at_1_4_passes_the_new_image_and_config_drive(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    body = {
        "rebuild": {
            "image": NEW_IMAGE,
            "user_data": "#cloud-config",
            "meta_data": {"meta": {"a": "b"}},
            "network_data": None,  # null: keep the stored one
        }
    }
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V14)
    assert response.status_code == 202, response.json
    assert fake.calls == [
        (
            "rebuild_instance",
            (INSTANCE,),
            {"image": NEW_IMAGE, "user_data": "#cloud-config", "meta_data": {"meta": {"a": "b"}}},
        )
    ]


def test_a_rebuild_field_under_1_4_is_refused_naming_it(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    body = {"rebuild": {"user_data": "secret-value"}}
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V13)
    assert response.status_code == 400
    [error] = errors(response)
    assert error["field"] == "rebuild.user_data" and "1.4" in error["reason"]
    assert "secret-value" not in response.text
    assert fake.calls == []


def test_novas_image_ref_is_refused_pointing_at_image(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    body = {"rebuild": {"imageRef": "70a599e0"}}
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V14)
    assert response.status_code == 400
    [error] = errors(response)
    assert error["field"] == "rebuild.imageRef" and "use image" in error["reason"]
    assert fake.calls == []


def test_the_conductors_refusal_of_a_rebuild_image_names_the_field(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    fake.fail = exception.InvalidInput(
        [exception.FieldError("image.os_hash_value", "must be the hex digest of sha256")]
    )
    body = {"rebuild": {"image": {**NEW_IMAGE, "os_hash_algo": "sha256", "os_hash_value": "z"}}}
    response = call(application, "POST", f"/v1/instances/{INSTANCE}/action", body, **V14)
    assert response.status_code == 400
    assert errors(response)[0]["field"] == "image.os_hash_value"


def test_the_verbs_need_microversion_1_3(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    action = call(application, "POST", f"/v1/instances/{INSTANCE}/action", {"os-stop": None})
    assert action.status_code == 404 and "1.3" in errors(action)[0]["detail"]
    power = {"target": "power on"}
    assert call(application, "PUT", "/v1/nodes/n1/states/power", power).status_code == 404
    assert call(application, "DELETE", "/v1/nodes/n1").status_code == 404
    assert fake.calls == []


def test_a_state_conflict_is_a_409_naming_the_state(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    fake.fail = exception.InstanceStateConflict(
        field="vm_state", value="stopped", reason="instance is in state stopped, cannot reboot"
    )
    response = call(
        application, "POST", f"/v1/instances/{INSTANCE}/action", {"reboot": {"type": "SOFT"}}, **V13
    )
    assert response.status_code == 409
    assert "instance is in state stopped, cannot reboot" in errors(response)[0]["detail"]


def test_node_power_and_delete(app: tuple[api_app.Application, FakeConductors]) -> None:
    application, fake = app
    power = call(application, "PUT", "/v1/nodes/n1/states/power", {"target": "rebooting"}, **V13)
    assert power.status_code == 202
    # The target's type is the API's to check, its value the conductor's.
    bad = call(application, "PUT", "/v1/nodes/n1/states/power", {"target": 1}, **V13)
    assert bad.status_code == 400 and errors(bad)[0]["field"] == "target"
    missing = call(application, "PUT", "/v1/nodes/n1/states/power", {}, **V13)
    assert missing.status_code == 400
    assert call(application, "DELETE", "/v1/nodes/n1", **V13).status_code == 204
    assert [(c[0], c[1]) for c in fake.calls] == [
        ("set_node_power_state", ("n1", "rebooting")),
        ("delete_node", ("n1",)),
    ]


def test_node_verbs_are_admin_and_instance_actions_member(tmp_path: Path) -> None:
    application, fake = make_app(tmp_path, "token")
    power = {"target": "power off"}
    for token, expected in (("mem", 403), ("adm", 202)):
        response = call(
            application, "PUT", "/v1/nodes/n/states/power", power, X_Auth_Token=token, **V13
        )
        assert response.status_code == expected
    assert call(application, "DELETE", "/v1/nodes/n", X_Auth_Token="mem", **V13).status_code == 403
    stop = {"os-stop": None}
    path = f"/v1/instances/{INSTANCE}/action"
    assert call(application, "POST", path, stop, X_Auth_Token="rd", **V13).status_code == 403
    assert call(application, "POST", path, stop, X_Auth_Token="mem", **V13).status_code == 202
    assert [c[0] for c in fake.calls] == ["set_node_power_state", "stop_instance"]


# -- request ids -----------------------------------------------------------------------


def test_the_request_id_is_the_rpc_calls_id(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    response = call(application, "GET", "/v1/nodes/n1")
    request_id = response.headers["x-openstack-request-id"]
    assert request_id.startswith("req-") and fake.request_ids == [request_id]
    # rpc.call sends the thread's current request id (the HTTP request's).
    sent: list[dict[str, Any]] = []

    class Client:
        def call(self, ctxt: dict[str, Any], method: str, **kwargs: Any) -> None:
            sent.append(ctxt)

    request_context.RequestContext(request_id="req-abc", overwrite=True)
    try:
        rpc.call(Client(), "show_node", None, node="x")
    finally:
        vars(request_context._request_store).pop("context", None)
    rpc.call(Client(), "show_node", None, node="x")
    assert sent[0] == {"request_id": "req-abc"}
    assert sent[1]["request_id"].startswith("req-") and sent[1]["request_id"] != "req-abc"
    # The id does not leak to the thread after the request.
    assert request_context.get_current() is None


def test_a_global_request_id_from_another_service_is_carried_to_the_conductors(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    origin = "req-8c0f8a3e-63c4-4a0e-9d0c-1f2e3d4c5b6a"
    response = call(application, "GET", "/v1/nodes/n1", x_openstack_request_id=origin)
    assert response.status_code == 200
    # Ours is answered; theirs is the global id of the conductor call.
    assert response.headers["x-openstack-request-id"] != origin
    assert fake.global_request_ids == [origin]
    assert fake.request_ids == [response.headers["x-openstack-request-id"]]
    # Anything but req-<uuid> is ignored, never logged.
    for junk in ("req-1", "hello", origin.upper(), origin + "\n" + origin, "x" * 5000):
        assert (
            call(application, "GET", "/v1/nodes/n1", x_openstack_request_id=junk).status_code == 200
        )
    assert fake.global_request_ids[1:] == [None] * 5
    # rpc.call passes it on, only when there is one.
    sent: list[dict[str, Any]] = []

    class Client:
        def call(self, ctxt: dict[str, Any], method: str, **kwargs: Any) -> None:
            sent.append(ctxt)

    request_context.RequestContext(request_id="req-abc", global_request_id=origin, overwrite=True)
    try:
        rpc.call(Client(), "show_node", None, node="x")
    finally:
        vars(request_context._request_store).pop("context", None)
    assert sent == [{"request_id": "req-abc", "global_request_id": origin}]


# -- the OpenAPI document ----------------------------------------------------------------


def test_the_checked_in_openapi_document_is_up_to_date() -> None:
    """Regenerate with: python -m conductor.api.openapi > docs/openapi.json"""
    assert (REPO / "docs/openapi.json").read_text() == openapi.render(v1.ROUTES)


def test_the_openapi_document_covers_every_route_and_schema() -> None:
    doc = openapi.document(v1.ROUTES)
    for route in v1.ROUTES:
        op = doc["paths"][route.path][route.method.lower()]
        assert str(route.status) in op["responses"]
        assert op["x-policy-rule"] == route.rule
    text = json.dumps(doc)
    for name in openapi.SCHEMAS:
        assert f"#/components/schemas/{name}" in text or name == "Versions"


def test_every_route_is_in_the_http_reference() -> None:
    reference = (REPO / "docs/http-api.rst").read_text()
    for route in v1.ROUTES:
        assert f"{route.method} {route.path}" in reference, route.path


def test_keystone_mode_wraps_the_api_in_auth_token(tmp_path: Path) -> None:
    """keystonemiddleware in front of everything but the public documents: a
    request without a token is refused without asking Keystone."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    api_conf.OPTIONS.register(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("auth_strategy", "keystone", "api")
    fake = FakeConductors()
    wsgi.build_application(conf, fake)  # type: ignore[arg-type]  # registers [keystone_authtoken]
    conf.set_override("www_authenticate_uri", "http://keystone.invalid/", "keystone_authtoken")
    application = wsgi.build_application(conf, fake)  # type: ignore[arg-type]
    refused = call(application, "GET", "/v1/nodes")
    assert refused.status_code == 401
    assert errors(refused)[0]["code"] == "ringfleet.unauthorized"
    # One challenge, the middleware's, naming where to get a token.
    assert refused.headers.getall("WWW-Authenticate") == ['Keystone uri="http://keystone.invalid/"']
    assert call(application, "GET", "/").status_code == 200
    assert call(application, "GET", "/v1/openapi.json").status_code == 200
    assert fake.calls == []


def test_a_policy_file_overrides_the_defaults(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"ringfleet:flavor:list": "role:admin"\n')
    conf = cfg.ConfigOpts()
    conf([], project="ringfleet-test", default_config_files=[])
    policy.Enforcer(conf)  # registers [oslo_policy]
    conf.set_override("policy_file", str(policy_file), "oslo_policy")
    enforcer = policy.Enforcer(conf)
    reader = {"roles": ["reader"], "project_id": None, "user_id": "u"}
    assert not enforcer.allowed("ringfleet:flavor:list", reader)
    assert enforcer.allowed("ringfleet:fleet:get", reader)
    assert not enforcer.allowed("ringfleet:node:list", reader)
    assert enforcer.allowed("ringfleet:flavor:list", {**reader, "roles": ["admin"]})
    # An edited file applies once the cache expires.
    policy_file.write_text('"ringfleet:node:list": "role:reader"\n')
    enforcer._expires = 0.0
    os.utime(policy_file, (time.time() + 5, time.time() + 5))
    assert enforcer.allowed("ringfleet:node:list", reader)
    assert enforcer.allowed("ringfleet:flavor:list", reader)
    with pytest.raises(KeyError):
        enforcer.allowed("ringfleet:no:such", reader)


def test_the_policy_defaults_are_found_by_oslopolicy_tools() -> None:
    """``oslopolicy-sample-generator --namespace ringfleet.api`` lists them."""
    found = generator.get_policies_dict(["ringfleet.api"])["ringfleet.api"]
    assert {rule.name for rule in found} == set(policy.RULE_NAMES)


def test_the_development_server_serves_the_api(tmp_path: Path) -> None:
    """``ringfleet-api`` (the console script's main) on 127.0.0.1, stopped by its PID."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path / "api.log"
    config = tmp_path / "api.conf"
    config.write_text(
        f"[DEFAULT]\nlog_file = {log}\ntransport_url = rabbit://u:p@127.0.0.1:1/\n"
        f"[api]\nauth_strategy = noauth\nhost_ip = 127.0.0.1\nport = {port}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "conductor.cmd.api", "--config-file", str(config)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while "serving http://127.0.0.1" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            body = json.loads(response.read())
            assert response.headers["x-openstack-request-id"].startswith("req-")
        assert body["versions"][0]["links"][0]["href"] == f"http://127.0.0.1:{port}/v1/"
    finally:
        proc.terminate()
        proc.wait(10)


# -- never a 500 for bad input (issue 28) -------------------------------------------


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/instances/%c0%ae", "path"),
        ("/v1/nodes/%ed%a0%80", "path"),  # an encoded surrogate is no UTF-8
        ("/v1/nodes?marker=%ff", "query"),
        ("/v1/nodes?%ff=1", "query"),
        ("/v1/nodes?marker=%00", "marker"),
        ("/v1/nodes/a%00b", "node"),
    ],
)
def test_undecodable_paths_and_queries_are_400_naming_the_part(
    tmp_path: Path, path: str, field: str
) -> None:
    application, fake = make_app(tmp_path, "token")
    response = call(application, "GET", path, X_Auth_Token="adm")
    assert response.status_code == 400, response.text
    assert errors(response)[0]["field"] == field
    assert fake.calls == []


@pytest.mark.parametrize(
    ("method", "path", "raw", "field"),
    [
        (
            "PUT",
            "/v1/nodes/n1/maintenance",
            b'{"maintenance": true, "reason": "\\ud800"}',
            "reason",
        ),
        (
            "POST",
            "/v1/nodes",
            b'{"name": "n", "maintenance_reason": "a\\udfff"}',
            "maintenance_reason",
        ),
        ("POST", "/v1/instances", b'{"flavor": "f", "name": "vm\\ud800"}', "name"),
        ("POST", "/v1/nodes", b'{"name": "n", "properties": {"k": "\\udc00"}}', "properties.k"),
        ("POST", "/v1/flavors", b'{"name": "f", "extra_specs": {"\\ud800": "v"}}', "extra_specs"),
    ],
)
def test_lone_surrogates_in_a_body_are_400_naming_the_field(
    app: tuple[api_app.Application, FakeConductors],
    method: str,
    path: str,
    raw: bytes,
    field: str,
) -> None:
    application, fake = app
    response = call(application, method, path, raw=raw)
    assert response.status_code == 400, response.text
    assert errors(response)[0]["field"] == field
    assert "lone surrogates" in errors(response)[0]["reason"]
    assert fake.calls == []


class _BrokenChunks:
    """A request body whose transfer encoding breaks while read, as
    gunicorn's reader raises for a malformed chunk."""

    def read(self, size: int = -1) -> bytes:
        raise ValueError("Invalid chunk size: 'zz'")


def test_a_body_that_cannot_be_read_is_400_naming_the_body(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    request = webob.Request.blank("/v1/nodes", method="POST")
    request.environ["wsgi.input"] = _BrokenChunks()
    request.environ["wsgi.input_terminated"] = True  # as gunicorn says of chunked bodies
    request.headers["Transfer-Encoding"] = "chunked"
    request.content_type = "application/json"
    request.environ.pop("CONTENT_LENGTH", None)
    response = request.get_response(application)
    assert response.status_code == 400, response.text
    assert errors(response)[0]["field"] == "body"
    assert "Invalid chunk size" in errors(response)[0]["reason"]
    assert fake.calls == []


def test_authentication_comes_before_routing_and_validation(tmp_path: Path) -> None:
    """No token: 401 whatever the path, method or body (no 404, 405 or 400)."""
    application, fake = make_app(tmp_path, "token")
    for method, path, raw in [
        ("GET", "/no/such/path", None),
        ("DELETE", "/v1/nodes", None),
        ("POST", "/v1/nodes", b"not json"),
        ("GET", "/v1/instances/%c0%ae", None),
        ("GET", "/v1/nodes?colour=red", None),
    ]:
        response = call(application, method, path, raw=raw)
        assert response.status_code == 401, (method, path, response.status_code)
        assert errors(response)[0]["code"] == "ringfleet.unauthorized"
        assert response.headers["WWW-Authenticate"] == "X-Auth-Token"
    assert fake.calls == []


def test_a_body_over_the_size_limit_is_a_json_413(tmp_path: Path) -> None:
    """oslo.middleware's sizelimit refuses it; the error is the API's JSON,
    with the request id."""
    application, fake = make_app(tmp_path, max_request_body_size=2048)
    response = call(application, "POST", "/v1/nodes", raw=b'{"name": "' + b"x" * 3000 + b'"}')
    assert response.status_code == 413
    [error] = errors(response)
    assert error["code"] == "ringfleet.too_large"
    assert error["request_id"] == response.headers["x-openstack-request-id"]
    assert fake.calls == []


def test_the_health_checks(tmp_path: Path) -> None:
    """/healthcheck for load balancers: no token, no conductor call;
    /healthcheck/detailed for admins: the conductors' RPC path too."""
    application, fake = make_app(tmp_path, "token")
    probe = call(application, "GET", "/healthcheck")
    assert probe.status_code == 200 and fake.calls == []
    assert call(application, "HEAD", "/healthcheck").status_code == 204
    assert call(application, "GET", "/healthcheck/detailed").status_code == 401
    assert call(application, "GET", "/healthcheck/detailed", X_Auth_Token="rd").status_code == 403
    detailed = call(
        application, "GET", "/healthcheck/detailed", X_Auth_Token="adm", Accept="application/json"
    )
    assert detailed.status_code == 200
    [reason] = [r for r in detailed.json["reasons"] if r["class"] == "HealthcheckResult"]
    assert reason["reason"] == "conductors answer over RPC"
    assert [name for name, _, _ in fake.calls] == ["fleet_status"]
    fake.fail = messaging.MessagingTimeout("no reply")
    down = call(
        application, "GET", "/healthcheck/detailed", X_Auth_Token="adm", Accept="application/json"
    )
    assert down.status_code == 503
    assert down.json["reasons"][0]["reason"] == "no conductor answered over RPC"


def test_the_installed_pipeline_is_the_one_in_etc() -> None:
    assert (
        wsgi.PACKAGED_PASTE_FILE.read_text() == (REPO / "etc/ringfleet/api-paste.ini").read_text()
    )


V15 = {"OpenStack_API_Version": "baremetal-fleet 1.5"}


@pytest.mark.parametrize("key", ["boot_mode", "mycompany:racks"])
def test_extra_specs_of_other_namespaces_need_1_6(
    app: tuple[api_app.Application, FakeConductors], key: str
) -> None:
    application, fake = app
    body = {
        "name": "f",
        "resource_class": "gold",
        "extra_specs": {"capabilities:boot_mode": "uefi", "trait:HW_A": "required", key: "r1"},
    }
    response = call(application, "POST", "/v1/flavors", body, **V14)
    assert response.status_code == 400
    [error] = errors(response)
    assert error["field"] == f"extra_specs.{key}" and "microversion 1.5" in error["reason"]
    assert fake.calls == []
    response = call(application, "POST", "/v1/flavors", body, **V15)
    assert response.status_code == 201, response.json
    assert fake.calls == [("create_flavor", (body,), {})]
    # Capabilities and traits alone are flavors at every version.
    del body["extra_specs"][key]
    assert call(application, "POST", "/v1/flavors", body).status_code == 201


def test_an_import_naming_every_clash_needs_1_6(
    app: tuple[api_app.Application, FakeConductors],
) -> None:
    application, fake = app
    nodes = [{"name": "n1", "resource_class": "baremetal"}]
    body = {"nodes": nodes, "every_clash": True}
    response = call(application, "POST", "/v1/nodes/import", body, **V15)
    assert response.status_code == 400
    [error] = errors(response)
    assert error["field"] == "every_clash" and "needs microversion 1.6" in error["reason"]
    assert fake.calls == []
    v16 = {"OpenStack_API_Version": "baremetal-fleet 1.6"}
    response = call(application, "POST", "/v1/nodes/import", body, **v16)
    assert response.status_code == 201, response.json
    assert fake.calls == [("import_nodes", (nodes,), {"dry_run": False, "every_clash": True})]
    bad = call(application, "POST", "/v1/nodes/import", {**body, "every_clash": None}, **v16)
    assert bad.status_code == 400 and errors(bad)[0]["field"] == "every_clash"
