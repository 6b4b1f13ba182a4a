# SPDX-License-Identifier: Apache-2.0
"""The table of differences from Nova (docs/operations.rst, "What the filters are given") is true.

Each row of the table names what a Nova filter or weigher sees differently
on ringfleet; :data:`ROWS` maps each row to the test here that exercises
it (the host state and request views, and Nova's own classes acting on
them), and :func:`test_every_row_of_the_table_is_exercised` reads the
table from the documentation, so that a row added there without a test,
or a test left for a row removed, fails.
"""

from __future__ import annotations

import datetime
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docutils.core
import docutils.nodes
import pytest

from conductor.common.exception import InvalidInput
from conductor.common.objects import Flavor, Node
from conductor.db.engine import Database
from conductor.scheduler import nova
from conductor.scheduler.decide import Chooser
from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.index import NodeIndex
from conductor.scheduler.plugins import load_filters
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import SpreadWeigher
from conductor.validation.deploy import check_image
from conductor.validation.fields import Errors
from tests.allocation_cases import nodes_count_failed_builds_until_a_success
from tests.dbutil import migrated

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.rst"
OWNER, OTHER = "agent-1", "agent-2"
IMAGE = {"source": "https://images.example/a.qcow2", "checksum": "0" * 32, "disk_format": "raw"}


def make_node(i: int = 0, **fields: Any) -> Node:
    values: dict[str, Any] = {
        "uuid": f"00000000-0000-4000-8000-{i:012d}",
        "name": f"node-{i}",
        "resource_class": "baremetal",
        "properties": {"cpu_arch": "x86_64", "capabilities": "boot_mode:uefi"},
        "capabilities": {"boot_mode": "uefi"},
        "owner": OWNER,
        "owner_epoch": 1,
    }
    values.update(fields)
    return Node(**values)


def make_request(
    flavor: Flavor | None = None,
    *,
    hints: dict[str, Any] | None = None,
    host_ips: dict[str, str] | None = None,
    image: dict[str, Any] | None = None,
    live: frozenset[str] = frozenset({OWNER}),
) -> RequestSpec:
    return RequestSpec.build(
        flavor or Flavor(name="bm", resource_class="baremetal"),
        "inst-1",
        live_members=live,
        scheduler_hints=hints or {},
        host_ips=host_ips or {},
        image=image,
    )


def nova_filter(name: str) -> BaseFilter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Nova's own deprecations, on import
        (loaded,) = load_filters([name])
    return loaded


def views(node: Node, host_ip: str | None = None) -> dict[str, nova.HostState]:
    """The node's host state as a Nova filter sees it, per view."""
    return {
        "node": nova.HostState(node, per_node=True, host_ip=host_ip),
        "owner": nova.HostState(node, per_node=False, per_owner=True, host_ip=host_ip),
        "profile": nova.HostState(node, per_node=False),
    }


# -- host_state ------------------------------------------------------------------------


def test_host_is_the_owning_agent() -> None:
    node = make_node(owner=OWNER)
    assert views(node)["node"].host == views(node)["owner"].host == OWNER


def test_service_is_up_and_only_live_owners_nodes_reach_the_filters() -> None:
    state = views(make_node())["node"]
    assert state.service["disabled"] is False and state.service["forced_down"] is False
    seen = datetime.datetime.now(datetime.UTC).replace(tzinfo=None) - state.service["last_seen_up"]
    assert seen < datetime.timedelta(minutes=1)
    with pytest.raises(TypeError):
        state.service["disabled"] = True  # read-only, as Nova's
    compute = nova_filter("ComputeFilter")
    assert compute.filter(make_node(), make_request())  # Nova's ComputeFilter: up

    reached: list[str | None] = []

    class Recording(BaseFilter):
        def filter(self, node: Node, request: RequestSpec) -> bool:
            reached.append(node.owner)
            return False

    index = NodeIndex()
    for i in range(6):
        index.put(make_node(i, owner=OWNER if i % 2 else OTHER))
    chooser = Chooser([Recording()], [SpreadWeigher()], random.Random(0))
    assert chooser.choose(index, make_request(live=frozenset({OWNER}))) is None
    assert reached and set(reached) == {OWNER}


