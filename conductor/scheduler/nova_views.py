# SPDX-License-Identifier: Apache-2.0
"""What Nova's filter and weigher code sees: a node as Nova's ``HostState``,
a request as Nova's ``RequestSpec``.

:class:`HostState` is a node as Nova's ironic path builds it (its driver's
``_node_resource``, the resource tracker, ``HostState.update``), as a node,
owner or profile view (see :mod:`conductor.scheduler.nova`);
:class:`NovaRequestSpec` (with its :class:`NovaFlavor`) is the request of
one decision.  Their docstrings list every attribute there is; a Nova
filter reading any other attribute raises ``AttributeError``.  Nothing here
imports Nova but ``nova.virt.arch``, when a node's architecture is
canonicalized, and ``nova.objects.image_meta``, for a build whose image has
properties.  :mod:`conductor.scheduler.nova` wraps Nova's classes around
these views and re-exports them.
"""

from __future__ import annotations

import copy
import datetime
import importlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from conductor.common.objects import Node
from conductor.scheduler.request import RequestSpec
from conductor.validation.image_properties import image_meta_props

__all__ = [
    "IRONIC_HYPERVISOR_VERSION",
    "HostState",
    "NovaFlavor",
    "NovaRequestSpec",
    "nova_stats",
]

#: what Nova's ironic driver reports as the hypervisor version (the major
#: version of the Ironic API it speaks: ``IRONIC_API_VERSION[0]``)
IRONIC_HYPERVISOR_VERSION = 1
#: Nova's ``initial_{cpu,ram,disk}_allocation_ratio`` defaults, which the
#: resource tracker copies into an ironic compute node
_ALLOCATION_RATIOS = (4.0, 1.0, 1.0)


def nova_stats(node: Node) -> dict[str, str | None]:
    """The compute node ``stats`` Nova's ironic driver reports for *node*.

    As ``IronicDriver._node_resource`` builds them: ``cpu_arch`` is
    ``properties["cpu_arch"]`` as given (``None`` when absent), then each
    ``key:value`` item of ``properties["capabilities"]`` with exactly one
    colon, the key stripped, the value as written (not stripped); later
    items win.  A node held in memory without the capabilities text (tests,
    fakes) gives its parsed capabilities.
    """
    properties = node.properties
    raw_arch = properties.get("cpu_arch")
    stats: dict[str, str | None] = {"cpu_arch": None if raw_arch is None else str(raw_arch)}
    text = properties.get("capabilities")
    if text is None:
        stats.update(node.capabilities)
        return stats
    if text:
        for item in str(text).split(","):
            parts = item.split(":")
            if len(parts) == 2 and parts[0] and parts[1]:
                stats[parts[0].strip()] = parts[1]
    return stats


def _supported_instances(raw_arch: object) -> list[list[str]]:
    """``supported_instances`` as Nova's ironic driver and HostState give it."""
    arch = _canonical_arch(raw_arch)
    if not arch:
        return []
    return [[arch, "baremetal", "hvm"]]


def _canonical_arch(raw_arch: object) -> str | None:
    """Nova's ``Architecture.canonicalize``; an unknown name is no architecture.

    Written out (lower-cased, Nova's aliases mapped, checked against
    ``nova.virt.arch.ALL``) because ``nova.objects.fields`` imports
    ``nova.exception`` and its web stack.
    """
    nova_arch = importlib.import_module("nova.virt.arch")
    if not raw_arch:
        return None
    name = str(raw_arch).lower()
    if name in ("i386", "i486", "i586", "x86_32", "x86_32p"):
        name = nova_arch.I686
    elif name == "amd64":
        name = nova_arch.X86_64
    return name if name in nova_arch.ALL else None


