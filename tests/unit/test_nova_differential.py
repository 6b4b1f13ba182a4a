# SPDX-License-Identifier: Apache-2.0
"""Per Nova class: ringfleet's verdicts and weights equal Nova's own on Nova's ironic host state.

For each of Nova's in-tree filters (``all_filters()``) and weighers
(``all_weighers()``), a corpus of nodes and requests is given to the class
twice: through ringfleet's wrapper (:mod:`conductor.scheduler.nova`), and
directly, on the ``HostState`` Nova's scheduler builds
(``nova.scheduler.host_manager.HostState`` updated from the ``ComputeNode``
Nova's resource tracker makes of what ``IronicDriver._node_resource``
reports) with a real ``RequestSpec``.  Nova's test fakes are not used: its
own code builds both.
"""

from __future__ import annotations

import ast
import datetime
import inspect
import itertools
import textwrap
import types
import uuid as uuidlib
import warnings
from typing import Any

import pytest

from conductor.common.objects import Flavor, Node
from conductor.scheduler import nova
from conductor.scheduler.plugins import load_filters, load_weighers
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import WeighingContext, total_weights

with warnings.catch_warnings():
    # Nova's objects and policies warn about their own deprecations on import.
    warnings.simplefilter("ignore")
    from nova import objects as nova_objects
    from nova.scheduler import filters as nova_filters
    from nova.scheduler import host_manager
    from nova.scheduler import weights as nova_weights
    from nova.virt.ironic import driver as ironic_driver

    nova_objects.register_all()
    FILTER_CLASSES = nova_filters.all_filters()
    WEIGHER_CLASSES = nova_weights.all_weighers()

OWNER = "agent-1"
#: the owner's [DEFAULT] my_ip, as it announces it (Nova: the compute node's host_ip)
HOST_IP = "192.0.2.10"
NODE_PROPERTIES: list[dict[str, Any]] = [
    {},
    {"cpus": 8, "memory_mb": 4096, "local_gb": 100, "cpu_arch": "x86_64"},
    {"cpu_arch": "aarch64", "capabilities": "boot_mode:uefi,rack:r1"},
    {"cpu_arch": "AMD64", "capabilities": "boot_mode: bios, rack :r2"},
    {"cpu_arch": "sparc-ish", "capabilities": "boot_mode:uefi,bad:a:b,,x:"},
    {"cpu_arch": "i386", "capabilities": "cpu_vt:true,memory_mb:2048"},
    # Capabilities named like attributes of ringfleet's nodes, not of Nova's host state.
    {"capabilities": "resource_class:gold,group:g1,traits:t,name:n"},
]
EXTRA_SPECS: list[dict[str, str]] = [
    {},
    {"capabilities:boot_mode": "uefi"},
    {"capabilities:boot_mode": "s== bios"},
    {"boot_mode": "uefi"},
    {"cpu_arch": "x86_64"},
    {"capabilities:cpu_arch": "<in> aarch"},
    {"capabilities:memory_mb": ">= 1024"},
    {"hypervisor_type": "s== ironic"},
    {"mycompany:racks": "r1"},
    {"capabilities:resource_class": "s== gold", "capabilities:group": "g1"},
]
HINTS: list[dict[str, Any]] = [
    {},
    {"query": '[">=", "$free_ram_mb", 0]'},
    {"query": '["=", "$hypervisor_type", "ironic"]'},
    {"different_host": str(uuidlib.UUID(int=99))},
    {"same_host": str(uuidlib.UUID(int=99))},
    {"build_near_host_ip": "192.0.2.1"},
    {"build_near_host_ip": "198.51.100.7", "cidr": "/16"},
]


#: each node's failed builds (Nova's compute node stat), by position
FAILED_BUILDS = [0, 2, 0, 1, 0, 5, 2]


