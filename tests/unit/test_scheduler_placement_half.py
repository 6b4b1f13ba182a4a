# SPDX-License-Identifier: Apache-2.0
"""Placement's half of Nova's scheduling, applied by the scheduler whatever the filters say.

Resource classes in every spelling Nova normalizes alike, a flavor's
``resources:CUSTOM_<X>=1``, its traits, and the nodes Placement would not
offer; with no configured filter at all, and with ``TraitsFilter`` listed
(which changes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from conductor.common.exception import NoValidNode
from conductor.common.objects import Flavor
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from conductor.scheduler import plugins
from conductor.scheduler.filters import ALWAYS_APPLIED, CapabilitiesFilter, TraitsFilter
from tests.dbutil import migrated
from tests.unit.test_scheduler import insert_nodes, new_instances, scheduler

LIVE = {"agent-1"}


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def placed(db: Database, flavor: Flavor, count: int, **kwargs: object) -> set[str]:
    sched = scheduler(db, **kwargs)
    return {
        sched.select_and_allocate(flavor, instance, live_members=LIVE)[0].uuid
        for instance in new_instances(db, count)
    }


def test_resource_class_in_every_spelling_nova_normalizes_alike(db: Database) -> None:
    gold = [
        *insert_nodes(db, 1, resource_class="baremetal-gold"),
        *insert_nodes(db, 1, resource_class="baremetal.gold"),
        *insert_nodes(db, 1, resource_class="BAREMETAL_GOLD"),
    ]
    insert_nodes(db, 3, resource_class="baremetal-silver")
    insert_nodes(db, 2, resource_class="CUSTOM_BAREMETAL_GOLD")  # CUSTOM_CUSTOM_... in Nova
    flavor = Flavor(name="gold", resource_class="Baremetal.Gold")
    assert placed(db, flavor, 3, filters=[]) == set(gold)


def test_resources_spec_names_the_class_with_standard_ones_zeroed(db: Database) -> None:
    gold = insert_nodes(db, 2, resource_class="baremetal.gold")
    insert_nodes(db, 4, resource_class="baremetal-silver")
    # Stored before flavors were checked: the spec says gold, as Nova reads it.
    flavor = Flavor(
        name="gold",
        resource_class="baremetal-silver",
        extra_specs={
            "resources:CUSTOM_BAREMETAL_GOLD": "1",
            "resources:VCPU": "0",
            "resources:MEMORY_MB": "0",
            "resources:DISK_GB": "0",
        },
    )
    assert placed(db, flavor, 2, filters=[]) == set(gold)
    with pytest.raises(NoValidNode) as excinfo:
        placed(db, flavor, 1, filters=[])
    assert ("ResourceClassFilter", 4) in excinfo.value.removed


def test_a_request_no_node_offers_is_no_valid_node(db: Database) -> None:
    insert_nodes(db, 3, resource_class="gold")
    flavor = Flavor(name="big", resource_class="gold", extra_specs={"resources:VCPU": "8"})
    with pytest.raises(NoValidNode) as excinfo:
        placed(db, flavor, 1)
    assert excinfo.value.removed[0] == ("ResourceClassFilter", 3)


@pytest.mark.parametrize("listed", [[], ["TraitsFilter"], ["TraitsFilter", "CapabilitiesFilter"]])
def test_traits_apply_whatever_the_filters(db: Database, listed: list[str]) -> None:
    good = insert_nodes(db, 2, traits=["CUSTOM_X", "HW_GPU"])
    insert_nodes(db, 2, traits=["HW_GPU"])  # lacks the required trait
    insert_nodes(db, 2, traits=["CUSTOM_X", "HW_GPU", "CUSTOM_BAD"])  # has a forbidden one
    flavor = Flavor(
        name="x",
        resource_class="gold",
        required_traits=frozenset({"CUSTOM_X"}),
        forbidden_traits=frozenset({"CUSTOM_BAD"}),
    )
    filters = plugins.load_filters(listed)
    assert placed(db, flavor, 2, filters=filters) == set(good)
    with pytest.raises(NoValidNode) as excinfo:
        placed(db, flavor, 1, filters=filters)
    names = [name for name, _ in excinfo.value.removed]
    assert names.count("TraitsFilter") == 1  # listed or not, applied once
    assert dict(excinfo.value.removed)["TraitsFilter"] == 4


def test_listing_traits_filter_changes_nothing(db: Database) -> None:
    sched = scheduler(db, filters=[TraitsFilter(), CapabilitiesFilter()])
    names = [f.name for f in sched.filters]
    assert names == [cls.name for cls in ALWAYS_APPLIED] + ["CapabilitiesFilter"]
    assert names.count("TraitsFilter") == 1


def test_nodes_placement_would_not_offer_are_never_chosen(db: Database) -> None:
    good = insert_nodes(db, 2)
    insert_nodes(db, 2, maintenance=True)
    insert_nodes(db, 2, provision_state="manageable")
    unknown_power = insert_nodes(db, 2)
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid.in_(unknown_power)).values(power_state=None)
        )
    flavor = Flavor(name="gold", resource_class="gold")
    assert placed(db, flavor, 2, filters=[]) == set(good)
    with pytest.raises(NoValidNode) as excinfo:
        placed(db, flavor, 1, filters=[])
    assert dict(excinfo.value.removed)["AvailabilityFilter"] == 8  # 2 now host an instance


def test_start_says_what_applies(db: Database, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    scheduler(db, filters=plugins.load_filters(["TraitsFilter", "CapabilitiesFilter"]))
    text = caplog.text
    assert "TraitsFilter, which is always applied" in text
    assert "listing it changes nothing" in text
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Scheduler:")]
    assert "Placement's half" in line
    assert "resources:CUSTOM_<X>=1" in line
    assert "filters: CapabilitiesFilter;" in line
    assert "weighers: FailedBuildsWeigher, SpreadWeigher" in line
