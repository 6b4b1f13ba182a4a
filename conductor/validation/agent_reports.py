# SPDX-License-Identifier: Apache-2.0
"""What compute agents report: build and teardown results, node states, hand-overs.

Each report is validated whole before anything is applied: a malformed one
is refused with one :class:`~conductor.common.exception.InvalidInput` naming
every bad field of every item, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from conductor.common import checks
from conductor.common.checks import check_epoch, validate_uuid
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import PowerState, ProvisionState
from conductor.validation.arguments import MAX_AGENT_BATCH, check_bool, check_host

__all__ = [
    "MAX_RESULTS",
    "Transfer",
    "check_build_result",
    "check_build_results",
    "check_destroy_result",
    "check_node_states",
    "check_transfers",
]

#: Build results in one ``report_build_results`` call.
MAX_RESULTS = 1000
#: Longest fault text kept of a result (the rest is cut).
MAX_FAULT_LENGTH = 4000

_RESULT_FIELDS = frozenset(
    {"instance_uuid", "node_uuid", "epoch", "success", "fault", "node_clean"}
)
_STATE_FIELDS = frozenset({"node_uuid", "epoch", "power_state", "provision_state"})
_TRANSFER_FIELDS = frozenset({"node_uuid", "epoch", "new_owner"})
_POWER_STATES = frozenset(p.value for p in PowerState)
_PROVISION_STATES = frozenset(p.value for p in ProvisionState)


class Transfer(NamedTuple):
    """One validated hand-over: the node, the epoch its owner holds, the new owner."""

    node_uuid: str
    epoch: int
    new_owner: str


def check_fault(value: object, field: str = "fault") -> str | None:
    """A fault text, cut to :data:`MAX_FAULT_LENGTH` characters; None is none."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput([FieldError.about(field, "must be text", value)])
    return value[:MAX_FAULT_LENGTH]


def check_build_result(item: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """The fields of one build result (``report_build_result``'s keywords, or
    one item of ``report_build_results`` with ``prefix`` ``results[i].``), as
    keyword arguments of :meth:`conductor.build_results.BuildResults.report_result`."""
    instance, node, epoch, success, clean, fault = checks.collect(
        lambda: validate_uuid(item.get("instance_uuid"), f"{prefix}instance_uuid"),
        lambda: validate_uuid(item.get("node_uuid"), f"{prefix}node_uuid"),
        lambda: check_epoch(item.get("epoch"), f"{prefix}epoch"),
        lambda: check_bool(item.get("success"), f"{prefix}success"),
        lambda: check_bool(item.get("node_clean", True), f"{prefix}node_clean"),
        lambda: check_fault(item.get("fault"), f"{prefix}fault"),
    )
    return {
        "instance_uuid": instance,
        "node_uuid": node,
        "epoch": epoch,
        "success": success,
        "fault": fault,
        "node_clean": clean,
    }


def _check_result_item(item: object, path: str) -> dict[str, Any]:
    return checks.check_record(item, path, _RESULT_FIELDS, check_build_result)


def check_build_results(value: object) -> list[dict[str, Any]]:
    """``[{instance_uuid, node_uuid, epoch, success, fault?, node_clean?}]``:
    1 to :data:`MAX_RESULTS` items, each as :func:`check_build_result`."""
    return checks.check_list(
        value, "results", _check_result_item, minimum=1, maximum=MAX_RESULTS, what="results"
    )


def check_destroy_result(
    instance_uuid: object, node_uuid: object, epoch: object, success: object, fault: object
) -> tuple[str, str, int, bool, str | None]:
    """A teardown's outcome: instance, node, epoch, success and fault text."""
    instance, node, held, ok, text = checks.collect(
        lambda: validate_uuid(instance_uuid, "instance_uuid"),
        lambda: validate_uuid(node_uuid, "node_uuid"),
        lambda: check_epoch(epoch, "epoch"),
        lambda: check_bool(success, "success"),
        lambda: check_fault(fault),
    )
    return instance, node, held, ok, text


def _check_state_fields(item: Mapping[Any, Any], prefix: str) -> dict[str, Any]:
    uuid, epoch = checks.collect(
        lambda: validate_uuid(item.get("node_uuid"), f"{prefix}node_uuid"),
        lambda: check_epoch(item.get("epoch"), f"{prefix}epoch"),
    )
    errors: list[FieldError] = []
    power = item.get("power_state")
    if power is not None and (not isinstance(power, str) or power not in _POWER_STATES):
        errors.append(FieldError.about(f"{prefix}power_state", "unknown power state", power))
    provision = item.get("provision_state")
    if provision is not None and (
        not isinstance(provision, str) or provision not in _PROVISION_STATES
    ):
        errors.append(
            FieldError.about(f"{prefix}provision_state", "unknown provision state", provision)
        )
    if errors:
        raise InvalidInput(errors)
    return {"node_uuid": uuid, "epoch": epoch, "power_state": power, "provision_state": provision}


def _check_state(item: object, path: str) -> dict[str, Any]:
    return checks.check_record(item, path, _STATE_FIELDS, _check_state_fields)


def check_node_states(value: object, field: str = "states") -> list[dict[str, Any]]:
    """``[{node_uuid, epoch, power_state, provision_state}]`` from an agent."""
    return checks.check_list(value, field, _check_state, maximum=MAX_AGENT_BATCH, what="reports")


def check_transfers(value: object, live: Collection[str]) -> list[Transfer]:
    """``[{node_uuid, epoch, new_owner}]``: nodes handed to other agents,
    each new owner one of the *live* agents."""

    def check_item(item: object, path: str) -> Transfer:
        if not isinstance(item, Mapping) or set(item) != _TRANSFER_FIELDS:
            raise InvalidInput(
                [FieldError.about(path, "must have exactly node_uuid, epoch, new_owner", item)]
            )
        uuid, epoch, new_owner = checks.collect(
            lambda: validate_uuid(item["node_uuid"], f"{path}.node_uuid"),
            lambda: check_epoch(item["epoch"], f"{path}.epoch"),
            lambda: check_host(item["new_owner"], f"{path}.new_owner"),
        )
        if new_owner not in live:
            raise InvalidInput(
                [FieldError.about(f"{path}.new_owner", "is not a live agent", new_owner)]
            )
        return Transfer(uuid, epoch, new_owner)

    return checks.check_list(
        value, "transfers", check_item, maximum=MAX_AGENT_BATCH, what="transfers"
    )