def test_host_ip_is_the_owners_announced_address_or_none() -> None:
    node = make_node()
    assert views(node, "10.0.0.5")["node"].host_ip == "10.0.0.5"
    assert views(node, "10.0.0.5")["owner"].host_ip == "10.0.0.5"
    assert views(node)["node"].host_ip is None
    cidr = nova_filter("SimpleCIDRAffinityFilter")
    hints = {"build_near_host_ip": "10.0.0.1", "cidr": "/24"}
    assert cidr.per_owner
    assert cidr.filter(node, make_request(hints=hints, host_ips={OWNER: "10.0.0.5"}))
    assert not cidr.filter(node, make_request(hints=hints, host_ips={OWNER: "10.9.0.5"}))
    # An agent announcing no address: Nova's filter fails its nodes.
    assert not cidr.filter(node, make_request(hints=hints))


def test_failed_builds_are_the_nodes_count_not_in_stats(tmp_path: Path) -> None:
    node = make_node(failed_builds=3)
    by_view = views(node)
    assert by_view["node"].failed_builds == 3
    assert by_view["owner"].failed_builds is None and by_view["profile"].failed_builds is None
    assert "failed_builds" not in by_view["node"].stats
    # Counted as Nova's compute counts them: one more per failed attempt, 0 at a success.
    db: Database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        nodes_count_failed_builds_until_a_success(db)
    finally:
        db.dispose()


def test_aggregates_are_empty() -> None:
    node = make_node()
    assert all(state.aggregates == [] for state in views(node).values())
    # So Nova's AggregateInstanceExtraSpecsFilter finds no aggregate with the key.
    scoped = Flavor(
        name="bm",
        resource_class="baremetal",
        extra_specs={"aggregate_instance_extra_specs:rack": "r1"},
    )
    aggregate_filter = nova_filter("AggregateInstanceExtraSpecsFilter")
    assert not aggregate_filter.filter(node, make_request(scoped))
    assert aggregate_filter.filter(node, make_request())


def test_ringfleet_attributes_are_prefixed_so_capabilities_of_those_names_are_read() -> None:
    node = make_node(
        resource_class="silver",
        group="g2",
        traits=frozenset({"CUSTOM_X"}),
        properties={"capabilities": "resource_class:gold,group:g1,traits:t,name:n"},
        capabilities={"resource_class": "gold", "group": "g1", "traits": "t", "name": "n"},
    )
    state = views(node)["node"]
    assert (state.ringfleet_resource_class, state.ringfleet_group) == ("silver", "g2")
    assert state.ringfleet_traits == frozenset({"CUSTOM_X"}) and state.ringfleet_name == "node-0"
    assert not any(hasattr(state, name) for name in ("resource_class", "group", "traits", "name"))
    specs = {
        "capabilities:resource_class": "s== gold",
        "capabilities:group": "s== g1",
        "capabilities:traits": "s== t",
        "capabilities:name": "s== n",
    }
    flavor = Flavor(name="bm", resource_class="silver", extra_specs=specs)
    capabilities = nova_filter("ComputeCapabilitiesFilter")
    assert capabilities.filter(node, make_request(flavor))  # from stats, as in Nova
    wrong = Flavor(name="bm", resource_class="silver", extra_specs={"capabilities:group": "g2"})
    assert not capabilities.filter(node, make_request(wrong))


def test_a_profile_view_has_no_identity() -> None:
    node = make_node(failed_builds=2)
    profile = views(node, "10.0.0.5")["profile"]
    for name in (
        "host",
        "host_ip",
        "nodename",
        "hypervisor_hostname",
        "uuid",
        "ringfleet_name",
        "failed_builds",
    ):
        assert getattr(profile, name) is None, name
    node_view = views(node, "10.0.0.5")["node"]
    assert node_view.nodename == node_view.uuid == node_view.hypervisor_hostname == node.uuid


# -- spec_obj ----------------------------------------------------------------------------


