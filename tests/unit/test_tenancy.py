# SPDX-License-Identifier: Apache-2.0
"""Invariant 12, tenancy: instances belong to a project, are seen and acted on
by it (and admins) only, and its quotas are never exceeded.

The conductor's endpoints on SQLite, called with RPC contexts as the API and
the CLI send them; the HTTP API in front of the real endpoints for the
policy matrix (each call's context made by ``rpc.outgoing_context``, as a
real call's).  The race across conductors is ``tests/functional/test_quota_sql.py``.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import webob
from oslo_config import cfg
from oslo_context import context as request_context

from conductor.api import app as api_app
from conductor.api import wsgi
from conductor.common import rpc
from conductor.common.conf import api as api_conf
from conductor.common.exception import (
    Forbidden,
    InstanceNotFound,
    InvalidInput,
    QuotaExceeded,
)
from conductor.common.tenancy import OPERATOR, Caller, CallerContext
from conductor.db import quotas
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel
from conductor.endpoints.fleet import FleetEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.endpoints.quotas import QuotasEndpoint
from conductor.fleet_view import FleetView
from conductor.rpcapi import ConductorAPI
from tests.dbutil import add_nodes, migrated
from tests.endpoint_stubs import RecordingQueue


def member(project: str) -> dict[str, Any]:
    return {
        "request_id": "req-t",
        "project_id": project,
        "user_id": f"u-{project}",
        "roles": ["member", "reader"],
        "is_admin": False,
    }


def reader(project: str) -> dict[str, Any]:
    return {**member(project), "roles": ["reader"]}


def admin(project: str | None = "p-admin") -> dict[str, Any]:
    return {**member(project or "x"), "project_id": project, "roles": ["admin"], "is_admin": True}


#: What the CLI in RPC mode, the agents and an older client send: no caller.
OPERATOR_CTXT: dict[str, Any] = {"request_id": "req-op"}


@dataclass
class Env:
    db: Database
    queue: RecordingQueue
    instances: InstancesEndpoint
    quotas: QuotasEndpoint
    defaults: list[quotas.Defaults]

    def build(self, ctxt: dict[str, Any], count: int = 1, flavor: str = "small") -> list[str]:
        built = self.instances.build_instances(ctxt, request={"flavor": flavor, "count": count})
        return [i["uuid"] for i in built]

    def uuids(self, ctxt: dict[str, Any], **kwargs: Any) -> set[str]:
        return {i["uuid"] for i in self.instances.list_instances(ctxt, **kwargs)}

    def stored(self) -> int:
        with self.db.transaction() as session:
            return session.query(InstanceModel).count()

    def set_state(self, uuid: str, vm_state: str) -> None:
        with self.db.transaction() as session:
            session.query(InstanceModel).filter_by(uuid=uuid).one().vm_state = vm_state


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    inventory = InventoryEndpoint(db, FleetView(db))
    for name, resource_class in (("small", "baremetal"), ("gold", "baremetal-gold")):
        inventory.create_flavor(
            OPERATOR_CTXT, flavor={"name": name, "resource_class": resource_class}
        )
    queue = RecordingQueue()
    defaults = [quotas.Defaults()]
    yield Env(
        db=db,
        queue=queue,
        instances=InstancesEndpoint(db, queue, quota=lambda: defaults[0]),
        quotas=QuotasEndpoint(db, lambda: defaults[0]),
        defaults=defaults,
    )
    db.dispose()


# -- the caller ---------------------------------------------------------------------


def test_a_call_without_a_caller_is_the_operators() -> None:
    assert Caller.from_ctxt({"request_id": "req-1"}) == OPERATOR
    assert Caller.from_ctxt(None) == OPERATOR
    assert Caller.from_ctxt(member("p1")) == Caller("p1", "u-p1", is_admin=False)
    # is_admin, when sent, is the API's policy decision: it wins over roles.
    assert not Caller.from_ctxt({**member("p1"), "roles": ["admin"], "is_admin": False}).is_admin
    assert Caller.from_ctxt({"project_id": "p1", "roles": ["admin"]}).is_admin
    # A caller that sends anything of it but no project is of no project.
    assert Caller.from_ctxt({"roles": ["member"]}) == Caller(None, None, is_admin=False)


@pytest.mark.parametrize(
    ("ctxt", "field_name"),
    [
        ({"project_id": 3}, "context.project_id"),
        ({"project_id": ""}, "context.project_id"),
        ({"user_id": "u" * 256}, "context.user_id"),
        ({"roles": "admin"}, "context.roles"),
        ({"is_admin": "yes"}, "context.is_admin"),
    ],
)
def test_a_bad_context_is_refused_naming_the_key(
    env: Env, ctxt: dict[str, Any], field_name: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        env.instances.build_instances(ctxt, request={"flavor": "small"})
    assert err.value.fields == [field_name]
    assert env.stored() == 0


def test_the_rpc_context_carries_the_caller_only_for_a_caller_context() -> None:
    CallerContext(
        request_id="req-1", project_id="p1", user_id="u1", roles=["member"], overwrite=True
    )
    try:
        sent = rpc.outgoing_context()
        assert sent == {
            "request_id": "req-1",
            "project_id": "p1",
            "user_id": "u1",
            "roles": ["member"],
            "is_admin": False,
        }
        # A caller's instance calls go at 1.12: an older conductor refuses them.
        assert ConductorAPI._scoped("1.0") == "1.12"
    finally:
        # A plain context (a conductor serving a call, the CLI): the operator's.
        request_context.RequestContext(request_id="req-2", overwrite=True)
    assert rpc.outgoing_context() == {"request_id": "req-2"}
    assert ConductorAPI._scoped("1.6") == "1.6"


# -- scoping ------------------------------------------------------------------------


def test_each_project_sees_and_deletes_its_own_instances_only(env: Env) -> None:
    [mine] = env.build(member("p1"))
    [theirs] = env.build(member("p2"))
    [legacy] = env.build(OPERATOR_CTXT)  # no project: admins' only
    shown = env.instances.show_instance(member("p1"), instance=mine)
    assert (shown["project_id"], shown["user_id"]) == ("p1", "u-p1")
    assert env.uuids(member("p1")) == env.uuids(reader("p1")) == {mine}
    assert env.uuids(member("p2")) == {theirs}
    for ctxt in (member("p1"), reader("p1")):
        for other in (theirs, legacy):
            with pytest.raises(InstanceNotFound):
                env.instances.show_instance(ctxt, instance=other)
    with pytest.raises(InstanceNotFound):
        env.instances.delete_instance(member("p1"), instance=theirs)
    # The refused delete changed nothing.
    assert env.instances.show_instance(member("p2"), instance=theirs)["vm_state"] == "building"
    assert env.queue.deleted == []
    # A token of no project owns nothing, even instances of no project.
    nobody = {"request_id": "req-n", "roles": ["member"]}
    assert env.uuids(nobody) == set()
    with pytest.raises(InstanceNotFound):
        env.instances.show_instance(nobody, instance=legacy)
    env.instances.delete_instance(member("p1"), instance=mine)
    assert env.queue.deleted == [mine]


def _deployed(env: Env, uuid: str) -> None:
    """The instance active on a node, as a finished build leaves it."""
    node = add_nodes(env.db, 1)[0]
    with env.db.transaction() as session:
        row = session.query(InstanceModel).filter_by(uuid=uuid).one()
        row.vm_state, row.task_state, row.node_uuid = "active", None, node


@pytest.mark.parametrize(
    ("verb", "kwargs"),
    [
        ("reboot_instance", {}),
        ("reboot_instance", {"hard": True}),
        ("stop_instance", {}),
        ("rebuild_instance", {}),
    ],
)
def test_another_projects_instance_cannot_be_powered_or_rebuilt(
    env: Env, verb: str, kwargs: dict[str, Any]
) -> None:
    [theirs] = env.build(member("p2"))
    _deployed(env, theirs)
    for ctxt in (member("p1"), reader("p1"), {"request_id": "req-n", "roles": ["member"]}):
        with pytest.raises(InstanceNotFound):
            getattr(env.instances, verb)(ctxt, instance=theirs, **kwargs)
    # Nothing changed, nothing was routed.
    shown = env.instances.show_instance(member("p2"), instance=theirs)
    assert (shown["vm_state"], shown["task_state"]) == ("active", None)
    assert env.queue.acted == []
    # Its own project (and an admin) may.
    getattr(env.instances, verb)(member("p2"), instance=theirs, **kwargs)
    assert env.queue.acted == [theirs]


def test_admins_see_their_project_by_default_and_every_project_on_request(env: Env) -> None:
    [a1] = env.build(member("p1"))
    [a2] = env.build(member("p2"))
    [own] = env.build(admin())
    [legacy] = env.build(OPERATOR_CTXT)
    assert env.uuids(admin()) == {own}
    assert env.uuids(admin(), all_projects=True) == {a1, a2, own, legacy}
    assert env.uuids(admin(), project_id="p2") == {a2}
    # The operator (no project) lists everything, as before tenancy.
    assert env.uuids(OPERATOR_CTXT) == {a1, a2, own, legacy}
    for uuid in (a1, legacy):
        assert env.instances.show_instance(admin(), instance=uuid)["uuid"] == uuid
    env.instances.delete_instance(admin(), instance=a2)
    assert env.queue.deleted == [a2]


@pytest.mark.parametrize("kwargs", [{"all_projects": True}, {"project_id": "p2"}])
def test_only_admins_list_other_projects(env: Env, kwargs: dict[str, Any]) -> None:
    env.build(member("p2"))
    with pytest.raises(Forbidden):
        env.instances.list_instances(member("p1"), **kwargs)


# -- quotas -------------------------------------------------------------------------


def test_a_build_over_the_instances_quota_is_refused_and_stores_nothing(env: Env) -> None:
    env.quotas.set_quota(admin(), project_id="p1", quotas={"instances": 3})
    env.build(member("p1"), count=2)
    with pytest.raises(QuotaExceeded) as err:
        env.build(member("p1"), count=2)
    assert str(err.value) == (
        "Quota exceeded for instances: Requested 2, but already used 2 of 3 instances"
    )
    assert (err.value.resource, err.value.used, err.value.limit) == ("instances", 2, 3)
    assert env.stored() == 2
    assert len(env.queue.submitted) == 1
    env.build(member("p1"))  # exactly up to the limit
    # Other projects and the operator are not limited by p1's quota.
    env.build(member("p2"), count=5)
    env.build(OPERATOR_CTXT, count=5)


def test_deleted_instances_free_their_quota_and_failed_ones_keep_it(env: Env) -> None:
    env.quotas.set_quota(admin(), project_id="p1", quotas={"instances": 2})
    first, second = env.build(member("p1"), count=2)
    env.set_state(first, "error")  # a failed build still counts, as in Nova
    env.set_state(second, "deleting")  # its node is still torn down: counts
    with pytest.raises(QuotaExceeded):
        env.build(member("p1"))
    env.set_state(second, "deleted")
    env.build(member("p1"))


def test_the_resource_class_quota_counts_nodes_of_that_class_only(env: Env) -> None:
    env.defaults[0] = quotas.Defaults(resource_class_nodes={"baremetal-gold": 2})
    env.build(member("p1"), count=2, flavor="gold")
    with pytest.raises(QuotaExceeded) as err:
        env.build(member("p1"), flavor="gold")
    assert err.value.resource == "resource_class:baremetal-gold"
    assert "already used 2 of 2 resource_class:baremetal-gold" in str(err.value)
    env.build(member("p1"), count=4, flavor="small")  # another class: unlimited
    # A project's own limit overrides the default.
    env.quotas.set_quota(admin(), project_id="p1", quotas={"resource_class:baremetal-gold": 3})
    env.build(member("p1"), flavor="gold")


def test_the_defaults_apply_and_are_read_at_each_build(env: Env) -> None:
    env.defaults[0] = quotas.Defaults(instances=1)
    env.build(member("p1"))
    with pytest.raises(QuotaExceeded):
        env.build(member("p1"))
    env.defaults[0] = quotas.Defaults(instances=-1)
    env.build(member("p1"), count=10)


def test_a_retry_of_a_stored_request_is_answered_at_the_quota(env: Env) -> None:
    env.quotas.set_quota(admin(), project_id="p1", quotas={"instances": 2})
    request = {
        "flavor": "small",
        "count": 2,
        "instance_uuids": [str(uuidlib.uuid4()) for _ in "ab"],
    }
    first = env.instances.build_instances(member("p1"), request=request)
    assert env.instances.build_instances(member("p1"), request=request) == first
    # The same ids from another project are another request.
    env.quotas.set_quota(admin(), project_id="p2", quotas={"instances": 5})
    with pytest.raises(Exception, match="instance id not available: choose another"):
        env.instances.build_instances(member("p2"), request=request)
    assert env.stored() == 2


def _refusal(http: api_app.Application, token: str, uuid: str, flavor: str) -> dict[str, Any]:
    """The 409 of a build with ``uuid``, its uuid and request id blanked."""
    body = {"flavor": flavor, "instance_uuids": [uuid]}
    refused = request(http, token, "POST", "/v1/instances", body)
    assert refused.status_code == 409, refused.text
    [error] = refused.json["errors"]
    assert error["field"] == "instance_uuids" and error["value"] == uuid
    return {
        **error,
        "detail": error["detail"].replace(uuid, "UUID"),
        "value": None,
        "request_id": None,
    }


def test_another_projects_uuid_is_refused_as_any_unusable_one(
    env: Env, http: api_app.Application
) -> None:
    """No sign of another project's instance: its uuid is refused with the
    very answer the caller gets for its own stored uuid reused, or one of a
    deleted instance, and never with what was stored."""
    theirs, own, gone = (str(uuidlib.uuid4()) for _ in range(3))
    for token, uuid in (("mem1", theirs), ("mem2", own), ("mem2", gone)):
        body = {"flavor": "small", "instance_uuids": [uuid]}
        assert request(http, token, "POST", "/v1/instances", body).status_code == 202
    env.set_state(gone, "deleted")
    # The same request as p1's, from p2: refused, not answered with p1's instance.
    answers = [
        _refusal(http, "mem2", theirs, "small"),
        _refusal(http, "mem2", own, "gold"),
        _refusal(http, "mem2", gone, "gold"),
    ]
    assert answers[0] == answers[1] == answers[2]
    assert "project" not in str(answers[0]) and "p1" not in str(answers[0])
    assert request(http, "mem2", "GET", f"/v1/instances/{theirs}").status_code == 404
    # At its quota, p2 gets the quota's answer for p1's uuid as for a new one.
    env.quotas.set_quota(admin(), project_id="p2", quotas={"instances": 1})
    for uuid in (theirs, str(uuidlib.uuid4())):
        body = {"flavor": "small", "instance_uuids": [uuid]}
        refused = request(http, "mem2", "POST", "/v1/instances", body)
        assert refused.status_code == 403, refused.text
        assert refused.json["errors"][0]["code"] == "ringfleet.quota_exceeded"
    # p2's own retry is still answered at its quota.
    retried = request(
        http, "mem2", "POST", "/v1/instances", {"flavor": "small", "instance_uuids": [own]}
    )
    assert retried.status_code == 202, retried.text


def test_show_quota_gives_limits_usage_and_defaults(env: Env) -> None:
    env.defaults[0] = quotas.Defaults(instances=10, nodes=5)
    env.build(member("p1"), count=2, flavor="gold")
    env.quotas.set_quota(admin(), project_id="p1", quotas={"resource_class:baremetal-gold": 4})
    shown = env.quotas.show_quota(member("p1"), project_id="p1")
    assert shown == {
        "project_id": "p1",
        "quotas": {
            "instances": {"limit": 10, "in_use": 2, "default": True},
            # Nova's, per user: the caller's own key pairs (none here).
            "key_pairs": {"limit": 100, "in_use": 0, "default": True},
            "resource_class:baremetal": {"limit": 5, "in_use": 0, "default": True},
            "resource_class:baremetal-gold": {"limit": 4, "in_use": 2, "default": False},
        },
    }
    assert env.quotas.list_quotas(admin()) == [
        {"project_id": "p1", "limits": {"resource_class:baremetal-gold": 4}}
    ]
    after = env.quotas.delete_quota(admin(), project_id="p1")
    assert after["quotas"]["resource_class:baremetal-gold"] == {
        "limit": 5,
        "in_use": 2,
        "default": True,
    }
    assert env.quotas.list_quotas(admin()) == []


def test_only_admins_change_quotas_and_members_show_their_own(env: Env) -> None:
    for call in (
        lambda c: env.quotas.set_quota(c, project_id="p1", quotas={"instances": 100}),
        lambda c: env.quotas.delete_quota(c, project_id="p1"),
        lambda c: env.quotas.list_quotas(c),
        lambda c: env.quotas.show_quota(c, project_id="p2"),
    ):
        with pytest.raises(Forbidden):
            call(member("p1"))
    assert env.quotas.list_quotas(admin()) == []
    env.quotas.show_quota(reader("p1"), project_id="p1")
    env.quotas.show_quota(OPERATOR_CTXT, project_id="p2")


@pytest.mark.parametrize(
    ("limits", "field_name"),
    [
        ({"instances": -2}, "quotas.instances"),
        ({"instances": 1.5}, "quotas.instances"),
        # One bad entry refuses the good ones with it.
        ({"resource_class:baremetal": 1, "cores": 4}, "quotas.cores"),
        ({"instances": 1, "resource_class:no spaces": 1}, "quotas.resource_class:no spaces"),
        ({}, "quotas"),
    ],
)
def test_a_bad_quota_is_refused_naming_the_field_and_changes_nothing(
    env: Env, limits: dict[str, Any], field_name: str
) -> None:
    env.quotas.set_quota(admin(), project_id="p1", quotas={"instances": 7})
    with pytest.raises(InvalidInput) as err:
        env.quotas.set_quota(admin(), project_id="p1", quotas=limits)
    assert field_name in err.value.fields
    assert env.quotas.list_quotas(admin()) == [{"project_id": "p1", "limits": {"instances": 7}}]


# -- the HTTP API in front of the real endpoints: the policy matrix -----------------------


class Direct:
    """The conductor API as the HTTP API calls it, served by the real endpoints
    in-process with the context a real call would carry."""

    def __init__(self, env: Env) -> None:
        self._endpoints = (env.instances, env.quotas)

    def __getattr__(self, name: str) -> Any:
        method = next(getattr(e, name) for e in self._endpoints if hasattr(e, name))

        def call(*args: Any, **kwargs: Any) -> Any:
            # ConductorAPI's positional arguments, by the endpoint's names.
            names = {
                "show_instance": ["instance"],
                "delete_instance": ["instance"],
                "show_quota": ["project_id"],
                "delete_quota": ["project_id"],
                "set_quota": ["project_id", "quotas"],
                "build_instances": ["request"],
            }.get(name, [])
            return method(rpc.outgoing_context(), **dict(zip(names, args, strict=False)), **kwargs)

        return call


@pytest.fixture
def http(env: Env, tmp_path: Path) -> api_app.Application:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    api_conf.OPTIONS.register(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "adm1 admin,member,reader p1\nmem1 member,reader p1\nrd1 reader p1\n"
        "mem2 member,reader p2\nrd2 reader p2\n"
    )
    conf.set_override("auth_strategy", "token", "api")
    conf.set_override("token_file", str(tokens), "api")
    return wsgi.build_application(conf, Direct(env))  # type: ignore[arg-type]


def request(
    application: api_app.Application, token: str, method: str, path: str, body: Any = None
) -> webob.Response:
    req = webob.Request.blank(path, method=method)
    if body is not None:
        req.json_body = body
    req.headers["X-Auth-Token"] = token
    req.headers["OpenStack-API-Version"] = "baremetal-fleet 1.2"
    return req.get_response(application)


@pytest.mark.parametrize(
    ("token", "own", "other"),
    [
        # token: (GET, DELETE) of its own project's instance, and of p2's
        ("rd1", (200, 403), (404, 403)),
        ("mem1", (200, 202), (404, 404)),
        ("adm1", (200, 202), (200, 202)),
    ],
)
def test_policy_matrix_over_http(
    env: Env,
    http: api_app.Application,
    token: str,
    own: tuple[int, int],
    other: tuple[int, int],
) -> None:
    [in_p1] = env.build(member("p1"))
    [in_p2] = env.build(member("p2"))
    for uuid, (get, delete) in ((in_p1, own), (in_p2, other)):
        shown = request(http, token, "GET", f"/v1/instances/{uuid}")
        assert shown.status_code == get, shown.text
        assert request(http, token, "DELETE", f"/v1/instances/{uuid}").status_code == delete
    listed = request(http, token, "GET", "/v1/instances").json["instances"]
    assert {i["uuid"] for i in listed} == {in_p1}
    everyone = request(http, token, "GET", "/v1/instances?all_projects=1")
    if token == "adm1":
        assert {i["uuid"] for i in everyone.json["instances"]} == {in_p1, in_p2}
        assert (
            request(http, token, "GET", "/v1/instances?project_id=p2").json["instances"][0][
                "project_id"
            ]
            == "p2"
        )
    else:
        assert everyone.status_code == 403
    # A refused call deleted nothing of p2's.
    deleted = {in_p2} if token == "adm1" else set()
    assert set(env.queue.deleted) - {in_p1} == deleted


NODE_UUID = "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a9"


def test_hosts_and_nodes_are_shown_to_admins_only(env: Env, http: api_app.Application) -> None:
    """As Nova's extended server attributes: where an instance runs is the
    fleet's business; the node inventory is the operator's."""
    built = request(http, "mem1", "POST", "/v1/instances", {"flavor": "small"})
    assert built.status_code == 202
    [instance] = built.json["instances"]
    assert not {"host", "node_uuid", "tried_nodes"} & set(instance)
    with env.db.transaction() as session:
        row = session.query(InstanceModel).filter_by(uuid=instance["uuid"]).one()
        row.host, row.node_uuid = "agent-7", NODE_UUID
    path = f"/v1/instances/{instance['uuid']}"
    for token in ("rd1", "mem1"):
        shown = request(http, token, "GET", path).json
        assert shown["uuid"] == instance["uuid"]
        assert not {"host", "node_uuid", "tried_nodes"} & set(shown), token
        [listed] = request(http, token, "GET", "/v1/instances").json["instances"]
        assert "host" not in listed and "node_uuid" not in listed
        by_host = request(http, token, "GET", "/v1/instances?host=agent-7")
        assert by_host.status_code == 403
        [error] = by_host.json["errors"]
        assert error["field"] == "host"
        assert "ringfleet:instance:show:host" in error["detail"]
        assert request(http, token, "GET", "/v1/nodes").status_code == 403
    shown = request(http, "adm1", "GET", path).json
    assert (shown["host"], shown["node_uuid"]) == ("agent-7", NODE_UUID)
    assert shown["tried_nodes"] == []
    [listed] = request(http, "adm1", "GET", "/v1/instances?host=agent-7").json["instances"]
    assert listed["host"] == "agent-7"


def test_static_token_projects_own_what_they_build(env: Env, http: api_app.Application) -> None:
    built = request(http, "mem2", "POST", "/v1/instances", {"flavor": "small"})
    assert built.status_code == 202
    [instance] = built.json["instances"]
    assert (instance["project_id"], instance["user_id"]) == ("p2", "token-4")
    assert request(http, "mem1", "GET", f"/v1/instances/{instance['uuid']}").status_code == 404
    # Before 1.2 instances do not show their project.
    old = webob.Request.blank(f"/v1/instances/{instance['uuid']}")
    old.headers["X-Auth-Token"] = "mem2"
    assert "project_id" not in old.get_response(http).json


def test_quotas_over_http(env: Env, http: api_app.Application) -> None:
    limit_one = {"quotas": {"instances": 1}}
    assert request(http, "mem1", "PUT", "/v1/quotas/p1", limit_one).status_code == 403
    assert request(http, "rd1", "GET", "/v1/quotas/p2").status_code == 403
    assert request(http, "adm1", "GET", "/v1/quotas").json == {"quotas": []}
    put = request(http, "adm1", "PUT", "/v1/quotas/p2", limit_one)
    assert put.status_code == 200
    assert put.json["quotas"]["instances"] == {"limit": 1, "in_use": 0, "default": False}
    bad = request(http, "adm1", "PUT", "/v1/quotas/p2", {"quotas": {"instances": "ten"}})
    assert bad.status_code == 400
    assert bad.json["errors"][0]["field"] == "quotas.instances"
    assert request(http, "mem2", "POST", "/v1/instances", {"flavor": "small"}).status_code == 202
    refused = request(http, "mem2", "POST", "/v1/instances", {"flavor": "small", "count": 3})
    assert refused.status_code == 403
    [error] = refused.json["errors"]
    assert error["code"] == "ringfleet.quota_exceeded"
    assert error["detail"] == (
        "Quota exceeded for instances: Requested 3, but already used 1 of 1 instances"
    )
    shown = request(http, "rd2", "GET", "/v1/quotas/p2").json
    assert shown["quotas"]["instances"] == {"limit": 1, "in_use": 1, "default": False}
    assert request(http, "adm1", "DELETE", "/v1/quotas/p2").json["quotas"]["instances"]["default"]
    # Quotas are a 1.2 resource.
    old = webob.Request.blank("/v1/quotas/p2")
    old.headers["X-Auth-Token"] = "adm1"
    assert old.get_response(http).status_code == 404


def test_nodes_show_their_instance_to_admins_only(env: Env) -> None:
    [node] = add_nodes(env.db, 1, owner="agent-1")
    [instance] = env.build(member("p2"))
    with env.db.transaction() as session:
        session.query(NodeModel).filter_by(uuid=node).one().instance_uuid = instance
    inventory = InventoryEndpoint(env.db, FleetView(env.db))
    for ctxt in (member("p1"), reader("p2")):
        assert inventory.show_node(ctxt, node=node)["instance_uuid"] is None
        [listed] = inventory.list_nodes(ctxt, filters={"pinned": True})
        assert listed["uuid"] == node and listed["instance_uuid"] is None
    for ctxt in (admin(), OPERATOR_CTXT):
        assert inventory.show_node(ctxt, node=node)["instance_uuid"] == instance


def test_the_fleet_check_is_for_admins_only(env: Env) -> None:
    fleet = FleetEndpoint(env.db, FleetView(env.db), "cond-t", compute=None)  # type: ignore[arg-type]
    with pytest.raises(Forbidden):
        fleet.fleet_check(member("p1"))
    assert "problems" in fleet.fleet_check(admin())
