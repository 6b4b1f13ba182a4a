# SPDX-License-Identifier: Apache-2.0
"""Running operators' Nova scheduler filters and weighers, unchanged.

``[scheduler] enabled_filters`` and ``weighers`` accept, besides ringfleet's
own names, Nova's names as nova.conf writes them (:func:`resolve_names`):
an in-tree class's bare name (``ComputeFilter``), ``nova.scheduler.filters.
all_filters`` / ``nova.scheduler.weights.all_weighers``, or the import path
of a Nova filter (a subclass of ``nova.scheduler.filters.BaseHostFilter``)
or weigher (a subclass of ``nova.scheduler.weights.BaseHostWeigher``),
Nova's or an operator's (``mycompany.filters.RackFilter``).  Nova is an
optional extra (``pip install ringfleet[nova-filters]``); only the
configured classes' modules are imported, and what they import (some
import ``nova.conf``, whose option defaults they then read: ringfleet does
not read a nova.conf file).

Each Nova class is wrapped in a ringfleet :class:`~conductor.scheduler.filters.BaseFilter`
(:class:`NovaFilter`) or :class:`~conductor.scheduler.weighers.BaseWeigher`
(:class:`NovaWeigher`) subclass named by the import path, which is what "no
valid node" messages call it.  The wrapper calls ``host_passes(host_state,
spec_obj)`` (never ``filter_all``, ``_filter_one`` or the rebuild check: a
build is never a rebuild) or ``_weigh_object(host_state, spec_obj)`` with

* a :class:`HostState`: the node as Nova's ironic path builds it (its
  driver's ``_node_resource``, the resource tracker, ``HostState.update``);
* a :class:`NovaRequestSpec`: the request as Nova's ``RequestSpec``.

Their docstrings list every attribute there is; a Nova filter reading any
other attribute raises ``AttributeError``.  ``tests/unit/test_nova_differential.py``
checks, for every in-tree filter and weigher, that they give the verdicts
and weights Nova's own host state and request spec give.

Per profile or per node
-----------------------
A Nova filter is called once per node *profile* (resource class, group,
traits, and hardware: the parsed capabilities and the ``cpu_arch`` and
``capabilities`` properties Nova's host state is built from,
:data:`~conductor.scheduler.index.HardwareKey`) and flavor-and-hints, and
its verdict cached, like ringfleet's per-profile filters: a decision then
costs the same at 1,000 or 100,000 nodes.  The host state it sees is then
a **profile view**, in which the node's identity (``host``, ``host_ip``,
``nodename``, ``hypervisor_hostname``, ``uuid``) is ``None``, so that a
filter cannot silently base a cached verdict on one arbitrary node; every
other attribute is the same on every node of the profile, so the cached
verdict is the one Nova gives each of them.  A filter that reads the
owner's host state (``host``, ``host_ip``: Nova's
``SimpleCIDRAffinityFilter``, or a class setting ``ringfleet_per_owner =
True``) is called once per profile and owning agent, with an **owner
view** (``host`` and ``host_ip`` set).  A filter
that reads per-node state must be declared per node, either by the class
attribute ``ringfleet_per_node = True`` or by listing its import path in
``[scheduler] per_node_filters``; it is then called for each node the
scheduler is about to choose (with a **node view**, every attribute set).

Failures
--------
A Nova filter that raises fails the node (or profile) it was called for; the
first failure of each distinct kind is logged with its traceback, later ones
only at debug level.  A weigher that raises gives the node the weight 0.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import functools
import importlib
import importlib.util
import logging
import re
import threading
import time
import types
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from conductor.common.exception import ConfigurationError
from conductor.common.objects import Node
from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import BaseWeigher, WeighingContext

__all__ = [
    "NOVA_FILTER_BASE",
    "NOVA_WEIGHER_BASE",
    "HostState",
    "NovaFilter",
    "NovaFlavor",
    "NovaRequestSpec",
    "NovaWeigher",
    "is_import_path",
    "load_nova_filter",
    "load_nova_weigher",
]

LOG = logging.getLogger(__name__)

NOVA_FILTER_BASE = "nova.scheduler.filters.BaseHostFilter"
NOVA_WEIGHER_BASE = "nova.scheduler.weights.BaseHostWeigher"
_INSTALL_HINT = "install the extra: pip install 'ringfleet[nova-filters]'"
#: distinct failures remembered per filter for "logged once" (then forgotten)
_MAX_REMEMBERED_FAILURES = 64


def is_import_path(name: str) -> bool:
    """Whether a configured filter or weigher name is a class's import path."""
    return "." in name


