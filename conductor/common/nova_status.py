# SPDX-License-Identifier: Apache-2.0
"""Nova's view of an instance: its ``status`` and its ``addresses``.

A client written for Nova reads ``status`` (ACTIVE, BUILD, SHUTOFF...),
which Nova computes from the instance's ``vm_state`` and ``task_state``
(``nova/api/openstack/common.py``, ``status_from_state``), and
``addresses``, which Nova builds from the instance's ports.  ringfleet
computes both the same way from what it stores: the state pair, and the
network data of the config drive (OpenStack's ``network_data.json``).

The table below is Nova's, restricted to the states ringfleet has, with
one addition Nova needs not: ringfleet's ``deleting`` vm_state (Nova keeps
the vm_state during a delete and sets task_state ``deleting``, so its
status stays what it was; ringfleet does not keep the state before, and
shows ``DELETED`` at once).  The database layer filters by status through
:func:`state_pairs`, so that a filter finds exactly the instances showing
that status.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from conductor.common.objects import TaskState, VmState

__all__ = ["DEFAULT", "STATUSES", "addresses_of", "state_pairs", "status_of"]

#: The key of a vm_state's status when its task state has none of its own.
DEFAULT: Final = "default"

#: Nova's ``_STATE_MAP``, for ringfleet's states: vm_state -> task -> status.
_STATE_MAP: Final[Mapping[VmState, Mapping[TaskState | str, str]]] = {
    VmState.ACTIVE: {
        DEFAULT: "ACTIVE",
        TaskState.REBOOTING: "REBOOT",
        TaskState.REBOOTING_HARD: "HARD_REBOOT",
        TaskState.REBUILDING: "REBUILD",
    },
    VmState.BUILDING: {DEFAULT: "BUILD"},
    VmState.STOPPED: {DEFAULT: "SHUTOFF", TaskState.REBUILDING: "REBUILD"},
    VmState.ERROR: {DEFAULT: "ERROR", TaskState.REBUILDING: "REBUILD"},
    VmState.DELETING: {DEFAULT: "DELETED"},
    VmState.DELETED: {DEFAULT: "DELETED"},
}

#: Every status an instance may show, in the order of the table.
STATUSES: Final[tuple[str, ...]] = tuple(
    dict.fromkeys(status for tasks in _STATE_MAP.values() for status in tasks.values())
)


def status_of(vm_state: VmState | str, task_state: TaskState | str | None) -> str:
    """Nova's status of an instance in *vm_state* with *task_state*."""
    tasks = _STATE_MAP.get(VmState(vm_state), {DEFAULT: "UNKNOWN"})
    if task_state is None:
        return tasks[DEFAULT]
    return tasks.get(TaskState(task_state), tasks[DEFAULT])


def state_pairs(status: str) -> list[tuple[VmState, frozenset[TaskState] | None, bool]]:
    """The states showing *status* (any case), as conditions on the columns.

    Each entry is ``(vm_state, tasks, among)``: the vm_state with a task
    state in *tasks* (``among``), or with none of *tasks* or no task at all
    (not ``among``: the vm_state's default status).  Empty: no instance
    shows *status*.
    """
    wanted = status.upper()
    pairs: list[tuple[VmState, frozenset[TaskState] | None, bool]] = []
    for vm_state, tasks in _STATE_MAP.items():
        own = frozenset(t for t in tasks if isinstance(t, TaskState))
        if tasks[DEFAULT] == wanted:
            others = frozenset(t for t in own if tasks[t] != wanted)
            pairs.append((vm_state, others or None, False))
        matching = frozenset(t for t in own if tasks[t] == wanted)
        if matching and tasks[DEFAULT] != wanted:
            pairs.append((vm_state, matching, True))
    return pairs


def addresses_of(network_data: Any) -> dict[str, list[dict[str, Any]]]:
    """Nova's ``addresses`` of an instance whose config drive has *network_data*.

    One entry per network with a static address, under the network's
    ``network_id`` (Nova names a network by its label; network_data.json
    has the Neutron network's id), else its ``id``: ``addr``, ``version``
    (4 or 6), ``OS-EXT-IPS:type`` (always ``fixed``: ringfleet has no
    floating IP) and ``OS-EXT-IPS-MAC:mac_addr`` (the link's MAC, if
    given).  A network configured by DHCP or SLAAC has no address known
    before the machine boots: it is left out, as Nova leaves out a port
    without a fixed IP.
    """
    if not isinstance(network_data, Mapping):
        return {}
    macs = {
        link.get("id"): link.get("ethernet_mac_address") for link in _entries(network_data, "links")
    }
    addresses: dict[str, list[dict[str, Any]]] = {}
    for network in _entries(network_data, "networks"):
        kind, address = network.get("type"), network.get("ip_address")
        if kind not in ("ipv4", "ipv6") or not isinstance(address, str):
            continue
        name = str(network.get("network_id") or network.get("id") or "network")
        addresses.setdefault(name, []).append(
            {
                "addr": address,
                "version": 4 if kind == "ipv4" else 6,
                "OS-EXT-IPS:type": "fixed",
                "OS-EXT-IPS-MAC:mac_addr": macs.get(network.get("link")),
            }
        )
    return addresses


def _entries(network_data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The objects of *network_data*'s list *key* (anything else ignored)."""
    items = network_data.get(key)
    if not isinstance(items, list):
        return []
    return [item for item in items if isinstance(item, Mapping)]