def make_node(i: int, properties: dict[str, Any], failed_builds: int = 0) -> Node:
    return Node(
        uuid=str(uuidlib.UUID(int=i + 1)),
        name=f"node-{i}",
        resource_class="baremetal",
        properties=properties,
        owner=OWNER,
        owner_epoch=1,
        failed_builds=failed_builds,
    )


NODES = [make_node(i, properties, FAILED_BUILDS[i]) for i, properties in enumerate(NODE_PROPERTIES)]
IMAGE = {"source": "https://images.example/a.qcow2", "checksum": "0" * 32, "disk_format": "qcow2"}
# Each dimension varied against the others' defaults; then a build with an
# image and a project.
Context = tuple[str | None, dict[str, Any] | None]  # project id, the build's image
NO_CONTEXT: Context = (None, None)
REQUESTS: list[tuple[dict[str, str], dict[str, Any], Context]] = [
    (specs, hints, NO_CONTEXT)
    for specs, hints in itertools.product(EXTRA_SPECS, HINTS)
    if not specs or not hints
] + [({}, {}, ("project-a", IMAGE)), ({"capabilities:boot_mode": "uefi"}, {}, ("p", None))]
# Images with properties (Nova's ImageMetaProps), which ImagePropertiesFilter reads.
IMAGE_PROPERTIES: list[dict[str, str]] = [
    {"hw_architecture": "aarch64"},
    {"hw_architecture": "x86_64", "hw_vm_mode": "hvm"},
    {"img_hv_type": "qemu"},
    {"img_hv_type": "baremetal", "hw_vm_mode": "xen"},
    {"architecture": "i686", "img_hv_requested_version": ">=1"},
    {"hw_architecture": "aarch64", "img_hv_requested_version": ">=2"},
    {"os_distro": "debian"},
]
REQUESTS += [({}, {}, (None, {**IMAGE, "properties": p})) for p in IMAGE_PROPERTIES]


def nova_host_state(node: Node) -> Any:
    """Nova's HostState of *node*, built by Nova's ironic driver and host manager code."""
    driver = ironic_driver.IronicDriver.__new__(ironic_driver.IronicDriver)
    ironic_node = types.SimpleNamespace(
        id=node.uuid, properties=dict(node.properties), resource_class=node.resource_class
    )
    resources = driver._node_resource(ironic_node)
    compute = nova_objects.ComputeNode(host=OWNER, host_ip=HOST_IP, metrics="[]")
    compute.update_from_virt_driver(resources)
    compute.stats = dict(resources["stats"])  # the tracker digests the driver's stats
    if node.failed_builds:
        # What the tracker's Stats.build_failed left there, once per failure.
        compute.stats["failed_builds"] = node.failed_builds
    # What the resource tracker adds for a node hosting no instance.
    compute.free_ram_mb = compute.memory_mb - compute.memory_mb_used
    compute.free_disk_gb = compute.local_gb - compute.local_gb_used
    compute.current_workload = compute.running_vms = 0
    compute.cpu_allocation_ratio, compute.ram_allocation_ratio = 4.0, 1.0
    compute.disk_allocation_ratio = 1.0
    compute.pci_device_pools = nova_objects.PciDevicePoolList(objects=[])
    compute.updated_at = None
    state = host_manager.HostState(OWNER, node.uuid, None)
    now = datetime.datetime.now(datetime.UTC)
    service = {
        "host": OWNER,
        "binary": "nova-compute",
        "disabled": False,
        "disabled_reason": None,
        "forced_down": False,
        "last_seen_up": now,
        "created_at": now,
    }
    state.update(compute=compute, service=service, aggregates=[], inst_dict={})
    return state


