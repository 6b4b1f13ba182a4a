# SPDX-License-Identifier: Apache-2.0
"""Hypothesis fuzzing of every public conductor RPC endpoint method.

For arbitrary JSON-like payloads (and, mixed in, valid-looking ones so that the
deeper code runs) every call either returns primitives or raises one of our
:class:`~conductor.common.exception.RingfleetError` subclasses -- never a
``TypeError``, ``KeyError``, ``OverflowError`` or an SQLAlchemy error -- and a
call refused with :class:`~conductor.common.exception.InvalidInput` changed nothing
(design invariant 8).

Also: every RingfleetError subclass survives the rebuild oslo.messaging does on
the caller's side, ``klass(*args, **kwargs)``.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import inspect
import json
import sys
import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from oslo_messaging._drivers import common as rpc_common
from sqlalchemy import text

from conductor.common import exception, rpc
from conductor.common.exception import FieldError, InvalidInput, RingfleetError
from conductor.db import allocations, quotas
from conductor.db.engine import Database
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.fleet import FleetEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.endpoints.quotas import QuotasEndpoint
from conductor.fleet_view import FleetView
from conductor.lifecycle import BuildLifecycle
from conductor.scheduler.scheduler import Scheduler
from hashring.membership import Member, MembershipView, State
from tests.dbutil import add_nodes, migrated, pin
from tests.endpoint_stubs import RecordingQueue, StubMembership

CTXT: dict[str, Any] = {"request_id": "req-fuzz"}
ENDPOINT_CLASSES = (
    InventoryEndpoint,
    InstancesEndpoint,
    QuotasEndpoint,
    FleetEndpoint,
    AgentsEndpoint,
)
FUZZ = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the shared database ------------------------------------------------------------------


class StubCompute:
    def drain(self, host: str) -> str:
        return "draining"


def _view(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(member_id=h, ring_version=1, weight=1.0) for h in hosts},
        excluded={},
        ring_version=1,
    )


@dataclass
class Fuzzed:
    db: Database
    membership: StubMembership
    queue: RecordingQueue
    endpoints: dict[str, Any]

    def snapshot(self) -> dict[str, tuple[int, str]]:
        """Row count and checksum of every table: cheap on a small database."""
        out = {}
        with self.db.transaction() as session:
            for table in (
                "nodes",
                "flavors",
                "instances",
                "agents",
                "quota_limits",
                "quota_projects",
            ):
                rows = session.execute(text(f"SELECT * FROM {table} ORDER BY 1")).all()
                out[table] = (len(rows), hashlib.sha256(repr(rows).encode()).hexdigest())
        return out


# Seeded facts the valid-looking strategies draw from (fixed names and uuids,
# so that hypothesis can replay examples against the same database).
NODE_NAMES = [f"seed-{i}" for i in range(6)]
NODE_UUIDS = [str(uuidlib.UUID(int=0xA000 + i)) for i in range(6)]
INSTANCE_UUIDS = [str(uuidlib.UUID(int=0xB000 + i)) for i in range(3)]
LIVE = ("agent-1", "agent-2")
HOSTS = [*LIVE, "agent-gone", "agent-9"]
FLAVORS = ["small", "gold"]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "ringfleet.db"
    db = migrated(f"sqlite:///{path}")
    fleet = FleetView(db)
    membership = StubMembership()
    fleet.attach(membership)  # type: ignore[arg-type]
    fleet.on_change(_view(*LIVE, "agent-gone"))
    queue = RecordingQueue()
    inventory = InventoryEndpoint(db, fleet)
    instances = InstancesEndpoint(db, queue, quota=lambda: quotas.Defaults(instances=50))
    inventory.import_nodes(
        CTXT,
        nodes=[
            {"name": name, "uuid": uuid, "resource_class": "baremetal"}
            for name, uuid in zip(NODE_NAMES, NODE_UUIDS, strict=True)
        ],
    )
    # Real build workers, never started: results are handled, queued work waits.
    builds = BuildLifecycle(db, Scheduler(db), fleet, workers=1)
    agents = AgentsEndpoint(db, fleet, lambda: 3600.0, builds=builds, restart_grace=lambda: 60.0)
    agents.claim_nodes(CTXT, host="agent-1", node_uuids=NODE_UUIDS[:2])
    agents.claim_nodes(CTXT, host="agent-2", node_uuids=NODE_UUIDS[2:3])
    agents.claim_nodes(CTXT, host="agent-gone", node_uuids=NODE_UUIDS[3:5])
    add_nodes(db, 2, owner="agent-gone", prefix="extra")
    pin(db, [NODE_UUIDS[0]], "agent-1")
    pin(db, [NODE_UUIDS[3]], "agent-gone")
    fleet.on_change(_view(*LIVE))
    inventory.create_flavor(CTXT, flavor={"name": "small", "resource_class": "baremetal"})
    inventory.create_flavor(CTXT, flavor={"name": "gold", "resource_class": "gold"})
    instances.build_instances(
        CTXT, request={"flavor": "small", "count": 3, "instance_uuids": INSTANCE_UUIDS}
    )
    # One build placed on seed-1 (agent-1, epoch 1): its results can be heard.
    assert allocations.allocate(db, NODE_UUIDS[1], INSTANCE_UUIDS[0]) is not None
    yield Fuzzed(
        db=db,
        membership=membership,
        queue=queue,
        endpoints={
            "inventory": inventory,
            "instances": instances,
            "quotas": QuotasEndpoint(db, lambda: quotas.Defaults(instances=50)),
            "fleet": FleetEndpoint(db, fleet, "cond-fuzz", StubCompute()),
            "agents": agents,
        },
    )
    db.dispose()


# -- strategies -------------------------------------------------------------------------------

LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
)
JSON = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True)
UUIDS = st.uuids().map(str) | st.sampled_from(NODE_UUIDS + INSTANCE_UUIDS)
UUID_LIKE = UUIDS | UUIDS.map(str.upper) | UUIDS.map(lambda u: u.replace("-", ""))
HOST = st.sampled_from([*LIVE, *LIVE, *HOSTS, ""]).flatmap(lambda h: st.just(h) if h else NAMES)
SEEDED_NODE = st.sampled_from(NODE_NAMES + NODE_UUIDS)
NODE_IDENT = st.sampled_from([0, 0, 0, 1, 2]).flatmap(lambda i: (SEEDED_NODE, NAMES, UUID_LIKE)[i])
EPOCH = st.integers(-1, 4) | st.sampled_from([2**31 - 2, 2**31 - 1, 2**63, 2**64]) | st.integers()
TRAITS = st.lists(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), max_size=3)
RESOURCE_CLASS = st.sampled_from(["baremetal", "gold"]) | NAMES
PROJECT = st.sampled_from(["p1", "p2", "p1", ""]) | st.text(max_size=8)
QUOTAS = st.dictionaries(
    st.sampled_from(["instances", "resource_class:gold", "resource_class:a b", "cores"]),
    st.integers(-2, 60) | st.sampled_from([2**31 - 1, 2**31]),
    max_size=3,
)


def _weighted(valid: st.SearchStrategy[Any], valid_in: int) -> st.SearchStrategy[Any]:
    """``valid`` in ``valid_in`` cases out of ``valid_in + 1``, else arbitrary JSON.

    (``st.one_of(a, a, b)`` does not weigh ``a`` twice: hypothesis picks a
    branch among distinct strategies.)
    """
    choices = [True] * valid_in + [False]
    return st.sampled_from(choices).flatmap(lambda ok: valid if ok else JSON)


def fuzz(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Arbitrary JSON, or (more often) a valid-looking value, valid or not quite."""
    return _weighted(valid, 3)


