# SPDX-License-Identifier: Apache-2.0
"""Image properties reach Nova's filters as Nova's ``ImageMeta``, checked by Nova's rules.

A build's image (or its flavor's default image) may carry Glance-style
properties; they are refused where Nova's ``ImageMetaProps`` refuses them
(the error names the property), stored as given, shown to Nova's filters as
``spec_obj.image.properties`` (``ImagePropertiesFilter`` then places an
``hw_architecture=aarch64`` image on aarch64 nodes only) and never sent to
the agent that deploys the image.
"""

from __future__ import annotations

import random
import uuid as uuidlib
import warnings
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from conductor.common.exception import InvalidInput, NoValidNode
from conductor.common.objects import Flavor, Instance, Node
from conductor.db import instances
from conductor.db.models import NodeModel
from conductor.lifecycle.routing import deploy_spec
from conductor.scheduler.decide import Chooser
from conductor.scheduler.index import NodeIndex
from conductor.scheduler.plugins import load_filters
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.scheduler import Scheduler
from conductor.scheduler.weighers import SpreadWeigher
from conductor.validation import validate_build_request, validate_flavor_spec
from tests.dbutil import add_nodes, migrated

IMAGE_FILTER = "nova.scheduler.filters.image_props_filter.ImagePropertiesFilter"
OWNERS = ("agent-1", "agent-2")
SOURCE = {"source": "https://images.example/os.qcow2", "checksum": "a" * 32}


def image(**properties: str) -> dict[str, Any]:
    return {**SOURCE, "disk_format": "qcow2", "properties": properties}


def refusal(spec: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidInput) as excinfo:
        validate_build_request(spec)
    return {e.field: e.reason for e in excinfo.value.errors}


def make_node(i: int, arch: str) -> Node:
    return Node(
        uuid=str(uuidlib.UUID(int=i + 1)),
        name=f"node-{i}",
        resource_class="gold",
        properties={"cpu_arch": arch},
        owner=OWNERS[i % 2],
        owner_epoch=1,
    )


def image_filter_chooser() -> Chooser:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        filters = load_filters([IMAGE_FILTER])
    return Chooser(filters, [SpreadWeigher()], random.Random(1))


def request_for(built_image: dict[str, Any] | None) -> RequestSpec:
    return RequestSpec.build(
        Flavor(name="gold", resource_class="gold"),
        "inst-1",
        live_members=frozenset(OWNERS),
        image=built_image,
    )


# -- validation ------------------------------------------------------------------------


def test_properties_nova_accepts_are_stored_as_given() -> None:
    properties = {
        "hw_architecture": "aarch64",
        "img_hv_type": "qemu",
        "hw_vm_mode": "hvm",
        "img_hv_requested_version": ">=1",
        "architecture": "x86_64",  # Nova's legacy name
        "os_distro": "debian",
        "mycompany_tier": "gold",  # unknown to Nova: kept, as Glance keeps it
    }
    request = validate_build_request({"flavor": "gold", "image": image(**properties)})
    assert request.image is not None and request.image["properties"] == properties
    # None or empty: no properties at all.
    empty = validate_build_request({"flavor": "gold", "image": {**SOURCE, "properties": {}}})
    assert empty.image is not None and "properties" not in empty.image


@pytest.mark.parametrize(
    ("properties", "field", "said"),
    [
        ({"hw_architecture": "armish"}, "hw_architecture", "Architecture name 'armish'"),
        ({"architecture": "nope"}, "architecture", "Architecture name 'nope'"),
        ({"img_hv_type": "vmwareX"}, "img_hv_type", "Hypervisor virt type"),
        ({"hw_vm_mode": "zz"}, "hw_vm_mode", "Virtual machine mode 'zz'"),
        ({"hw_cpu_cores": "many"}, "hw_cpu_cores", "invalid literal for int()"),
        ({"hw_architecture": 64}, "hw_architecture", "must be a string"),
        ({"trait:CUSTOM_X": "required"}, "trait:CUSTOM_X", "trait:CUSTOM_X=required"),
    ],
)
def test_a_bad_property_is_refused_naming_it(
    properties: dict[str, Any], field: str, said: str
) -> None:
    errors = refusal({"flavor": "gold", "image": image(**properties)})
    assert list(errors) == [f"image.properties.{field}"]
    assert said in errors[f"image.properties.{field}"]