def _service(owner: str | None) -> dict[str, Any]:
    """The ``nova-compute`` service record of a node's owner, as ComputeFilter reads it.

    Only nodes of a live owner reach the configured filters (LiveOwnerFilter
    is always applied first), so the service is enabled and was heard from
    now.
    """
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return {
        "host": owner,
        "binary": "nova-compute",
        "topic": "compute",
        "disabled": False,
        "disabled_reason": None,
        "forced_down": False,
        "last_seen_up": now,
        "created_at": now,
        "updated_at": now,
        "report_count": 1,
        "version": None,
        "uuid": None,
    }


class _NoPciDevices:
    """Nova's ``PciDeviceStats`` of a host without PCI devices (a bare-metal node).

    Nova's own class is not used: importing ``nova.pci`` pulls in Nova's
    objects and eventlet.  Like Nova's, it is truthy and has no pools.
    """

    __slots__ = ()
    pools: ClassVar[tuple[Any, ...]] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def support_requests(self, requests: Sequence[Any], *args: Any, **kwargs: Any) -> bool:
        return not requests

    def __repr__(self) -> str:
        return "PciDeviceStats(no devices)"


class _NoImageProperties(dict[str, Any]):
    """Nova's ``ImageMetaProps`` with no property set."""

    def obj_attr_is_set(self, name: str) -> bool:
        return False

    def to_dict(self) -> dict[str, Any]:
        return {}


class _Image:
    """Nova's ``ImageMeta`` of a build's image: its disk format and properties.

    A ringfleet image is a URL and checksums (``conductor.validation.deploy``),
    without Glance's id or name; its checksums are left out so that
    per-profile verdicts can be cached per disk format and properties, not
    per image (:func:`conductor.scheduler.request.request_key`).  Its
    ``properties`` are Nova's own ``ImageMetaProps`` made from the image's
    (``ImageMetaProps.from_dict``, as Nova makes them from Glance's), or
    none set.  A build naming no image gets an ``ImageMeta`` with nothing
    set but its empty properties.
    """

    _FIELDS = ("disk_format",)

    def __init__(self, image: Mapping[str, Any] | None) -> None:
        properties = None if image is None else image.get("properties")
        # Imported only for an image with properties: Nova's objects module
        # costs a second to import, and the rules are Nova's then.
        self.properties: Any = image_meta_props(properties) if properties else _NoImageProperties()
        for name in self._FIELDS:
            if image is not None and name in image:
                setattr(self, name, image[name])

    def obj_attr_is_set(self, name: str) -> bool:
        return name == "properties" or name in self.__dict__

    def __getattr__(self, name: str) -> Any:
        # Nova's objects raise on an unset field too (NotImplementedError
        # "Cannot load ..."); an AttributeError fails the node the same way.
        raise AttributeError(f"ImageMeta field {name!r} is not set")


