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

Both are in :mod:`conductor.scheduler.nova_views` (and importable from here);
their docstrings list every attribute there is; a Nova filter reading any
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

import difflib
import functools
import importlib
import importlib.util
import logging
import re
import threading
import time
import types
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from conductor.common.exception import ConfigurationError
from conductor.common.objects import Node
from conductor.scheduler.filters import BaseFilter
from conductor.scheduler.nova_views import (
    IRONIC_HYPERVISOR_VERSION,
    HostState,
    NovaFlavor,
    NovaRequestSpec,
    nova_stats,
)
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import BaseWeigher, WeighingContext

__all__ = [
    "IRONIC_HYPERVISOR_VERSION",
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
    "nova_stats",
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
    as their normalized weights are 0, but for ``BuildFailureWeigher``,
    weighed per owner and count of failed builds (the node's
    ``failed_builds``, see :func:`_weighs_failed_builds`).  An operator's is
    weighed per node, so the scheduler weighs every candidate node.
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
    "AggregateInstanceExtraSpecsFilter": (
        "removes every node for a flavor with an unscoped or "
        "'aggregate_instance_extra_specs:' extra spec, passes every node otherwise "
        "(no host aggregates)"
    ),
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
            "per_owner": _weighs_free_nodes_alike(cls) or _weighs_failed_builds(cls),
            "per_request": _weighs_free_nodes_alike(cls),
            "reads_failed_builds": _weighs_failed_builds(cls),
            "__module__": __name__,
        },
    )


#: Nova's in-tree weigher of the nodes' failed builds
_BUILD_FAILURE_WEIGHER = "nova.scheduler.weights.compute.BuildFailureWeigher"


def _weighs_failed_builds(cls: type[Any]) -> bool:
    """Whether *cls* is Nova's ``BuildFailureWeigher`` (or a subclass).

    It reads the node's ``failed_builds`` and nothing else that differs
    between free nodes: it is weighed per owner and count of failed builds
    (``reads_failed_builds``, :mod:`conductor.scheduler.weighers`).
    """
    return any(f"{c.__module__}.{c.__qualname__}" == _BUILD_FAILURE_WEIGHER for c in cls.__mro__)


def _weighs_free_nodes_alike(cls: type[Any]) -> bool:
    """Whether a Nova weigher gives every free node the same weight here.

    Nova's in-tree weighers read sizes, usage, metrics, PCI pools, the
    hypervisor version and instances: on the host state of
    a free ironic node all of these are the same for every node (all zero
    or empty, version 1: none is in :data:`HostState.PER_NODE`), so, as in
    Nova on ironic, they weigh every free node alike, and their normalized
    weights are 0 (``tests/unit/test_nova_differential.py`` checks, class by
    class, which host-state attributes each reads, and its weights).  They
    are therefore ``per_request``: left out of the totals, which is what
    Nova's default weigher list costs per decision here.  An operator's
    weigher may read the node's stats: it is weighed per node.  Nova's
    ``BuildFailureWeigher`` reads the node's failed builds
    (:func:`_weighs_failed_builds`): it is not one of them.
    """
    return cls.__module__.startswith(_PACKAGES["weigher"] + ".") and not _weighs_failed_builds(cls)
