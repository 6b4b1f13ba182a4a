# SPDX-License-Identifier: Apache-2.0
"""Nova's scheduling, whole, against ringfleet's on a corpus of 7,200 node x request pairs.

Nova's verdict is what Nova does for an ironic flavor: a real Placement's
``GET /allocation_candidates`` (the query Nova's own ``ResourceRequest``
makes of the flavor) on providers written as Nova's ironic driver writes
them, then Nova's own default ``enabled_filters`` (the list pasted verbatim
from ``nova/conf/scheduler.py``, checked against the installed Nova) on
those candidates, with the ``HostState`` Nova's ironic driver, resource
tracker and host manager build and a real ``RequestSpec``; then Nova's
``all_weighers`` order the survivors.

ringfleet's verdict is its scheduler's: a node index of the corpus, and
the decision procedure (:class:`conductor.scheduler.decide.Chooser`) with
the same list pasted verbatim and ``nova.scheduler.weights.all_weighers``,
asked again and again, each node chosen excluded from the next request
(as a reschedule excludes it), until it says no node fits.  The flavors
are created as the API creates them (``validate_flavor_spec``), the images
checked as a build's.

The corpus varies what Placement's half and Nova's default filters read:
resource classes in every spelling (``baremetal-gold``, ``baremetal.gold``,
``BAREMETAL_GOLD``, ``CUSTOM_BAREMETAL_GOLD``), ``resources:CUSTOM_*=1``
with Nova's ironic zeroes or without, required and forbidden traits,
capabilities with blanks, ``cpu_arch``, image properties, and nodes in
maintenance, not ``available``, of unknown power state or hosting an
instance; failed builds vary, for ``BuildFailureWeigher``.
"""

from __future__ import annotations

import itertools
import random
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from keystoneauth1 import adapter, session, token_endpoint

from conductor.common.objects import Flavor, Node, PowerState, ProvisionState
from conductor.scheduler.decide import Chooser
from conductor.scheduler.index import NodeIndex, is_free
from conductor.scheduler.nova import NovaFilter
from conductor.scheduler.plugins import load_filters, load_weighers
from conductor.scheduler.request import RequestSpec
from conductor.validation import validate_flavor_spec
from conductor.validation.capabilities import stored_capabilities
from conductor.validation.deploy import check_image
from conductor.validation.fields import Errors

os_resource_classes = pytest.importorskip("os_resource_classes")
nova_scheduler_utils = pytest.importorskip("nova.scheduler.utils")
nova_weights = pytest.importorskip("nova.scheduler.weights")
nova_host_filters = pytest.importorskip("nova.scheduler.filters")
nova_scheduler_conf = pytest.importorskip("nova.conf.scheduler")
from tests.unit.test_nova_differential import (  # noqa: E402  (needs Nova)
    OWNER,
    nova_host_state,
    nova_request,
)

#: Nova's default [filter_scheduler] enabled_filters, pasted from nova/conf/scheduler.py
NOVA_DEFAULT_FILTERS = [
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
]
#: Nova's default [filter_scheduler] weight_classes
NOVA_DEFAULT_WEIGHERS = ["nova.scheduler.weights.all_weighers"]

NODE_CLASSES = (
    "baremetal-gold",
    "baremetal.gold",
    "BAREMETAL_GOLD",
    "CUSTOM_BAREMETAL_GOLD",
    "silver",
)
NODE_TRAITS: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset({"CUSTOM_X"}),
    frozenset({"CUSTOM_X", "CUSTOM_Y"}),
    frozenset({"CUSTOM_Y"}),
)
NODE_HARDWARE: tuple[dict[str, Any], ...] = (
    {"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"},
    {"cpu_arch": "x86_64", "capabilities": "boot_mode: uefi,rack:r1"},  # a blank, as written
    {"cpu_arch": "aarch64", "capabilities": "boot_mode:bios"},
    {},
)
#: by node, in turn (7 is prime to the other dimensions: every combination meets each)
NODE_STATES: tuple[dict[str, Any], ...] = (
    {},
    {},
    {},
    {"maintenance": True, "maintenance_reason": "fan"},
    {"provision_state": ProvisionState.MANAGEABLE},
    {"power_state": None},
    {
        "instance_uuid": "3c1e0c3a-0000-4c57-9d1c-5f0e3b1c2a11",
        "provision_state": ProvisionState.ACTIVE,
    },
)
FAILED_BUILDS = (0, 1, 3)
ZEROES = {"resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}
#: the flavor's own resource class and its resources: specs
RESOURCES: tuple[tuple[str, dict[str, str]], ...] = (
    ("baremetal-gold", {}),
    ("baremetal-gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1", **ZEROES}),
    ("baremetal.gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1", **ZEROES}),
    ("BAREMETAL_GOLD", {}),
    ("CUSTOM_BAREMETAL_GOLD", {"resources:CUSTOM_CUSTOM_BAREMETAL_GOLD": "1", **ZEROES}),
    ("silver", {"resources:CUSTOM_SILVER": "1", **ZEROES}),
)
TRAIT_SPECS: tuple[dict[str, str], ...] = (
    {},
    {"trait:CUSTOM_X": "required"},
    {"trait:CUSTOM_X": "required", "trait:CUSTOM_Y": "forbidden"},
)
IMAGE = {"source": "https://images.example/a.qcow2", "checksum": "0" * 32, "disk_format": "qcow2"}
#: (extra specs, the build's image properties; None: no image properties)
OTHERS: tuple[tuple[dict[str, str], dict[str, str] | None], ...] = (
    ({}, None),
    (
        {"capabilities:boot_mode": "s== uefi"},
        {"hw_architecture": "x86_64", "hw_vm_mode": "hvm", "img_hv_requested_version": ">=1"},
    ),
    ({"capabilities:boot_mode": "uefi", "capabilities:rack": "r1"}, None),
    # Unscoped: Nova's ComputeCapabilitiesFilter reads it too.
    ({"boot_mode": "bios"}, {"hw_architecture": "aarch64"}),
    ({}, {"img_hv_type": "qemu"}),
)