# -- what Nova's code sees ---------------------------------------------------------

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
    """Nova's ``ImageMeta`` of a build's image: its disk format, no properties.

    A ringfleet image is a URL and checksums (``conductor.validation.deploy``),
    without Glance's id, name or properties; its checksums are left out so
    that per-profile verdicts can be cached per disk format, not per image
    (:func:`conductor.scheduler.request.request_key`).  A build naming no
    image gets an ``ImageMeta`` with nothing set but its empty properties.
    """

    _FIELDS = ("disk_format",)

    def __init__(self, image: Mapping[str, str] | None) -> None:
        self.properties = _NoImageProperties()
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
    :ivar num_instances, num_io_ops, failed_builds: ``0`` (only free nodes
        are filtered)
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
    marked *node* or *owner* in a profile view (see the module
    documentation); ``stats``/``supported_instances`` are those of every
    node of the profile.
    """

    #: the attributes that may differ between the host states of two free
    #: nodes; every other attribute is the same on all of them
    PER_NODE: ClassVar[frozenset[str]] = frozenset(
        {
            "host",
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
        self.num_instances = self.num_io_ops = self.failed_builds = 0
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
        if per_node or per_owner:
            self.host = node.owner
            self.host_ip = host_ip
        if per_node:
            self.nodename = self.hypervisor_hostname = self.uuid = node.uuid
            self.ringfleet_name = node.name

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
    :ivar image: an ``ImageMeta`` of the build's own image (its disk format;
        no properties: a ringfleet image is a URL and checksums, with no
        Glance properties), or of nothing set when the build names none
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


# -- the wrappers --------------------------------------------------------------------


class _FailureLog:
    """Log each distinct failure of one plugin once (with its traceback)."""

    def __init__(self, kind: str, name: str) -> None:
        self._kind = kind
        self._name = name
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.count = 0

    def failed(self, exc: Exception, subject: object, request: RequestSpec, outcome: str) -> None:
        key = (type(exc).__name__, str(exc))
        with self._lock:
            self.count += 1
            first = key not in self._seen
            if first:
                if len(self._seen) >= _MAX_REMEMBERED_FAILURES:
                    self._seen.clear()
                self._seen.add(key)
        if first:
            LOG.warning(
                "Nova %s %s raised %s: %s (host state %r, flavor %s, instance %s); %s. "
                "Logged once; further failures like it are logged at debug level",
                self._kind,
                self._name,
                key[0],
                key[1],
                subject,
                request.flavor.name,
                request.instance_uuid,
                outcome,
                exc_info=exc,
            )
        else:
            LOG.debug("Nova %s %s raised %s: %s", self._kind, self._name, key[0], key[1])


class _RequestCache:
    """The Nova view of the last request seen (calls for one decision reuse it)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def view(self, request: RequestSpec) -> NovaRequestSpec:
        last = getattr(self._local, "last", None)
        if last is not None and last[0] is request:
            view: NovaRequestSpec = last[1]
            return view
        view = NovaRequestSpec(request)
        self._local.last = (request, view)
        return view


class _WeighedHosts:
    """Node views shared by every Nova weigher of this thread, for a second.

    Nova passes one host state to all its weighers; so does this, which
    also spares building one per weigher (13 of Nova's defaults) per node
    per decision.  A view is kept while its node object is the index's
    (a node's change replaces it) and at most :attr:`TTL` seconds, so that
    its service record stays fresh.
    """

    MAX = 4096
    TTL = 1.0

    def __init__(self) -> None:
        self._local = threading.local()

    def view(self, node: Node) -> HostState:
        entries: dict[int, tuple[Node, float, HostState]] | None = getattr(
            self._local, "entries", None
        )
        if entries is None:
            entries = self._local.entries = {}
        now = time.monotonic()
        entry = entries.get(id(node))
        if entry is not None and entry[0] is node and now - entry[1] < self.TTL:
            return entry[2]
        if len(entries) >= self.MAX:
            entries.clear()
        state = HostState(node, per_node=True)
        entries[id(node)] = (node, now, state)
        return state


_WEIGHED_HOSTS = _WeighedHosts()
#: the request view shared by every Nova weigher (one per decision, as in Nova)
_WEIGHED_REQUESTS = _RequestCache()


