"""Running operators' Nova scheduler filters and weighers, unchanged.

``[scheduler] enabled_filters`` and ``weighers`` accept, besides ringfleet's
own names, the import path of a Nova filter (a subclass of
``nova.scheduler.filters.BaseHostFilter``) or weigher (a subclass of
``nova.scheduler.weights.BaseHostWeigher``), e.g.
``nova.scheduler.filters.compute_capabilities_filter.ComputeCapabilitiesFilter``
or an operator's ``mycompany.filters.RackFilter``.  Nova is an optional extra
(``pip install ringfleet[nova-filters]``); only these modules are imported
(about 0.15 s): never ``nova.scheduler.utils``, ``nova.conf`` or the filter
handler, which would pull in eventlet and 2,000 modules.

Each Nova class is wrapped in a ringfleet :class:`~conductor.scheduler.filters.BaseFilter`
(:class:`NovaFilter`) or :class:`~conductor.scheduler.weighers.BaseWeigher`
(:class:`NovaWeigher`) subclass named by the import path, which is what "no
valid node" messages call it.  The wrapper calls ``host_passes(host_state,
spec_obj)`` (never ``filter_all``, ``_filter_one`` or the rebuild check: a
build is never a rebuild) or ``_weigh_object(host_state, spec_obj)`` with

* a :class:`HostState`: the node as Nova's ironic driver presented it;
* a :class:`NovaRequestSpec`: the request as Nova's ``RequestSpec``.

Their docstrings list every attribute there is; a Nova filter reading any
other attribute raises ``AttributeError``.

Per profile or per node
-----------------------
A Nova filter is called once per node *profile* (resource class, group,
traits, capabilities) and flavor-and-hints, and its verdict cached, like
ringfleet's per-profile filters: a decision then costs the same at 1,000 or
100,000 nodes.  The host state it sees is then a **profile view**, in which
everything that may differ between nodes of a profile (``host``,
``nodename``, ``uuid``, the properties-derived sizes) is ``None``, so that a
filter cannot silently base a cached verdict on one arbitrary node.  A filter
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

import importlib
import logging
import threading
from collections.abc import Mapping
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


def _int_property(properties: Mapping[str, Any], key: str) -> int | None:
    try:
        return int(properties[key])
    except (KeyError, TypeError, ValueError):
        return None


class HostState:
    """A node as a Nova filter's ``host_state`` (what Nova's ironic driver reported).

    Attributes marked *node* are ``None`` in a profile view (see the module
    documentation); the others are the same for every node of a profile.

    :ivar stats: the node's capabilities (``properties["capabilities"]``,
        ``"k1:v1,k2:v2"``), key -> string value, as Nova's ironic driver put
        them in the compute node's stats; what ComputeCapabilitiesFilter
        reads.  (Nova's driver also put ``cpu_arch`` there; ringfleet does
        not: give it as a capability.)
    :ivar resource_class: the node's resource class
    :ivar traits: the node's traits (a frozenset; Nova's HostState has none,
        its placement did)
    :ivar group: the node's ringfleet group (``""``: the default group)
    :ivar hypervisor_type: ``"ironic"``
    :ivar host: *node* -- the owning agent (Nova's compute service host)
    :ivar nodename: *node* -- the node's uuid, as with Nova's ironic driver
    :ivar hypervisor_hostname: *node* -- the same
    :ivar uuid: *node* -- the same (Nova: the compute node's uuid)
    :ivar name: *node* -- the node's ringfleet name
    :ivar vcpus_total: *node* -- ``properties["cpus"]`` as an int, or ``None``
    :ivar total_usable_ram_mb: *node* -- ``properties["memory_mb"]``, or ``None``
    :ivar free_ram_mb: *node* -- the same (a free bare-metal node is wholly free)
    :ivar total_usable_disk_gb: *node* -- ``properties["local_gb"]``, or ``None``
    :ivar free_disk_mb: *node* -- that in MiB, or ``None``
    :ivar vcpus_used: ``0``
    :ivar num_instances: ``0`` (only free nodes are filtered)
    :ivar num_io_ops: ``0``
    :ivar failed_builds: ``0``
    :ivar aggregates: ``[]`` (ringfleet has no host aggregates)
    :ivar instances: ``{}``
    :ivar limits: ``{}``
    :ivar metrics: ``None``
    :ivar numa_topology: ``None``
    :ivar pci_stats: ``None``
    :ivar cpu_info: ``None``
    :ivar updated: ``None``
    :ivar allocation_candidates: ``[]``
    """

    __slots__ = (
        "aggregates",
        "allocation_candidates",
        "cpu_info",
        "failed_builds",
        "free_disk_mb",
        "free_ram_mb",
        "group",
        "host",
        "hypervisor_hostname",
        "hypervisor_type",
        "instances",
        "limits",
        "metrics",
        "name",
        "nodename",
        "num_instances",
        "num_io_ops",
        "numa_topology",
        "pci_stats",
        "resource_class",
        "stats",
        "total_usable_disk_gb",
        "total_usable_ram_mb",
        "traits",
        "updated",
        "uuid",
        "vcpus_total",
        "vcpus_used",
    )

    def __init__(self, node: Node, *, per_node: bool) -> None:
        # A fresh dict: Nova's code may copy or mutate what it is given.
        self.stats: dict[str, str] = dict(node.capabilities)
        self.resource_class = node.resource_class
        self.traits = node.traits
        self.group = node.group
        self.hypervisor_type = "ironic"
        self.vcpus_used = self.num_instances = self.num_io_ops = self.failed_builds = 0
        self.aggregates: list[Any] = []
        self.allocation_candidates: list[Any] = []
        self.instances: dict[str, Any] = {}
        self.limits: dict[str, Any] = {}
        self.metrics = self.numa_topology = self.pci_stats = self.cpu_info = None
        self.updated = None
        self.host: str | None = None
        self.nodename: str | None = None
        self.hypervisor_hostname: str | None = None
        self.uuid: str | None = None
        self.name: str | None = None
        self.vcpus_total: int | None = None
        self.total_usable_ram_mb: int | None = None
        self.free_ram_mb: int | None = None
        self.total_usable_disk_gb: int | None = None
        self.free_disk_mb: int | None = None
        if per_node:
            properties = node.properties
            self.host = node.owner
            self.nodename = self.hypervisor_hostname = self.uuid = node.uuid
            self.name = node.name
            self.vcpus_total = _int_property(properties, "cpus")
            self.total_usable_ram_mb = self.free_ram_mb = _int_property(properties, "memory_mb")
            self.total_usable_disk_gb = _int_property(properties, "local_gb")
            if self.total_usable_disk_gb is not None:
                self.free_disk_mb = self.total_usable_disk_gb * 1024

    def __repr__(self) -> str:
        # Nova's filters log "%(host_state)s fails ...".
        if self.nodename is None:
            return f"(profile {self.resource_class}/{self.group or '-'} stats={self.stats})"
        return f"({self.host}, {self.nodename})"


class NovaFlavor:
    """``spec_obj.flavor``: the flavor as a Nova ``Flavor`` object.

    Supports ``'extra_specs' in flavor`` (every attribute below is set) and
    ``flavor.get(name, default)``, as Nova objects do.

    :ivar name: the flavor's name
    :ivar flavorid: the same
    :ivar extra_specs: a fresh dict of the flavor's extra specs (only
        ``capabilities:<key>`` entries: ``trait:`` ones are stored as traits)
    :ivar resource_class: the flavor's resource class
    :ivar required_traits: a frozenset (not a Nova attribute)
    :ivar forbidden_traits: a frozenset (not a Nova attribute)
    :ivar vcpus: ``0``; :ivar memory_mb: ``0``; :ivar root_gb: ``0``;
        :ivar ephemeral_gb: ``0``; :ivar swap: ``0`` (bare-metal flavors ask
        for a resource class, not for sizes)
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
    :ivar scheduler_hints: the build's hints as Nova stores them: name ->
        a one-element list of the value given (a string, number, boolean or
        ``None``)
    :ivar instance_uuid: the instance being placed
    :ivar num_instances: ``1``: ringfleet places the instances of a request
        one by one (the request's count is not known to a decision)
    :ivar image: ``None``: a build's image (a URL and a checksum, stored
        with the instance) has no Glance properties for image filters
    :ivar project_id: ``None``; :ivar user_id: ``None``;
        :ivar availability_zone: ``None``; :ivar instance_group: ``None``;
        :ivar force_hosts: ``None``; :ivar force_nodes: ``None``;
        :ivar ignore_hosts: ``None``; :ivar requested_destination: ``None``;
        :ivar retry: ``None``; :ivar is_bfv: ``False``
    :ivar ringfleet_group: the build's group hint (``None``: any group)

    Methods: ``get_scheduler_hint(name, default=None)`` (Nova's: the value,
    unwrapped from its one-element list), ``obj_attr_is_set(name)``
    (``True`` for every attribute here that is not ``None``).
    """

    __slots__ = (
        "availability_zone",
        "flavor",
        "force_hosts",
        "force_nodes",
        "ignore_hosts",
        "image",
        "instance_group",
        "instance_uuid",
        "is_bfv",
        "num_instances",
        "project_id",
        "requested_destination",
        "retry",
        "ringfleet_group",
        "scheduler_hints",
        "user_id",
    )

    def __init__(self, request: RequestSpec) -> None:
        self.flavor = NovaFlavor(request)
        self.scheduler_hints: dict[str, list[Any]] = {
            name: [value] for name, value in request.scheduler_hints.items()
        }
        self.instance_uuid = request.instance_uuid
        self.num_instances = 1
        self.image = None
        self.project_id = self.user_id = self.availability_zone = None
        self.instance_group = self.force_hosts = self.force_nodes = None
        self.ignore_hosts = self.requested_destination = self.retry = None
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


class NovaFilter(BaseFilter):
    """A Nova ``BaseHostFilter`` run as a ringfleet filter (see the module doc).

    Subclassed per Nova class by :func:`load_nova_filter`, which sets
    :attr:`nova_class`, ``name`` (the import path) and ``per_profile``.
    """

    nova_class: ClassVar[type[Any]]
    # Nova filters may read spec_obj.scheduler_hints (JsonFilter does).
    reads_hints = True

    def __init__(self) -> None:
        self.nova_filter: Any = self.nova_class()
        self.failures = _FailureLog("filter", self.name)
        self._requests = _RequestCache()

    def filter(self, node: Node, request: RequestSpec) -> bool:
        host_state = HostState(node, per_node=not self.per_profile)
        try:
            return bool(self.nova_filter.host_passes(host_state, self._requests.view(request)))
        except Exception as exc:
            self.failures.failed(exc, host_state, request, "the node fails the filter")
            return False


class NovaWeigher(BaseWeigher):
    """A Nova ``BaseHostWeigher`` run as a ringfleet weigher.

    Calls ``_weigh_object(host_state, spec_obj)`` with a node view for each
    node (its ``minval``/``maxval`` clamp the weight, as in Nova).  Its
    ``weight_multiplier()`` is not called (Nova's read ``nova.conf``): the
    multiplier is ``[scheduler] weigher_multipliers`` (default 1.0).  It is
    not per owner, so the scheduler weighs every candidate node.
    """

    nova_class: ClassVar[type[Any]]

    def __init__(self) -> None:
        super().__init__()
        self.nova_weigher: Any = self.nova_class()
        self.failures = _FailureLog("weigher", self.name)
        self._requests = _RequestCache()

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        host_state = HostState(node, per_node=True)
        spec_obj = self._requests.view(request)
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


def _import_class(path: str, option: str) -> object:
    module_name, _, attribute = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; {_INSTALL_HINT}" if (exc.name or "").split(".")[0] == "nova" else ""
        raise ConfigurationError(
            "scheduler",
            option,
            f"cannot import {module_name} for {path}: {type(exc).__name__}: {exc}{hint}",
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
            "scheduler", option, f"{path}: module {module_name} has no {attribute!r}"
        ) from None


def _nova_base(path: str, option: str) -> type[Any]:
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


def load_nova_filter(path: str, *, per_node: bool = False) -> type[NovaFilter]:
    """The :class:`NovaFilter` subclass running the Nova filter class at *path*.

    :param per_node: call it per node (``[scheduler] per_node_filters``);
        also when the class sets ``ringfleet_per_node = True``
    :raises ConfigurationError: about ``[scheduler] enabled_filters``: Nova
        or the class cannot be imported, or it is not a Nova host filter
    """
    option = "enabled_filters"
    base = _nova_base(NOVA_FILTER_BASE, option)
    cls = _check_subclass(path, _import_class(path, option), base, option)
    per_node = per_node or bool(getattr(cls, "ringfleet_per_node", False))
    return type(
        f"Nova{cls.__name__}",
        (NovaFilter,),
        {"name": path, "per_profile": not per_node, "nova_class": cls, "__module__": __name__},
    )


def load_nova_weigher(path: str) -> type[NovaWeigher]:
    """The :class:`NovaWeigher` subclass running the Nova weigher class at *path*.

    :raises ConfigurationError: about ``[scheduler] weighers``
    """
    option = "weighers"
    base = _nova_base(NOVA_WEIGHER_BASE, option)
    cls = _check_subclass(path, _import_class(path, option), base, option)
    return type(
        f"Nova{cls.__name__}",
        (NovaWeigher,),
        {"name": path, "nova_class": cls, "__module__": __name__},
    )