def _maybe_junk(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly valid, sometimes junk: deep enough to pass the first checks."""
    return _weighted(valid, 7)


def _mostly(valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` 6 times in 8, else ``odd`` or arbitrary JSON."""
    return st.sampled_from([0] * 6 + [1, 2]).flatmap(lambda i: (valid, odd, JSON)[i])


NODE_SPEC = st.fixed_dictionaries(
    {"name": _maybe_junk(NAMES), "resource_class": _maybe_junk(RESOURCE_CLASS)},
    optional={
        "uuid": _maybe_junk(UUID_LIKE),
        "traits": _maybe_junk(TRAITS),
        "properties": _maybe_junk(
            st.dictionaries(
                st.sampled_from(["cpus", "memory_mb", "capabilities", "x"]),
                st.integers() | st.text(max_size=20) | st.sampled_from(["boot_mode:uefi"]),
                max_size=3,
            )
        ),
        "group": _maybe_junk(st.sampled_from(["", "rack1", "rack 2"])),
        "maintenance": _maybe_junk(st.booleans()),
        "maintenance_reason": _maybe_junk(st.text(max_size=20)),
        "provision_state": _maybe_junk(st.sampled_from(["available", "enroll", "active"])),
        "power_state": _maybe_junk(st.sampled_from(["power on", "power off", "on"])),
    },
)
NODE_UPDATE = st.fixed_dictionaries(
    {},
    optional={
        "properties": _maybe_junk(
            st.dictionaries(
                st.sampled_from(["cpus", "capabilities", "x"]),
                st.integers() | st.text(max_size=20) | st.sampled_from(["boot_mode:uefi"]),
                max_size=3,
            )
        ),
        "remove_properties": _maybe_junk(st.lists(st.sampled_from(["cpus", "x", ""]), max_size=2)),
        "add_traits": _maybe_junk(TRAITS),
        "remove_traits": _maybe_junk(TRAITS),
        "resource_class": _maybe_junk(RESOURCE_CLASS),
    },
)
FLAVOR_SPEC = st.fixed_dictionaries(
    {"name": _maybe_junk(NAMES | st.sampled_from(FLAVORS)), "resource_class": RESOURCE_CLASS},
    optional={
        "required_traits": _maybe_junk(TRAITS),
        "forbidden_traits": _maybe_junk(TRAITS),
        "extra_specs": _maybe_junk(
            st.dictionaries(
                st.sampled_from(["capabilities:boot_mode", "trait:CUSTOM_X", "other"]),
                st.sampled_from(["s== uefi", ">= 4", "required", "forbidden", "<or> a"]),
                max_size=3,
            )
        ),
    },
)


@st.composite
def build_requests(draw: st.DrawFn) -> dict[str, Any]:
    """Build requests whose instance_uuids usually match their count."""
    count = draw(st.integers(1, 3))
    request = draw(
        st.fixed_dictionaries(
            {"flavor": _maybe_junk(st.sampled_from([*FLAVORS, FLAVORS[0], "nope"]))},
            optional={
                "count": _maybe_junk(st.just(count) | st.integers(0, 3)),
                "name": _maybe_junk(NAMES | st.just(" padded")),
                "group": _maybe_junk(st.sampled_from(["", "rack1"])),
            },
        )
    )
    if draw(st.booleans()):
        size = count if "count" in request else 1
        request["instance_uuids"] = draw(
            _maybe_junk(st.lists(UUID_LIKE, min_size=size, max_size=size) | st.lists(UUID_LIKE))
        )
    return request


BUILD_REQUEST = build_requests()
NODE_FILTERS = st.dictionaries(
    st.sampled_from(
        ["resource_class", "group", "owner", "provision_state", "maintenance", "pinned", "x"]
    ),
    st.booleans() | st.sampled_from(["baremetal", "", "agent-1", "available"]) | JSON,
    max_size=3,
)
CLAIM_KEY = st.sampled_from([True] * 7 + [False]).flatmap(
    lambda ok: UUID_LIKE if ok else st.text(max_size=10)  # JSON keys are text
)
CLAIMS = st.dictionaries(CLAIM_KEY, _maybe_junk(EPOCH), max_size=4)
TRANSFER = st.fixed_dictionaries(
    {
        "node_uuid": _maybe_junk(UUID_LIKE),
        "epoch": _maybe_junk(EPOCH),
        "new_owner": _maybe_junk(HOST),
    }
)
TRANSFERS = st.lists(_mostly(TRANSFER, TRANSFER.map(lambda t: {**t, "extra": 1})), max_size=4)
STATE = st.fixed_dictionaries(
    {"node_uuid": _maybe_junk(UUID_LIKE), "epoch": _maybe_junk(EPOCH)},
    optional={
        "power_state": _maybe_junk(st.sampled_from(["power on", "power off", "on"])),
        "provision_state": _maybe_junk(st.sampled_from(["available", "error", "up"])),
    },
)
STATES = st.lists(_mostly(STATE, STATE.map(lambda t: {**t, "extra": 1})), max_size=4)


def kwargs(
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional or {})


#: A ring as an agent sends it, valid or not quite.
RING = st.fixed_dictionaries(
    {
        "version": st.sampled_from([1, 2, 0, -1, "1"]),
        "members": st.dictionaries(HOST, st.sampled_from([1.0, 2.0, 0.0, -1.0]), max_size=3),
    }
)
SHARES = st.lists(
    st.fixed_dictionaries(
        {"ring": fuzz(RING)},
        optional={
            "groups": fuzz(st.lists(st.sampled_from(["", "rack1"]))),
            "exclude_groups": fuzz(st.lists(st.sampled_from(["", "rack1"]))),
        },
    ),
    max_size=2,
)

SINCE = (
    st.datetimes().map(datetime.datetime.isoformat)
    | st.datetimes(timezones=st.timezones()).map(datetime.datetime.isoformat)
    | st.sampled_from(["2020-01-01", "2020-01-01T00:00:00+14:00", "yesterday", ""])
)
RESULT_NODE = st.sampled_from(NODE_UUIDS[:3]) | UUID_LIKE
RESULT = {
    "host": fuzz(HOST),
    "instance_uuid": fuzz(st.sampled_from(INSTANCE_UUIDS) | UUID_LIKE),
    "epoch": fuzz(EPOCH),
    "success": fuzz(st.booleans()),
}
LIMIT = st.integers(-1, 20) | st.sampled_from([10_000, 10_001])

#: method name -> (endpoint, strategy of its keyword arguments)
METHODS: dict[str, tuple[str, st.SearchStrategy[dict[str, Any]]]] = {
    "create_node": ("inventory", kwargs({"node": fuzz(NODE_SPEC)})),
    "import_nodes": ("inventory", kwargs({"nodes": fuzz(st.lists(NODE_SPEC, max_size=3))})),
    "list_nodes": (
        "inventory",
        kwargs(
            {},
            {"filters": fuzz(NODE_FILTERS), "limit": fuzz(LIMIT), "marker": fuzz(NODE_IDENT)},
        ),
    ),
    "show_node": ("inventory", kwargs({"node": fuzz(NODE_IDENT)})),
    "set_node_maintenance": (
        "inventory",
        kwargs(
            {"node": fuzz(NODE_IDENT), "maintenance": fuzz(st.booleans())},
            {"reason": fuzz(st.text(max_size=300))},
        ),
    ),
    "node_owner": ("inventory", kwargs({"node": fuzz(NODE_IDENT)})),
    "set_node": ("inventory", kwargs({"node": fuzz(NODE_IDENT), "changes": fuzz(NODE_UPDATE)})),
    "move_node": ("inventory", kwargs({"node": fuzz(NODE_IDENT), "host": fuzz(HOST)})),
    "create_flavor": ("inventory", kwargs({"flavor": fuzz(FLAVOR_SPEC)})),
    "list_flavors": ("inventory", kwargs({})),
    # No Ironic configured here: a ConfigurationError naming [ironic] auth_type.
    "sync_ironic_nodes": ("inventory", kwargs({})),
    "show_flavor": ("inventory", kwargs({"flavor": fuzz(st.sampled_from(FLAVORS) | NAMES)})),
    "delete_flavor": ("inventory", kwargs({"flavor": fuzz(st.sampled_from(FLAVORS) | NAMES)})),
    "build_instances": ("instances", kwargs({"request": fuzz(BUILD_REQUEST)})),
    "list_instances": (
        "instances",
        kwargs(
            {},
            {
                "vm_state": fuzz(st.sampled_from(["building", "deleted", "running"])),
                "host": fuzz(HOST),
                "limit": fuzz(LIMIT),
                "marker": fuzz(UUID_LIKE),
                "all_projects": fuzz(st.booleans()),
                "project_id": fuzz(PROJECT),
                "name": fuzz(st.sampled_from(["^web-", "web-(", "[[:digit:]]+"])),
                "status": fuzz(st.sampled_from(["ACTIVE", "shutoff", "RUNNING"])),
                "changes_since": fuzz(
                    st.sampled_from(["2026-11-29T20:00:00Z", "0001-01-01T00:00:00+14:00", "noon"])
                ),
                "sort_key": fuzz(st.sampled_from(["display_name", "created_at", "flavor"])),
                "sort_dir": fuzz(st.sampled_from(["asc", "desc", "up"])),
            },
        ),
    ),
    "show_instance": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    "list_instance_actions": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    "show_instance_action": (
        "instances",
        kwargs({"instance": fuzz(UUID_LIKE), "request_id": fuzz(st.sampled_from(["req-1"]))}),
    ),
    "show_quota": ("quotas", kwargs({"project_id": fuzz(PROJECT)})),
    "set_quota": ("quotas", kwargs({"project_id": fuzz(PROJECT), "quotas": fuzz(QUOTAS)})),
    "delete_quota": ("quotas", kwargs({"project_id": fuzz(PROJECT)})),
    "list_quotas": ("quotas", kwargs({})),
    "delete_instance": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    "reboot_instance": (
        "instances",
        kwargs({"instance": fuzz(UUID_LIKE)}, {"hard": fuzz(st.booleans())}),
    ),
    "stop_instance": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    "start_instance": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    "rebuild_instance": ("instances", kwargs({"instance": fuzz(UUID_LIKE)})),
    # No agents to route to here: valid input ends in a ConfigurationError.
    "set_node_power_state": (
        "inventory",
        kwargs(
            {
                "node": fuzz(NODE_IDENT),
                "target": fuzz(st.sampled_from(["power on", "soft rebooting", "reboot", ""])),
            }
        ),
    ),
    "delete_node": ("inventory", kwargs({"node": fuzz(NODE_IDENT)})),
    "fleet_status": ("fleet", kwargs({})),
    "ring_status": ("fleet", kwargs({})),
    "fleet_check": ("fleet", kwargs({})),
    "drain_agent": ("fleet", kwargs({"host": fuzz(HOST)})),
    "list_node_uuids": (
        "agents",
        kwargs(
            {},
            {
                "groups": fuzz(st.lists(st.sampled_from(["", "rack1"]) | st.text(max_size=5))),
                "since": fuzz(SINCE),
                "marker": fuzz(NODE_IDENT),
                "limit": fuzz(LIMIT | st.sampled_from([50_000, 50_001])),
                "owner": fuzz(HOST),
                "outside": fuzz(SHARES),
            },
        ),
    ),
    "claim_share": (
        "agents",
        kwargs(
            {"host": fuzz(HOST), "ring": fuzz(RING)},
            {
                "groups": fuzz(st.lists(st.sampled_from(["", "rack1"]))),
                "exclude_groups": fuzz(st.lists(st.sampled_from(["", "rack1"]))),
                "limit": fuzz(LIMIT),
            },
        ),
    ),
    "report_build_result": (
        "agents",
        kwargs(
            {**RESULT, "node_uuid": fuzz(RESULT_NODE)},
            {"fault": fuzz(st.text(max_size=50)), "node_clean": fuzz(st.booleans())},
        ),
    ),
    "report_build_results": (
        "agents",
        kwargs(
            {
                "host": fuzz(HOST),
                "results": fuzz(
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                **{k: v for k, v in RESULT.items() if k != "host"},
                                "node_uuid": fuzz(RESULT_NODE),
                            },
                            optional={
                                "fault": fuzz(st.text(max_size=50)),
                                "node_clean": fuzz(st.booleans()),
                            },
                        ),
                        max_size=3,
                    )
                ),
            }
        ),
    ),
    "report_destroy_result": (
        "agents",
        kwargs({**RESULT, "node_uuid": fuzz(RESULT_NODE)}, {"fault": fuzz(st.text(max_size=50))}),
    ),
    "claim_nodes": (
        "agents",
        kwargs({"host": fuzz(HOST), "node_uuids": fuzz(st.lists(UUID_LIKE, max_size=4))}),
    ),
    "release_nodes": ("agents", kwargs({"host": fuzz(HOST), "claims": fuzz(CLAIMS)})),
    "report_progress": ("agents", kwargs({"host": fuzz(HOST), "nodes": fuzz(CLAIMS)})),
    "transfer_nodes": ("agents", kwargs({"host": fuzz(HOST), "transfers": fuzz(TRANSFERS)})),
    "owned_nodes": ("agents", kwargs({"host": fuzz(HOST)})),
    "resume_work": ("agents", kwargs({"host": fuzz(HOST)})),
    "hold_for_restart": ("agents", kwargs({"host": fuzz(HOST)})),
    "report_node_states": ("agents", kwargs({"host": fuzz(HOST), "states": fuzz(STATES)})),
}