class NovaFilter(BaseFilter):
    """A Nova ``BaseHostFilter`` run as a ringfleet filter (see the module doc).

    Subclassed per Nova class by :func:`load_nova_filter`, which sets
    :attr:`nova_class`, ``name`` (the import path), ``per_profile`` and
    ``per_owner``.
    """

    nova_class: ClassVar[type[Any]]
    # Nova filters may read spec_obj.scheduler_hints (JsonFilter does),
    # project_id and image.
    reads_hints = True

    def __init__(self) -> None:
        self.nova_filter: Any = self.nova_class()
        self.failures = _FailureLog("filter", self.name)
        self._requests = _RequestCache()

    def filter(self, node: Node, request: RequestSpec) -> bool:
        host_state = HostState(
            node,
            per_node=not self.per_profile and not self.per_owner,
            per_owner=self.per_owner,
            host_ip=request.host_ips.get(node.owner) if node.owner is not None else None,
        )
        try:
            return bool(self.nova_filter.host_passes(host_state, self._requests.view(request)))
        except Exception as exc:
            self.failures.failed(exc, host_state, request, "the node fails the filter")
            return False


class NovaWeigher(BaseWeigher):
    """A Nova ``BaseHostWeigher`` run as a ringfleet weigher.

    Calls ``_weigh_object(host_state, spec_obj)`` with a node view for each
    node weighed (its ``minval``/``maxval`` clamp the weight, as in Nova).
    Its ``weight_multiplier()`` is called once, when loaded, for Nova's
    default (the nova.conf option's default, no aggregates); ``[scheduler]
    weigher_multipliers`` overrides it.  Nova's in-tree weighers are per
    request (they weigh every free node alike, see
    :func:`_weighs_free_nodes_alike`): the scheduler does not call them,
    as their normalized weights are 0.  An operator's is weighed per node,
    so the scheduler weighs every candidate node.
    """

    nova_class: ClassVar[type[Any]]

    def __init__(self) -> None:
        super().__init__()
        self.nova_weigher: Any = self.nova_class()
        self.failures = _FailureLog("weigher", self.name)

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        host_state = _WEIGHED_HOSTS.view(node)
        # The owner's address is the request's (the view outlives it).
        host_state.host_ip = request.host_ips.get(node.owner) if node.owner else None
        spec_obj = _WEIGHED_REQUESTS.view(request)
        try:
            weight = float(self.nova_weigher._weigh_object(host_state, spec_obj))
        except Exception as exc:
            self.failures.failed(exc, host_state, request, "the node weighs 0")
            return 0.0
        minval, maxval = self.nova_weigher.minval, self.nova_weigher.maxval
        if minval is not None:
            weight = max(weight, float(minval))
        if maxval is not None:
            weight = min(weight, float(maxval))
        return weight


# -- loading -------------------------------------------------------------------------

#: the value of Nova's ``available_filters`` / ``weight_classes`` defaults:
#: every in-tree class
ALL_FILTERS = "nova.scheduler.filters.all_filters"
ALL_WEIGHERS = "nova.scheduler.weights.all_weighers"
_PACKAGES = {"filter": "nova.scheduler.filters", "weigher": "nova.scheduler.weights"}
_ALL = {"filter": ALL_FILTERS, "weigher": ALL_WEIGHERS}
_CLASS_RE = re.compile(r"^class (\w+)\(", re.MULTILINE)

#: in-tree Nova classes that need Nova's services (server groups, host
#: aggregates, the cell database, nova.conf) to act: what each does here
NOT_APPLICABLE: Mapping[str, str] = {
    "ServerGroupAffinityFilter": "passes every node (no server groups)",
    "ServerGroupAntiAffinityFilter": "passes every node (no server groups)",
    "AggregateImagePropertiesIsolation": "passes every node (no host aggregates)",
    "AggregateInstanceExtraSpecsFilter": "passes every node (no host aggregates)",
    "AggregateMultiTenancyIsolation": "passes every node (no host aggregates)",
    "AggregateTypeAffinityFilter": "passes every node (no host aggregates)",
    "AggregateIoOpsFilter": "acts as IoOpsFilter (no host aggregates): passes free nodes",
    "AggregateNumInstancesFilter": (
        "acts as NumInstancesFilter (no host aggregates): passes free nodes"
    ),
    "IsolatedHostsFilter": "passes every node (nova.conf's isolated_hosts is not read)",
    "MetricsFilter": "passes every node (no metrics; nova.conf's weight_setting is not read)",
    "ServerGroupSoftAffinityWeigher": "weighs every node 0 (no server groups)",
    "ServerGroupSoftAntiAffinityWeigher": "weighs every node 0 (no server groups)",
    "CrossCellWeigher": "weighs every node 0 (no cells, no moves)",
    "MetricsWeigher": "weighs every node 0 (no metrics)",
    "BuildFailureWeigher": "weighs every node 0 (ringfleet counts no failed builds per node)",
}