def nova_request(
    extra_specs: dict[str, str], hints: dict[str, Any], context: Context = NO_CONTEXT
) -> Any:
    project_id, image = context
    image_meta = {} if image is None else {k: image[k] for k in ("checksum", "disk_format")}
    if image is not None and "properties" in image:
        image_meta["properties"] = dict(image["properties"])
    # (Nova's holds the checksum too; no in-tree class reads it.)
    flavor = nova_objects.Flavor(
        name="bm",
        flavorid="bm",
        vcpus=0,
        memory_mb=0,
        root_gb=0,
        ephemeral_gb=0,
        swap=0,
        is_public=True,
        disabled=False,
        extra_specs=dict(extra_specs),
    )
    return nova_objects.RequestSpec(
        flavor=flavor,
        image=nova_objects.ImageMeta.from_dict(image_meta),
        scheduler_hints={name: [value] for name, value in hints.items()},
        instance_uuid=str(uuidlib.UUID(int=1000)),
        num_instances=1,
        pci_requests=nova_objects.InstancePCIRequests(requests=[]),
        numa_topology=None,
        instance_group=None,
        project_id=project_id,
        user_id=None,
        availability_zone=None,
        ignore_hosts=None,
        force_hosts=None,
        force_nodes=None,
        requested_destination=None,
        retry=None,
        is_bfv=False,
    )


def ringfleet_request(
    extra_specs: dict[str, str], hints: dict[str, Any], context: Context = NO_CONTEXT
) -> RequestSpec:
    flavor = Flavor(name="bm", resource_class="baremetal", extra_specs=dict(extra_specs))
    project_id, image = context
    return RequestSpec.build(
        flavor,
        str(uuidlib.UUID(int=1000)),
        live_members=frozenset({OWNER}),
        host_ips={OWNER: HOST_IP},
        scheduler_hints=hints,
        project_id=project_id,
        image=image,
    )


def path_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__name__}"


def nova_weights_of(
    classes: list[type],
    extra_specs: dict[str, str],
    hints: dict[str, Any],
    context: Context = NO_CONTEXT,
) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        states = [nova_host_state(node) for node in NODES]
        weighed = nova_weights.HostWeightHandler().get_weighed_objects(
            [cls() for cls in classes], states, nova_request(extra_specs, hints, context)
        )
    # Nova returns them sorted by weight: key them by node.
    return {w.obj.nodename: w.weight for w in weighed}


def test_the_corpus_covers_every_in_tree_filter_and_weigher() -> None:
    assert len(FILTER_CLASSES) >= 20
    assert len(WEIGHER_CLASSES) >= 12
    assert {c.__name__ for c in FILTER_CLASSES} >= {"ComputeFilter", "ImagePropertiesFilter"}