#: Who calls: mostly the operator, as before 1.12; a project's member or an
#: admin; or a context whose caller keys are junk.
CONTEXTS = st.sampled_from([0, 0, 0, 1, 1, 2, 3]).flatmap(
    lambda i: (
        st.just(dict(CTXT)),
        st.builds(
            lambda p: {**CTXT, "project_id": p, "user_id": "u", "roles": ["member", "reader"]},
            st.sampled_from(["p1", "p2"]),
        ),
        st.just({**CTXT, "project_id": "p1", "roles": ["admin"], "is_admin": True}),
        st.fixed_dictionaries(
            {},
            optional={
                "project_id": fuzz(PROJECT),
                "user_id": JSON,
                "roles": fuzz(st.lists(st.sampled_from(["admin", "member"]))),
                "is_admin": fuzz(st.booleans()),
            },
        ).map(lambda extra: {**CTXT, **extra}),
    )[i]
)

MEMBERSHIP_STATES = st.sampled_from([State.CONNECTED] * 8 + [State.SUSPENDED, State.LOST])


def test_every_public_endpoint_method_is_fuzzed() -> None:
    public = {
        name
        for cls in ENDPOINT_CLASSES
        for name, value in vars(cls).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }
    assert public == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
@FUZZ
@given(data=st.data())
def test_endpoint_method_fuzz(fuzzed: Fuzzed, method: str, data: st.DataObject) -> None:
    where, strategy = METHODS[method]
    call = getattr(fuzzed.endpoints[where], method)
    payload = data.draw(strategy, label="payload")
    fuzzed.membership.state = data.draw(MEMBERSHIP_STATES, label="membership")
    ctxt = data.draw(CONTEXTS, label="context")
    before = fuzzed.snapshot()
    queued = (len(fuzzed.queue.submitted), len(fuzzed.queue.deleted), len(fuzzed.queue.acted))
    try:
        result = call(ctxt, **payload)
    except InvalidInput as exc:
        event("InvalidInput")
        assert exc.errors, "an InvalidInput must name at least one field"
        assert fuzzed.snapshot() == before, f"{method} refused its input but changed the db"
        assert (
            len(fuzzed.queue.submitted),
            len(fuzzed.queue.deleted),
            len(fuzzed.queue.acted),
        ) == queued
        # It must travel over RPC: its kwargs are JSON primitives.
        json.dumps(exc.kwargs)
    except RingfleetError as exc:
        event(type(exc).__name__)
        json.dumps(exc.kwargs)
    else:
        event("returned")
        # Primitives only: the reply is serialized as JSON.
        json.dumps(result, allow_nan=False)
    finally:
        fuzzed.membership.state = State.CONNECTED