#: in-tree Nova filters whose verdict depends on the owner's host state
#: (``host_ip``): called once per profile and owner, with an owner view
PER_OWNER: frozenset[str] = frozenset({"SimpleCIDRAffinityFilter"})


def nova_installed() -> bool:
    """Whether Nova can be imported (the ``nova-filters`` extra is installed)."""
    try:
        return importlib.util.find_spec("nova") is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def nova_class_paths(kind: str) -> Mapping[str, str]:
    """Nova's in-tree class name -> import path, for ``filter`` or ``weigher``.

    Found by reading the package's sources, not importing them (importing
    every filter module costs seconds): only the classes configured are
    imported, and checked to be Nova's filters or weighers then.
    """
    package = _PACKAGES[kind]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    paths: dict[str, str] = {}
    for location in spec.submodule_search_locations:
        for source in sorted(Path(location).glob("*.py")):
            module = package if source.stem == "__init__" else f"{package}.{source.stem}"
            for name in _CLASS_RE.findall(source.read_text(encoding="utf-8")):
                if not name.startswith(("Base", "_")):
                    paths.setdefault(name, f"{module}.{name}")
    return paths


def _all_classes(kind: str) -> list[str]:
    """The import paths of Nova's ``all_filters()`` / ``all_weighers()``, in its order."""
    module = importlib.import_module(_PACKAGES[kind])
    function = getattr(module, "all_filters" if kind == "filter" else "all_weighers")
    return [f"{cls.__module__}.{cls.__name__}" for cls in function()]


def resolve_names(names: Sequence[str], *, kind: str, registered: Collection[str]) -> list[str]:
    """*names* of ``enabled_filters`` / ``weighers`` with Nova's names as import paths.

    A name registered by ringfleet (its own plugins, an operator's entry
    points) keeps its meaning; another bare name that is one of Nova's
    in-tree classes (as in nova.conf) becomes that class's import path;
    ``nova.scheduler.filters.all_filters`` / ``nova.scheduler.weights.all_weighers``
    becomes every in-tree class.  Import paths and unknown names are kept
    (loading reports the unknown ones, naming the option).  A ringfleet
    name that is also a Nova class name is logged once.
    """
    option = "enabled_filters" if kind == "filter" else "weighers"
    if not nova_installed():
        if _ALL[kind] in names:
            raise ConfigurationError("scheduler", option, f"{_ALL[kind]}: {_INSTALL_HINT}")
        return list(names)
    nova_paths = nova_class_paths(kind)
    resolved: list[str] = []
    for name in names:
        if name == _ALL[kind]:
            resolved.extend(_all_classes(kind))
        elif is_import_path(name):
            resolved.append(name)
        elif name in registered:
            if name in nova_paths:
                LOG.warning(
                    "[scheduler] %s: %s is ringfleet's %s, not Nova's %s "
                    "(give Nova's by its import path)",
                    option,
                    name,
                    kind,
                    nova_paths[name],
                )
            resolved.append(name)
        else:
            resolved.append(nova_paths.get(name, name))
    return resolved


def _import_class(path: str, option: str) -> object:
    module_name, _, attribute = path.rpartition(".")
    kind = "filter" if option == "enabled_filters" else "weigher"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or ""
        if missing.split(".")[0] == "nova" and not nova_installed():
            reason = _INSTALL_HINT
        elif missing and path.startswith(missing + "."):
            reason = f"there is no module {missing}" + _did_you_mean(attribute, kind)
        else:
            reason = f"{type(exc).__name__}: {exc}"
        raise ConfigurationError(
            "scheduler", option, f"cannot import {path} ({module_name}): {reason}"
        ) from exc
    except Exception as exc:
        raise ConfigurationError(
            "scheduler",
            option,
            f"importing {module_name} for {path} failed: {type(exc).__name__}: {exc}",
        ) from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigurationError(
            "scheduler",
            option,
            f"{path}: module {module_name} has no {attribute!r}" + _did_you_mean(attribute, kind),
        ) from None


def _did_you_mean(attribute: str, kind: str) -> str:
    known = nova_class_paths(kind)
    if attribute in known:
        return f"; Nova's {attribute} is {known[attribute]} (or just {attribute})"
    close = difflib.get_close_matches(attribute, list(known), n=1)
    return f"; did you mean Nova's {close[0]} ({known[close[0]]})?" if close else ""