class _NoPciRequests:
    """Nova's ``InstancePCIRequests`` asking for no device."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests: list[Any] = []


_NO_PCI_DEVICES = _NoPciDevices()


class HostState:
    """A node as a Nova filter's ``host_state``: what Nova's ironic path builds.

    The attributes are those of Nova's ``nova.scheduler.host_manager.HostState``
    updated from the compute node Nova's ironic driver reports for a free
    node (``IronicDriver._node_resource``) and its compute service:

    :ivar host: *owner* -- the owning agent (Nova: the nova-compute host)
    :ivar nodename: *node* -- the node's uuid
    :ivar hypervisor_hostname: *node* -- the same
    :ivar uuid: *node* -- the same (Nova: the compute node's uuid, which
        for ironic is the node's)
    :ivar host_ip: *owner* -- the owning agent's ``[DEFAULT] my_ip`` as it
        announces it with its membership (:attr:`RequestSpec.host_ips
        <conductor.scheduler.request.RequestSpec.host_ips>`), ``None`` if it
        announces none (Nova: the compute service's ``my_ip``)
    :ivar service: the owner's service record: enabled, not forced down,
        heard from now (a read-only dict, like Nova's)
    :ivar hypervisor_type: ``"ironic"``
    :ivar hypervisor_version: ``1`` (Nova: the Ironic API's major version)
    :ivar cpu_info: ``None`` (Nova's ironic driver reports none)
    :ivar supported_instances: ``[[arch, "baremetal", "hvm"]]`` from
        ``properties["cpu_arch"]`` canonicalized, or ``[]``
    :ivar stats: :func:`nova_stats`
    :ivar vcpus_total, vcpus_used, total_usable_ram_mb, free_ram_mb,
        total_usable_disk_gb, free_disk_mb, disk_mb_used: ``0`` -- Nova's
        ironic driver reports no sizes (placement holds the node's one
        resource-class unit)
    :ivar num_instances, num_io_ops: ``0`` (only free nodes are filtered)
    :ivar failed_builds: *node* -- the node's ``failed_builds``: builds that
        failed on it since the last success there, as Nova's compute counts
        them (Nova: ``stats["failed_builds"]``, which ringfleet's ``stats``
        leave out)
    :ivar metrics: ``[]`` (Nova: an empty ``MonitorMetricList``)
    :ivar pci_stats: an empty ``PciDeviceStats`` (no pools, truthy as Nova's)
    :ivar numa_topology: ``None``
    :ivar aggregates: ``[]``; :ivar instances: ``{}``; :ivar limits: ``{}``
    :ivar cpu_allocation_ratio, ram_allocation_ratio, disk_allocation_ratio:
        Nova's initial defaults, 4.0, 1.0, 1.0
    :ivar cell_uuid: ``None``; :ivar updated: ``None``;
        :ivar allocation_candidates: ``[]``
    :ivar ringfleet_resource_class, ringfleet_traits, ringfleet_group,
        ringfleet_name: *node* for the name -- ringfleet's (not Nova's;
        prefixed so that ComputeCapabilitiesFilter, which reads an attribute
        of the host state before its stats, reads a capability named
        ``resource_class``, ``group``, ``traits`` or ``name`` from the stats,
        as on Nova's host state)

    Attributes marked *node* are ``None`` in an owner view, and those
    marked *node* or *owner* in a profile view (see the documentation of
    :mod:`conductor.scheduler.nova`); ``stats``/``supported_instances`` are
    those of every node of the profile.
    """

    #: the attributes that may differ between the host states of two free
    #: nodes; every other attribute is the same on all of them
    PER_NODE: ClassVar[frozenset[str]] = frozenset(
        {
            "host",
            "failed_builds",
            "host_ip",
            "hypervisor_hostname",
            "nodename",
            "ringfleet_group",
            "ringfleet_name",
            "ringfleet_resource_class",
            "ringfleet_traits",
            "service",
            "stats",
            "supported_instances",
            "uuid",
        }
    )

    __slots__ = (
        "aggregates",
        "allocation_candidates",
        "cell_uuid",
        "cpu_allocation_ratio",
        "cpu_info",
        "disk_allocation_ratio",
        "disk_mb_used",
        "failed_builds",
        "free_disk_mb",
        "free_ram_mb",
        "host",
        "host_ip",
        "hypervisor_hostname",
        "hypervisor_type",
        "hypervisor_version",
        "instances",
        "limits",
        "metrics",
        "nodename",
        "num_instances",
        "num_io_ops",
        "numa_topology",
        "pci_stats",
        "ram_allocation_ratio",
        "ringfleet_group",
        "ringfleet_name",
        "ringfleet_resource_class",
        "ringfleet_traits",
        "service",
        "stats",
        "supported_instances",
        "total_usable_disk_gb",
        "total_usable_ram_mb",
        "updated",
        "uuid",
        "vcpus_total",
        "vcpus_used",
    )

    def __init__(
        self,
        node: Node,
        *,
        per_node: bool,
        per_owner: bool = False,
        host_ip: str | None = None,
    ) -> None:
        # A fresh dict: Nova's code may copy or mutate what it is given.
        self.stats = nova_stats(node)
        self.supported_instances = _supported_instances(node.properties.get("cpu_arch"))
        self.service = _ReadOnlyDict(_service(node.owner))
        self.ringfleet_resource_class = node.resource_class
        self.ringfleet_traits = node.traits
        self.ringfleet_group = node.group
        self.hypervisor_type = "ironic"
        self.hypervisor_version = IRONIC_HYPERVISOR_VERSION
        self.host_ip: str | None = None
        self.cpu_info = self.numa_topology = None
        self.cell_uuid = self.updated = None
        self.vcpus_total = self.vcpus_used = 0
        self.total_usable_ram_mb = self.free_ram_mb = 0
        self.total_usable_disk_gb = self.free_disk_mb = self.disk_mb_used = 0
        self.num_instances = self.num_io_ops = 0
        (
            self.cpu_allocation_ratio,
            self.ram_allocation_ratio,
            self.disk_allocation_ratio,
        ) = _ALLOCATION_RATIOS
        self.metrics: list[Any] = []
        self.pci_stats = _NO_PCI_DEVICES
        self.aggregates: list[Any] = []
        self.allocation_candidates: list[Any] = []
        self.instances: dict[str, Any] = {}
        self.limits: dict[str, Any] = {}
        self.host: str | None = None
        self.nodename: str | None = None
        self.hypervisor_hostname: str | None = None
        self.uuid: str | None = None
        self.ringfleet_name: str | None = None
        self.failed_builds: int | None = None
        if per_node or per_owner:
            self.host = node.owner
            self.host_ip = host_ip
        if per_node:
            self.nodename = self.hypervisor_hostname = self.uuid = node.uuid
            self.ringfleet_name = node.name
            self.failed_builds = node.failed_builds

    def __repr__(self) -> str:
        # Nova's filters log "%(host_state)s fails ...".
        if self.nodename is None:
            group = self.ringfleet_group or "-"
            owner = "" if self.host is None else f" of {self.host}"
            return f"(profile {self.ringfleet_resource_class}/{group}{owner} stats={self.stats})"
        return f"({self.host}, {self.nodename})"


class _ReadOnlyDict(dict[str, Any]):
    """Nova's HostState keeps its service as a read-only dict; so does this one."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("the service record is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]


class NovaFlavor:
    """``spec_obj.flavor``: the flavor as a Nova ``Flavor`` object.

    Supports ``'extra_specs' in flavor`` (every attribute below is set) and
    ``flavor.get(name, default)``, as Nova objects do.

    :ivar name: the flavor's name
    :ivar flavorid: the same
    :ivar extra_specs: a fresh dict of every extra spec the flavor was
        created with, of every namespace (``capabilities:``, ``trait:``,
        an operator's ``mycompany:racks``, unscoped ``boot_mode``, ...)
    :ivar resource_class: the flavor's resource class
    :ivar required_traits: a frozenset (not a Nova attribute)
    :ivar forbidden_traits: a frozenset (not a Nova attribute)
    :ivar vcpus: ``0``; :ivar memory_mb: ``0``; :ivar root_gb: ``0``;
        :ivar ephemeral_gb: ``0``; :ivar swap: ``0`` (a ringfleet flavor
        asks for a resource class, not for sizes)
    :ivar is_public: ``True``; :ivar disabled: ``False``
    """

    __slots__ = (
        "disabled",
        "ephemeral_gb",
        "extra_specs",
        "flavorid",
        "forbidden_traits",
        "is_public",
        "memory_mb",
        "name",
        "required_traits",
        "resource_class",
        "root_gb",
        "swap",
        "vcpus",
    )

    def __init__(self, request: RequestSpec) -> None:
        flavor = request.flavor
        self.name = self.flavorid = flavor.name
        self.extra_specs: dict[str, str] = dict(flavor.extra_specs)
        self.resource_class = flavor.resource_class
        self.required_traits = flavor.required_traits
        self.forbidden_traits = flavor.forbidden_traits
        self.vcpus = self.memory_mb = self.root_gb = self.ephemeral_gb = self.swap = 0
        self.is_public = True
        self.disabled = False

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.__slots__

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)


class NovaRequestSpec:
    """``spec_obj``: the request of one decision as a Nova ``RequestSpec``.

    :ivar flavor: a :class:`NovaFlavor`
    :ivar vcpus, memory_mb, root_gb, ephemeral_gb, swap: the flavor's (``0``)
    :ivar scheduler_hints: the build's hints as Nova stores them: name ->
        a one-element list of the value given (a string, number, boolean or
        ``None``)
    :ivar instance_uuid: the instance being placed
    :ivar num_instances: ``1``: ringfleet places the instances of a request
        one by one (the request's count is not known to a decision)
    :ivar image: an ``ImageMeta`` of the build's own image (its disk format
        and its properties as Nova's ``ImageMetaProps``; no id, name or
        checksums), or of nothing set when the build names none
    :ivar pci_requests: an ``InstancePCIRequests`` of no request
    :ivar numa_topology: ``None``; :ivar instance_group: ``None``
    :ivar project_id: the instance's project (``None``: built before
        projects, API 1.12)
    :ivar user_id: ``None``;
        :ivar availability_zone: ``None``; :ivar force_hosts: ``None``;
        :ivar force_nodes: ``None``; :ivar ignore_hosts: ``None``;
        :ivar requested_destination: ``None``; :ivar retry: ``None``;
        :ivar is_bfv: ``False``; :ivar limits: ``None``
    :ivar ringfleet_group: the build's group hint (``None``: any group)

    Methods: ``get_scheduler_hint(name, default=None)`` (Nova's: the value,
    unwrapped from its one-element list), ``obj_attr_is_set(name)``
    (``True`` for every attribute here that is not ``None``),
    ``obj_clone()`` (a copy whose hints and flavor extra specs are its own).
    """

    __slots__ = (
        "availability_zone",
        "ephemeral_gb",
        "flavor",
        "force_hosts",
        "force_nodes",
        "ignore_hosts",
        "image",
        "instance_group",
        "instance_uuid",
        "is_bfv",
        "limits",
        "memory_mb",
        "num_instances",
        "numa_topology",
        "pci_requests",
        "project_id",
        "requested_destination",
        "retry",
        "ringfleet_group",
        "root_gb",
        "scheduler_hints",
        "swap",
        "user_id",
        "vcpus",
    )

    def __init__(self, request: RequestSpec) -> None:
        self.flavor = NovaFlavor(request)
        self.vcpus = self.memory_mb = self.root_gb = self.ephemeral_gb = self.swap = 0
        self.scheduler_hints: dict[str, list[Any]] = {
            name: [value] for name, value in request.scheduler_hints.items()
        }
        self.instance_uuid = request.instance_uuid
        self.num_instances = 1
        self.image = _Image(request.image)
        self.pci_requests = _NoPciRequests()
        self.numa_topology = None
        self.project_id = request.project_id
        self.user_id = self.availability_zone = None
        self.instance_group = self.force_hosts = self.force_nodes = None
        self.ignore_hosts = self.requested_destination = self.retry = None
        self.limits = None
        self.is_bfv = False
        self.ringfleet_group = request.group

    def get_scheduler_hint(self, hint_name: str, default: Any = None) -> Any:
        """Nova's ``RequestSpec.get_scheduler_hint``."""
        value = self.scheduler_hints.get(hint_name, default)
        if isinstance(value, list) and len(value) == 1:
            return value[0]
        return value

    def obj_attr_is_set(self, name: str) -> bool:
        return getattr(self, name, None) is not None

    def obj_clone(self) -> NovaRequestSpec:
        """A deep-enough copy (Nova filters clone a request to change it)."""
        clone = copy.copy(self)
        clone.scheduler_hints = {k: list(v) for k, v in self.scheduler_hints.items()}
        clone.flavor = copy.copy(self.flavor)
        clone.flavor.extra_specs = dict(self.flavor.extra_specs)
        return clone

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.obj_attr_is_set(name)