# -- exceptions rebuilt on the caller's side (oslo.messaging) -----------------------------

TEXT = st.text(max_size=30)
OPT_TEXT = st.none() | TEXT
FIELD_ERRORS = st.lists(st.builds(FieldError, TEXT, TEXT, OPT_TEXT), max_size=4)
EXCEPTIONS: dict[type[RingfleetError], st.SearchStrategy[RingfleetError]] = {
    exception.ConfigurationError: st.builds(exception.ConfigurationError, TEXT, TEXT, TEXT),
    exception.InvalidInput: st.builds(
        exception.InvalidInput,
        FIELD_ERRORS | FIELD_ERRORS.map(lambda errors: [e.to_dict() for e in errors]),
    ),
    exception.NoValidNode: st.builds(
        exception.NoValidNode,
        TEXT,
        st.integers(0, 10**6),
        st.lists(st.tuples(TEXT, st.integers(0, 10**6)), max_size=4),
    ),
    exception.ServiceUnavailable: st.builds(exception.ServiceUnavailable, TEXT),
    exception.Forbidden: st.builds(exception.Forbidden, TEXT),
    exception.QuotaExceeded: st.builds(
        exception.QuotaExceeded,
        resource=TEXT,
        requested=st.integers(1, 1000),
        used=st.integers(0, 10**6),
        limit=st.integers(-1, 10**6),
    ),
    exception.DatabaseUnavailable: st.builds(exception.DatabaseUnavailable, TEXT),
    exception.NotOwner: st.builds(exception.NotOwner, TEXT, OPT_TEXT, st.integers(0, 2**31)),
    exception.DriverError: st.builds(exception.DriverError, TEXT, TEXT, TEXT),
    exception.ActionAbandoned: st.builds(exception.ActionAbandoned, TEXT, TEXT),
    exception.IdentityTaken: st.builds(exception.IdentityTaken, TEXT, TEXT),
    exception.InvalidTransition: st.builds(
        exception.InvalidTransition, event=TEXT, state=OPT_TEXT, allowed=st.lists(TEXT, max_size=4)
    ),
    exception.ActionLogError: st.builds(
        exception.ActionLogError, TEXT, st.integers(1, 10**6), TEXT
    ),
}
for _cls in (
    exception.NotFound,
    exception.NodeNotFound,
    exception.FlavorNotFound,
    exception.InstanceNotFound,
    exception.KeyPairNotFound,
    exception.InstanceActionNotFound,
):
    EXCEPTIONS[_cls] = st.builds(_cls, TEXT)