def test_properties_must_be_an_object_of_strings() -> None:
    errors = refusal({"flavor": "gold", "image": {**SOURCE, "properties": ["hw_architecture"]}})
    assert list(errors) == ["image.properties"]
    too_many = {f"p{i}": "x" for i in range(129)}
    assert list(refusal({"flavor": "gold", "image": image(**too_many)})) == ["image.properties"]


def test_a_flavors_default_image_is_checked_alike() -> None:
    spec = {
        "name": "arm",
        "resource_class": "gold",
        "default_image": image(hw_vm_mode="zz", hw_architecture="aarch64"),
    }
    with pytest.raises(InvalidInput) as excinfo:
        validate_flavor_spec(spec)
    assert [e.field for e in excinfo.value.errors] == ["default_image.properties.hw_vm_mode"]
    spec["default_image"] = image(hw_architecture="aarch64")
    assert validate_flavor_spec(spec).default_image == image(hw_architecture="aarch64")


# -- Nova's ImagePropertiesFilter ------------------------------------------------------


def test_an_aarch64_image_goes_to_aarch64_nodes_only() -> None:
    x86 = [make_node(i, "x86_64") for i in range(6)]
    arm = [make_node(i, "aarch64") for i in range(6, 10)]
    index = NodeIndex()
    for node in x86:
        index.put(node)
    chooser = image_filter_chooser()
    aarch64 = request_for(image(hw_architecture="aarch64"))
    assert chooser.choose(index, aarch64) is None
    removed = dict(chooser.explain(index, aarch64).removed)
    assert removed[IMAGE_FILTER] == 6
    # The same flavor without properties, or for x86_64, fits (verdicts are
    # cached per profile and image properties, not per flavor alone).
    assert chooser.choose(index, request_for(image())) is not None
    assert chooser.choose(index, request_for(image(hw_architecture="x86_64"))) in x86
    assert chooser.choose(index, request_for(None)) is not None
    for node in arm:
        index.put(node)
    for _ in range(10):
        assert chooser.choose(index, aarch64) in arm
    # Nova's other image rules: a hypervisor type ironic nodes do not have.
    qemu = request_for(image(img_hv_type="qemu"))
    assert chooser.choose(index, qemu) is None
    assert chooser.choose(index, request_for(image(img_hv_type="baremetal"))) is not None
    # The hypervisor version (1, Ironic's API) counts with another image property.
    versioned = {"hw_architecture": "aarch64", "img_hv_requested_version": ">=2"}
    assert chooser.choose(index, request_for(image(**versioned))) is None
    versioned["img_hv_requested_version"] = ">=1"
    assert chooser.choose(index, request_for(image(**versioned))) in arm


def test_a_stored_build_with_an_aarch64_image_is_allocated_an_aarch64_node(
    tmp_path: Path,
) -> None:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    try:
        x86 = add_nodes(db, 4, owner="agent-1", resource_class="gold")
        arm = add_nodes(db, 2, owner="agent-1", resource_class="gold", prefix="arm")
        with db.transaction() as session:
            for uuids, arch in ((x86, "x86_64"), (arm, "aarch64")):
                session.execute(
                    update(NodeModel)
                    .where(NodeModel.uuid.in_(uuids))
                    .values(properties={"cpu_arch": arch})
                )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scheduler = Scheduler(db, filters=load_filters([IMAGE_FILTER]), refresh_interval=0)
        flavor = Flavor(name="gold", resource_class="gold")
        placed = []
        for _ in range(3):
            [stored], _ = instances.create_instances(
                db,
                validate_build_request(
                    {"flavor": "gold", "image": image(hw_architecture="aarch64")}
                ),
            )
            assert stored.image is not None
            try:
                node, _claim = scheduler.select_and_allocate(
                    flavor, stored.uuid, live_members={"agent-1"}, image=stored.image
                )
            except NoValidNode as exc:
                placed.append(str(exc))
            else:
                placed.append(node.uuid)
        assert set(placed[:2]) == set(arm)
        assert "ImagePropertiesFilter removed 4" in placed[2]
    finally:
        db.dispose()


def test_the_agent_gets_the_image_without_its_properties() -> None:
    built = image(hw_architecture="aarch64")
    instance = Instance(uuid="i", name="i", flavor="gold", image=built)
    sent = deploy_spec(instance)["image"]
    assert sent == {**SOURCE, "disk_format": "qcow2"}
    assert all(isinstance(v, str) for v in sent.values())
