# SPDX-License-Identifier: Apache-2.0
"""What ringfleet relies on Placement to do, as cases run against a client.

``tests/unit/test_placement.py`` runs them on the in-memory fake
(``tests/fake_placement.py``), ``tests/functional/test_placement.py`` on a
real openstack-placement: a fake that drifted from the server fails one of
the two.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Callable

import pytest

from conductor.common.placement.client import (
    CONCURRENT_UPDATE,
    PlacementClient,
    PlacementConflict,
    PlacementRefused,
)

Case = Callable[[PlacementClient], None]


def _new(client: PlacementClient, rc: str = "CUSTOM_CONTRACT") -> str:
    uuid = str(uuid_lib.uuid4())
    created = client.create_provider(uuid, f"contract-{uuid}")
    client.set_inventories(
        uuid,
        int(created["generation"]),
        {rc: {"total": 1, "reserved": 0, "min_unit": 1, "max_unit": 1, "step_size": 1}},
    )
    return uuid


def _allocation(
    uuid: str, generation: int | None, rc: str = "CUSTOM_CONTRACT"
) -> dict[str, object]:
    return {
        "allocations": {uuid: {"resources": {rc: 1}}},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": generation,
        "consumer_type": "INSTANCE",
    }


def a_missing_provider_reads_as_none(client: PlacementClient) -> None:
    assert client.get_provider(str(uuid_lib.uuid4())) is None


def a_taken_uuid_or_name_is_a_conflict(client: PlacementClient) -> None:
    uuid = _new(client)
    with pytest.raises(PlacementConflict):
        client.create_provider(uuid, f"other-{uuid}")
    with pytest.raises(PlacementConflict) as taken:
        client.create_provider(str(uuid_lib.uuid4()), f"contract-{uuid}")
    assert taken.value.code != CONCURRENT_UPDATE


def a_stale_generation_is_a_concurrent_update(client: PlacementClient) -> None:
    uuid = _new(client)
    generation, _ = client.get_inventories(uuid)
    with pytest.raises(PlacementConflict) as stale:
        client.set_traits(uuid, generation - 1, ["CUSTOM_CONTRACT_T"])
    assert stale.value.code == CONCURRENT_UPDATE
    assert client.set_traits(uuid, generation, ["CUSTOM_CONTRACT_T"]) == generation + 1
    assert client.get_traits(uuid)[1] == {"CUSTOM_CONTRACT_T"}


def an_unknown_standard_trait_is_found_before_it_is_refused(client: PlacementClient) -> None:
    assert client.ensure_traits({"NOT_A_STANDARD_TRAIT", "CUSTOM_CONTRACT_OK"}) == {
        "NOT_A_STANDARD_TRAIT"
    }
    uuid = _new(client)
    generation, _ = client.get_traits(uuid)
    client.set_traits(uuid, generation, ["NOT_A_STANDARD_TRAIT", "CUSTOM_CONTRACT_OK"])
    assert client.get_traits(uuid)[1] == {"CUSTOM_CONTRACT_OK"}


def an_allocation_takes_the_one_unit_and_bumps_generations(client: PlacementClient) -> None:
    uuid = _new(client)
    before = client.get_provider(uuid)
    consumer = str(uuid_lib.uuid4())
    client.put_allocations({consumer: _allocation(uuid, None)})
    assert client.get_provider_allocations(uuid) == {consumer: {"CUSTOM_CONTRACT": 1}}
    assert before is not None
    after = client.get_provider(uuid)
    assert after is not None and after["generation"] > before["generation"]
    generation, allocations, rest = client.get_consumer(consumer)
    assert generation is not None and allocations == {uuid: {"CUSTOM_CONTRACT": 1}}
    assert rest["consumer_type"] == "INSTANCE"
    # Another consumer: no room; the same one with no generation: stale.
    with pytest.raises(PlacementConflict):
        client.put_allocations({str(uuid_lib.uuid4()): _allocation(uuid, None)})
    with pytest.raises(PlacementConflict) as stale:
        client.put_allocations({consumer: _allocation(uuid, None)})
    assert stale.value.code == CONCURRENT_UPDATE


def reserved_may_cover_a_unit_in_use(client: PlacementClient) -> None:
    """An inventory's capacity may drop below what is allocated (a node in
    use goes into maintenance); a new allocation then finds no room."""
    uuid = _new(client)
    consumer = str(uuid_lib.uuid4())
    client.put_allocations({consumer: _allocation(uuid, None)})
    generation, _ = client.get_inventories(uuid)
    reserved = {"CUSTOM_CONTRACT": {"total": 1, "reserved": 1, "min_unit": 1, "max_unit": 1}}
    client.set_inventories(uuid, generation, reserved)
    assert client.get_inventories(uuid)[1]["CUSTOM_CONTRACT"]["reserved"] == 1
    client.delete_allocations(consumer)
    with pytest.raises(PlacementConflict):
        client.put_allocations({str(uuid_lib.uuid4()): _allocation(uuid, None)})


def a_batch_is_all_or_nothing(client: PlacementClient) -> None:
    first, second = _new(client), _new(client)
    taken = str(uuid_lib.uuid4())
    client.put_allocations({taken: _allocation(second, None)})
    a, b = str(uuid_lib.uuid4()), str(uuid_lib.uuid4())
    with pytest.raises(PlacementConflict):
        client.put_allocations({a: _allocation(first, None), b: _allocation(second, None)})
    assert client.get_provider_allocations(first) == {}


def a_provider_with_allocations_is_not_deleted(client: PlacementClient) -> None:
    uuid = _new(client)
    consumer = str(uuid_lib.uuid4())
    client.put_allocations({consumer: _allocation(uuid, None)})
    with pytest.raises(PlacementConflict):
        client.delete_provider(uuid)
    client.delete_allocations(consumer)
    client.delete_allocations(consumer)  # none left: fine
    client.delete_provider(uuid)
    assert client.get_provider(uuid) is None
    client.delete_provider(uuid)  # gone already: fine


def removing_a_class_in_use_is_refused(client: PlacementClient) -> None:
    uuid = _new(client)
    client.put_allocations({str(uuid_lib.uuid4()): _allocation(uuid, None)})
    generation, _ = client.get_inventories(uuid)
    other = {"CUSTOM_CONTRACT_OTHER": {"total": 1, "reserved": 0}}
    with pytest.raises(PlacementRefused):
        client.set_inventories(uuid, generation, other)


def aggregates_list_their_members(client: PlacementClient) -> None:
    uuid = _new(client)
    aggregate = str(uuid_lib.uuid4())
    generation, _ = client.get_aggregates(uuid)
    client.set_aggregates(uuid, generation, [aggregate])
    assert [p["uuid"] for p in client.list_providers(member_of=aggregate)] == [uuid]


CASES: list[Case] = [
    a_missing_provider_reads_as_none,
    a_taken_uuid_or_name_is_a_conflict,
    a_stale_generation_is_a_concurrent_update,
    an_unknown_standard_trait_is_found_before_it_is_refused,
    an_allocation_takes_the_one_unit_and_bumps_generations,
    reserved_may_cover_a_unit_in_use,
    a_batch_is_all_or_nothing,
    a_provider_with_allocations_is_not_deleted,
    removing_a_class_in_use_is_refused,
    aggregates_list_their_members,
]