EXCEPTIONS[exception.InstanceLabelNotFound] = st.builds(
    exception.InstanceLabelNotFound, TEXT, st.sampled_from(["metadata key", "tag"])
)
for _conflict in (
    exception.Conflict,
    exception.DuplicateNode,
    exception.DuplicateFlavor,
    exception.DuplicateInstance,
    exception.NodeNotBuildable,
    exception.InstanceStateConflict,
    exception.DuplicateKeyPair,
    exception.NodeInUse,
    exception.NotUpgraded,
):
    EXCEPTIONS[_conflict] = st.builds(
        _conflict,
        field=TEXT,
        value=OPT_TEXT,
        index=st.none() | st.integers(0, 10**6),
        reason=OPT_TEXT,
    )


def _rpc_exceptions() -> set[type[RingfleetError]]:
    """Every RingfleetError subclass defined in a module whose exceptions travel over RPC."""
    found = set()
    for name in rpc.ALLOWED_EXMODS:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, RingfleetError)
                and value is not RingfleetError
                and value.__module__ == name
            ):
                found.add(value)
    return found


def test_every_ringfleet_error_subclass_is_covered() -> None:
    assert _rpc_exceptions() == set(EXCEPTIONS)


@settings(max_examples=100, deadline=None)
@given(error=st.one_of(list(EXCEPTIONS.values())))
def test_exception_rebuilds_from_args_and_kwargs(error: RingfleetError) -> None:
    assert error.args == ()  # oslo.messaging passes them positionally
    rebuilt = type(error)(*error.args, **error.kwargs)
    assert type(rebuilt) is type(error)
    assert str(rebuilt) == str(error)
    assert rebuilt.kwargs == error.kwargs
    # The kwargs travel as JSON.
    assert json.loads(json.dumps(error.kwargs)) == error.kwargs


@settings(max_examples=50, deadline=None)
@given(error=st.one_of(list(EXCEPTIONS.values())))
def test_exception_survives_oslo_messaging_serialization(error: RingfleetError) -> None:
    try:
        raise error
    except RingfleetError:
        data = rpc_common.serialize_remote_exception(sys.exc_info())
    remote = rpc_common.deserialize_remote_exception(data, rpc.ALLOWED_EXMODS)
    assert isinstance(remote, type(error)), remote
    assert remote.kwargs == error.kwargs
    assert str(remote).startswith(str(error))
    if isinstance(error, InvalidInput):
        assert isinstance(remote, InvalidInput)
        assert remote.errors == error.errors