def _nova_base(path: str, option: str) -> type[Any]:
    if not nova_installed():
        raise ConfigurationError("scheduler", option, f"{path} needs Nova: {_INSTALL_HINT}")
    base = _import_class(path, option)
    assert isinstance(base, type)
    return base


def _check_subclass(path: str, cls: object, base: type[Any], option: str) -> type[Any]:
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigurationError(
            "scheduler",
            option,
            f"{path} is {cls!r}, not a subclass of {base.__module__}.{base.__qualname__} "
            "(nor a ringfleet plugin name)",
        )
    return cls


def _log_not_applicable(cls: type[Any], path: str, option: str) -> None:
    what = NOT_APPLICABLE.get(cls.__name__)
    if what is not None and cls.__module__.startswith("nova."):
        LOG.warning(
            "[scheduler] %s: Nova's %s needs Nova's own services to act; here it %s",
            option,
            path,
            what,
        )


def load_nova_filter(path: str, *, per_node: bool = False) -> type[NovaFilter]:
    """The :class:`NovaFilter` subclass running the Nova filter class at *path*.

    It is called per profile, or per profile and owner when it reads the
    owner's host state (:data:`PER_OWNER`, or the class sets
    ``ringfleet_per_owner = True``).

    :param per_node: call it per node (``[scheduler] per_node_filters``);
        also when the class sets ``ringfleet_per_node = True``
    :raises ConfigurationError: about ``[scheduler] enabled_filters``: Nova
        or the class cannot be imported, or it is not a Nova host filter
    """
    option = "enabled_filters"
    base = _nova_base(NOVA_FILTER_BASE, option)
    cls = _check_subclass(path, _import_class(path, option), base, option)
    _log_not_applicable(cls, path, option)
    per_node = per_node or bool(getattr(cls, "ringfleet_per_node", False))
    per_owner = not per_node and (
        bool(getattr(cls, "ringfleet_per_owner", False))
        or (cls.__module__.startswith("nova.") and cls.__name__ in PER_OWNER)
    )
    return type(
        f"Nova{cls.__name__}",
        (NovaFilter,),
        {
            "name": path,
            "per_profile": not per_node and not per_owner,
            "per_owner": per_owner,
            "nova_class": cls,
            "__module__": __name__,
        },
    )


def _default_multiplier(cls: type[Any]) -> float:
    """Nova's multiplier of a weigher with its nova.conf default and no aggregates."""
    try:
        return float(cls().weight_multiplier(types.SimpleNamespace(aggregates=[])))
    except Exception:  # a weigher whose multiplier needs more than Nova's defaults
        LOG.debug("%s: no default multiplier from Nova, using 1.0", cls, exc_info=True)
        return 1.0


def load_nova_weigher(path: str) -> type[NovaWeigher]:
    """The :class:`NovaWeigher` subclass running the Nova weigher class at *path*.

    Its default multiplier is Nova's (the nova.conf option's default, e.g.
    -1.0 for IoOpsWeigher, 1000000.0 for BuildFailureWeigher).

    :raises ConfigurationError: about ``[scheduler] weighers``
    """
    option = "weighers"
    base = _nova_base(NOVA_WEIGHER_BASE, option)
    cls = _check_subclass(path, _import_class(path, option), base, option)
    _log_not_applicable(cls, path, option)
    return type(
        f"Nova{cls.__name__}",
        (NovaWeigher,),
        {
            "name": path,
            "nova_class": cls,
            "default_multiplier": _default_multiplier(cls),
            "per_owner": _weighs_free_nodes_alike(cls),
            "per_request": _weighs_free_nodes_alike(cls),
            "__module__": __name__,
        },
    )


def _weighs_free_nodes_alike(cls: type[Any]) -> bool:
    """Whether a Nova weigher gives every free node the same weight here.

    Nova's in-tree weighers read sizes, usage, metrics, PCI pools, the
    hypervisor version, instances and failed builds: on the host state of
    a free ironic node all of these are the same for every node (all zero
    or empty, version 1: none is in :data:`HostState.PER_NODE`), so, as in
    Nova on ironic, they weigh every free node alike, and their normalized
    weights are 0 (``tests/unit/test_nova_differential.py`` checks, class by
    class, which host-state attributes each reads, and its weights).  They
    are therefore ``per_request``: left out of the totals, which is what
    Nova's default weigher list costs per decision here.  An operator's
    weigher may read the node's stats: it is weighed per node.
    """
    return cls.__module__.startswith(_PACKAGES["weigher"] + ".")