@pytest.mark.parametrize("cls", FILTER_CLASSES, ids=lambda cls: cls.__name__)
def test_filter_verdicts_equal_novas(cls: type) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (per_node,) = load_filters([path_of(cls)], per_node=[path_of(cls)])
        (per_profile,) = load_filters([path_of(cls)])
        theirs = cls()
    differences = []
    for node, (extra_specs, hints, context) in itertools.product(NODES, REQUESTS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            state, spec = nova_host_state(node), nova_request(extra_specs, hints, context)
            expected = bool(theirs.host_passes(state, spec))
        request = ringfleet_request(extra_specs, hints, context)
        got = (per_node.filter(node, request), per_profile.filter(node, request))
        if got != (expected, expected):
            differences.append((node.properties, extra_specs, hints, expected, got))
    assert differences == []
    assert per_node.failures.count == per_profile.failures.count == 0


@pytest.mark.parametrize("cls", WEIGHER_CLASSES, ids=lambda cls: cls.__name__)
def test_weights_equal_novas(cls: type) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (ours,) = load_weighers([path_of(cls)])
    for extra_specs, hints, context in REQUESTS:
        expected = nova_weights_of([cls], extra_specs, hints, context)
        request = ringfleet_request(extra_specs, hints, context)
        got = total_weights([ours], NODES, request, WeighingContext({}))
        assert dict(zip((n.uuid for n in NODES), got, strict=True)) == pytest.approx(expected)
        # The raw weights (before normalization), which the scheduler leaves
        # out of its totals (per_request): Nova weighs free nodes alike.
        raw = cls().weigh_objects(
            [nova_weights.WeighedHost(nova_host_state(node), 0.0) for node in NODES],
            nova_request(extra_specs, hints, context),
        )
        assert [ours.weigh(node, request, WeighingContext({})) for node in NODES] == raw
        if cls.__name__ == "BuildFailureWeigher":
            # Weighed per owner and count of failed builds: they differ.
            assert raw == [float(n) for n in FAILED_BUILDS]
            assert ours.per_owner and ours.reads_failed_builds and not ours.per_request
        else:
            assert ours.per_owner and ours.per_request and len(set(raw)) == 1
            assert not ours.reads_failed_builds
    assert ours.failures.count == 0


class _Recording:
    """A host state that records which of its attributes are read."""

    def __init__(self, state: nova.HostState, read: set[str]) -> None:
        self._state, self._read = state, read

    def __getattr__(self, name: str) -> Any:
        self._read.add(name)
        return getattr(self._state, name)


def _host_state_reads(cls: type) -> set[str]:
    """``host_state.X`` read in the weigher's own methods and its Nova bases', outside ``raise``.

    (An attribute read only to name the host in an exception changes no
    weight: every failure weighs 0.)
    """
    read: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("nova.scheduler.weights"):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        raised = {
            id(node)
            for raise_ in ast.walk(tree)
            if isinstance(raise_, ast.Raise)
            for node in ast.walk(raise_)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "host_state"
                and id(node) not in raised
            ):
                read.add(node.attr)
    return read


def test_host_state_attributes_other_than_per_node_are_alike_on_every_node() -> None:
    owners = ["agent-1", "agent-2", None]
    states = [
        nova.HostState(make_node(i, properties), per_node=True)
        for i, properties in enumerate(NODE_PROPERTIES)
    ]
    for i, state in enumerate(states):
        state.host = owners[i % len(owners)]
    shared = set(nova.HostState.__slots__) - nova.HostState.PER_NODE
    assert shared >= {"free_ram_mb", "metrics", "pci_stats", "instances", "hypervisor_version"}
    for name in sorted(shared):
        assert all(getattr(s, name) == getattr(states[0], name) for s in states), name
    # ... and do differ where PER_NODE says they may.
    assert len({str(s.stats) for s in states}) > 1


@pytest.mark.parametrize("cls", WEIGHER_CLASSES, ids=lambda cls: cls.__name__)
def test_in_tree_weighers_read_no_per_node_attribute(cls: type) -> None:
    """Why Nova's weighers are per_request: they read nothing that differs between
    nodes, but for BuildFailureWeigher, which reads only the failed builds."""
    if cls.__name__ == "BuildFailureWeigher":
        assert _host_state_reads(cls) & nova.HostState.PER_NODE == {"failed_builds"}
        return
    assert not _host_state_reads(cls) & nova.HostState.PER_NODE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (ours,) = load_weighers([path_of(cls)])
    read: set[str] = set()
    for node, (extra_specs, hints, context) in itertools.product(NODES, REQUESTS):
        spec = nova.NovaRequestSpec(ringfleet_request(extra_specs, hints, context))
        state = _Recording(nova.HostState(node, per_node=True), read)
        ours.nova_weigher._weigh_object(state, spec)
    assert not read & nova.HostState.PER_NODE
    assert ours.per_request


def test_default_weigher_list_totals_equal_novas() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = load_weighers([nova.ALL_WEIGHERS])
    assert [w.name for w in ours] == [path_of(cls) for cls in WEIGHER_CLASSES]
    expected = nova_weights_of(WEIGHER_CLASSES, {}, {})
    got = total_weights(ours, NODES, ringfleet_request({}, {}), WeighingContext({}))
    assert dict(zip((n.uuid for n in NODES), got, strict=True)) == pytest.approx(expected)