def test_flavor_sizes_are_zero() -> None:
    spec = nova.NovaRequestSpec(make_request())
    sizes = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap")
    assert [getattr(spec, name) for name in sizes] == [0] * 5
    assert [getattr(spec.flavor, name) for name in sizes] == [0] * 5
    # Nova's ironic host state has no sizes either: its size filters are gone
    # (RamFilter, DiskFilter); NUMATopologyFilter passes a request without topology.
    assert nova_filter("NUMATopologyFilter").filter(make_node(), make_request())


def test_image_is_the_builds_disk_format_and_properties_only() -> None:
    errors = Errors()
    image = check_image({**IMAGE, "properties": {"hw_architecture": "aarch64"}}, "image", errors)
    errors.raise_if_any()
    spec = nova.NovaRequestSpec(make_request(image=image))
    assert spec.image.disk_format == "raw"
    assert spec.image.properties.hw_architecture == "aarch64"
    for name in ("id", "name", "checksum"):
        assert not spec.image.obj_attr_is_set(name)
        with pytest.raises(AttributeError):
            getattr(spec.image, name)
    bare = nova.NovaRequestSpec(make_request())
    assert not bare.image.obj_attr_is_set("disk_format")
    assert bare.image.properties.to_dict() == {}
    image_filter = nova_filter("ImagePropertiesFilter")
    assert not image_filter.filter(make_node(), make_request(image=image))  # x86_64 node
    # Image traits are refused: a flavor's trait: extra specs apply.
    errors = Errors()
    check_image({**IMAGE, "properties": {"trait:CUSTOM_X": "required"}}, "image", errors)
    with pytest.raises(InvalidInput) as refused:
        errors.raise_if_any()
    assert "image.properties.trait:CUSTOM_X" in str(refused.value)


def test_user_id_is_none() -> None:
    assert nova.NovaRequestSpec(make_request()).user_id is None


def test_instance_group_is_none() -> None:
    request = make_request()
    assert nova.NovaRequestSpec(request).instance_group is None
    for name in ("ServerGroupAffinityFilter", "ServerGroupAntiAffinityFilter"):
        assert nova_filter(name).filter(make_node(), request)


def test_num_instances_is_one() -> None:
    assert nova.NovaRequestSpec(make_request()).num_instances == 1


#: the table's rows (their first cell, as rendered) -> the test exercising each
ROWS: dict[str, Callable[..., None]] = {
    "host_state.host": test_host_is_the_owning_agent,
    "host_state.service": test_service_is_up_and_only_live_owners_nodes_reach_the_filters,
    "host_state.host_ip": test_host_ip_is_the_owners_announced_address_or_none,
    "host_state.failed_builds": test_failed_builds_are_the_nodes_count_not_in_stats,
    "host_state.aggregates": test_aggregates_are_empty,
    "ringfleet_resource_class, ringfleet_traits, ringfleet_group, ringfleet_name": (
        test_ringfleet_attributes_are_prefixed_so_capabilities_of_those_names_are_read
    ),
    "profile view: host, host_ip, nodename, hypervisor_hostname, uuid, ringfleet_name, "
    "failed_builds": test_a_profile_view_has_no_identity,
    "spec_obj.flavor sizes": test_flavor_sizes_are_zero,
    "spec_obj.image": test_image_is_the_builds_disk_format_and_properties_only,
    "spec_obj.user_id": test_user_id_is_none,
    "spec_obj.instance_group": test_instance_group_is_none,
    "spec_obj.num_instances": test_num_instances_is_one,
}


def _table_rows() -> list[str]:
    """The first cells of the documentation's table of differences."""
    doctree = docutils.core.publish_doctree(
        DOC.read_text(), settings_overrides={"report_level": 5, "halt_level": 5}
    )
    for table in doctree.findall(docutils.nodes.table):
        rows = [
            [" ".join(entry.astext().split()) for entry in row.findall(docutils.nodes.entry)]
            for row in table.findall(docutils.nodes.row)
        ]
        if rows and rows[0][:2] == ["Attribute", "Nova (ironic driver)"]:
            return [row[0] for row in rows[1:]]
    raise AssertionError("no table of differences from Nova in docs/operations.rst")


def test_every_row_of_the_table_is_exercised() -> None:
    rows = _table_rows()
    assert len(rows) == len(set(rows))
    assert set(rows) == set(ROWS)