def _nodes() -> list[Node]:
    nodes = []
    combinations = itertools.product(NODE_CLASSES, NODE_TRAITS, NODE_HARDWARE)
    for i, (resource_class, traits, hardware) in enumerate(combinations):
        state: dict[str, Any] = {"power_state": PowerState.OFF, **NODE_STATES[i % len(NODE_STATES)]}
        nodes.append(
            Node(
                uuid=str(uuid.uuid4()),
                name=f"n{i}",
                resource_class=resource_class,
                traits=traits,
                properties=hardware,
                capabilities=stored_capabilities(hardware.get("capabilities")),
                owner=OWNER,
                owner_epoch=1,
                failed_builds=FAILED_BUILDS[(i // len(NODE_STATES)) % len(FAILED_BUILDS)],
                **state,
            )
        )
    return nodes


def _requests() -> list[tuple[Flavor, dict[str, str], dict[str, Any] | None]]:
    """(ringfleet's stored flavor, Nova's flavor extra specs, the build's image)."""
    requests = []
    for (own, resources), traits, (specs, properties) in itertools.product(
        RESOURCES, TRAIT_SPECS, OTHERS
    ):
        extra_specs = {**resources, **traits, **specs}
        checked = validate_flavor_spec(
            {"name": "bm", "resource_class": own, "extra_specs": extra_specs}
        )
        flavor = Flavor(
            name=checked.name,
            resource_class=checked.resource_class,
            required_traits=checked.required_traits,
            forbidden_traits=checked.forbidden_traits,
            extra_specs=checked.extra_specs,
        )
        nova_specs = dict(extra_specs)
        if not resources:
            # Nova's ironic flavor asks one unit of its class, as Nova names it.
            nova_specs[f"resources:{os_resource_classes.normalize_name(own)}"] = "1"
        image = None
        if properties is not None:
            errors = Errors()
            image = check_image({**IMAGE, "properties": properties}, "image", errors)
            errors.raise_if_any()
        requests.append((flavor, nova_specs, image))
    return requests


@pytest.fixture
def placement(placement_url: str) -> Iterator[adapter.Adapter]:
    sess = session.Session(auth=token_endpoint.Token(placement_url, "admin"), timeout=30)
    yield adapter.Adapter(
        sess, service_type="placement", default_microversion="1.39", raise_exc=False
    )
    sess.session.close()


def _ok(response: Any) -> Any:
    assert response.status_code in (200, 201, 204), response.text
    return response.json() if response.content else None


def _providers(placement: adapter.Adapter, nodes: list[Node]) -> None:
    """The nodes as Nova's ironic driver writes them: one unit of the class
    ``normalize_name`` makes, reserved unless Placement may offer the node;
    its traits.  No aggregate: the answers are read for these providers."""
    classes = {os_resource_classes.normalize_name(n.resource_class) for n in nodes}
    for name in classes:
        _ok(placement.put(f"/resource_classes/{name}"))
    for trait in set().union(*(n.traits for n in nodes)):
        _ok(placement.put(f"/traits/{trait}"))
    for node in nodes:
        _ok(placement.post("/resource_providers", json={"uuid": node.uuid, "name": node.uuid}))
        inventory = {
            "total": 1,
            "reserved": 0 if is_free(node) else 1,
            "min_unit": 1,
            "max_unit": 1,
            "step_size": 1,
            "allocation_ratio": 1.0,
        }
        body: dict[str, Any] = {
            "resource_provider_generation": 0,
            "inventories": {os_resource_classes.normalize_name(node.resource_class): inventory},
        }
        found = _ok(placement.put(f"/resource_providers/{node.uuid}/inventories", json=body))
        if node.traits:
            body = {
                "resource_provider_generation": found["resource_provider_generation"],
                "traits": sorted(node.traits),
            }
            _ok(placement.put(f"/resource_providers/{node.uuid}/traits", json=body))


def _candidates(
    placement: adapter.Adapter, queries: set[str], ours: set[str]
) -> dict[str, set[str]]:
    """Query -> the providers of *ours* Placement offers for it (one request per query)."""
    found = {}
    for query in queries:
        answer = _ok(placement.get(f"/allocation_candidates?{query}"))
        offered = {rp for request in answer["allocation_requests"] for rp in request["allocations"]}
        found[query] = offered & ours  # the server may hold other tests' providers
    return found


def _novas_order(states: dict[str, Any], accepted: list[str], spec: Any) -> dict[str, float]:
    """Nova's weights of the *accepted* nodes (``all_weighers``), by node uuid."""
    weighers = [cls() for cls in nova_weights.all_weighers()]
    weighed = nova_weights.HostWeightHandler().get_weighed_objects(
        weighers, [states[uuid] for uuid in accepted], spec
    )
    return {w.obj.nodename: w.weight for w in weighed}


def _ringfleet_sequence(
    chooser: Chooser, index: NodeIndex, flavor: Flavor, image: dict[str, Any] | None
) -> tuple[list[str], int]:
    """The nodes ringfleet's scheduler chooses, each excluded from the next request
    (a reschedule's exclusions), until none fits; and how many nodes the
    final "no valid node" accounted for."""
    chosen: list[str] = []
    while True:
        request = RequestSpec.build(
            flavor,
            "inst",
            live_members=frozenset({OWNER}),
            exclude_nodes=frozenset(chosen),
            image=image,
        )
        node = chooser.choose(index, request)
        if node is None:
            error = chooser.explain(index, request)
            return chosen, sum(count for _, count in error.removed)
        chosen.append(node.uuid)


def test_novas_defaults_pasted_verbatim_agree_with_nova_on_every_pair(
    placement: adapter.Adapter,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Nova's own deprecations, on import
        (option,) = [
            o for o in nova_scheduler_conf.filter_scheduler_opts if o.name == "enabled_filters"
        ]
        assert option.default == NOVA_DEFAULT_FILTERS  # pasted verbatim from the installed Nova
        chooser = Chooser(
            load_filters(NOVA_DEFAULT_FILTERS),
            load_weighers(NOVA_DEFAULT_WEIGHERS),
            random.Random(7),
        )
        nodes, requests = _nodes(), _requests()
        states = {node.uuid: nova_host_state(node) for node in nodes}
        specs = [nova_request(nova_specs, {}, (None, image)) for _, nova_specs, image in requests]
    index = NodeIndex()
    for node in nodes:
        index.put(node)
    _providers(placement, nodes)
    queries = [
        nova_scheduler_utils.ResourceRequest.from_request_spec(spec).to_querystring()
        for spec in specs
    ]
    offered = _candidates(placement, set(queries), {node.uuid for node in nodes})

    disagreements, misordered, pairs = [], [], 0
    accepted_total = ordered = 0
    # Nova's classes as Nova's scheduler finds them by name (not through ringfleet).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_name = {cls.__name__: cls for cls in nova_host_filters.all_filters()}
    nova_filters = [by_name[name]() for name in NOVA_DEFAULT_FILTERS]
    assert [f.nova_class for f in chooser.filters if isinstance(f, NovaFilter)] == [
        type(f) for f in nova_filters
    ]
    for (flavor, nova_specs, image), spec, query in zip(requests, specs, queries, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            accepted = [
                node.uuid
                for node in nodes
                if node.uuid in offered[query]
                and all(f.host_passes(states[node.uuid], spec) for f in nova_filters)
            ]
            weights = _novas_order(states, accepted, spec)
        chosen, accounted = _ringfleet_sequence(chooser, index, flavor, image)
        pairs += len(nodes)
        for node in nodes:
            if (node.uuid in accepted) != (node.uuid in chosen):
                disagreements.append((nova_specs, image, node.name, node.uuid in accepted))
        assert accounted == len(nodes)  # "no valid node" accounts for every node
        # Nova's weighers order ringfleet's choices: each weighs no more than the one before.
        order = [weights[uuid] for uuid in chosen if uuid in weights]
        accepted_total += len(accepted)
        ordered += len(set(order)) > 1
        if any(later > earlier for earlier, later in itertools.pairwise(order)):
            misordered.append((nova_specs, image, order))
    assert pairs == len(nodes) * len(requests) == 80 * 90 == 7200
    # Not a degenerate corpus: Nova accepts 251 of the pairs (9 distinct
    # Placement queries), and in 29 requests its weighers tell nodes apart.
    assert (accepted_total, ordered, len(offered)) == (251, 29, 9)
    assert disagreements == []
    assert misordered == []
