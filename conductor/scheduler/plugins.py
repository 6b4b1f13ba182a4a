# SPDX-License-Identifier: Apache-2.0
"""Loading the configured filters and weighers through stevedore entry points.

Operators extend the scheduler by installing a package that registers
classes in the ``ringfleet.scheduler.filters`` or
``ringfleet.scheduler.weighers`` entry-point namespace and naming them in
``[scheduler] enabled_filters`` / ``weighers``.  ringfleet's own filters and
weighers are registered the same way, and found only there
(:mod:`conductor.common.plugins`).

Loading is all or nothing: an unknown name, a plugin that fails to import or
to instantiate, or one that is not a :class:`BaseFilter` /
:class:`BaseWeigher`, is a :class:`~conductor.common.exception.ConfigurationError`
naming the option, so a conductor never starts with fewer filters than
configured.

A name with a dot is the import path of a Nova filter or weigher class
(:mod:`conductor.scheduler.nova`), loaded and wrapped there; so is a bare
name that no ringfleet entry point registers but that is one of Nova's
in-tree classes (``ComputeFilter``, as nova.conf writes it), and
``nova.scheduler.filters.all_filters`` / ``nova.scheduler.weights.all_weighers``
stand for all of them.  Nova itself is imported only when such a name is
configured.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from oslo_config import cfg
from stevedore.extension import ExtensionManager

from conductor.common import plugins as common_plugins
from conductor.common.conf.scheduler import NOVA_GROUP
from conductor.common.config_files import config_files, set_in
from conductor.common.exception import ConfigurationError
from conductor.scheduler import nova
from conductor.scheduler.filters import ALWAYS_APPLIED, LISTABLE, BaseFilter
from conductor.scheduler.weighers import BaseWeigher

__all__ = [
    "FILTER_NAMESPACE",
    "WEIGHER_NAMESPACE",
    "check_nova_options",
    "load_filters",
    "load_weighers",
]

LOG = logging.getLogger(__name__)

FILTER_NAMESPACE = "ringfleet.scheduler.filters"
WEIGHER_NAMESPACE = "ringfleet.scheduler.weighers"

_GROUP = "scheduler"
T = TypeVar("T", BaseFilter, BaseWeigher)

#: nova.conf's [filter_scheduler] options read as ringfleet's [scheduler] ones
#: (through the options' deprecated names, conductor.common.conf.scheduler)
_NOVA_READ = {"enabled_filters": "enabled_filters", "weight_classes": "weighers"}
#: nova.conf's [filter_scheduler] <x>_weight_multiplier -> the Nova weigher it multiplies
_NOVA_MULTIPLIERS = {
    "ram_weight_multiplier": "RAMWeigher",
    "cpu_weight_multiplier": "CPUWeigher",
    "disk_weight_multiplier": "DiskWeigher",
    "hypervisor_version_weight_multiplier": "HypervisorVersionWeigher",
    "num_instances_weight_multiplier": "NumInstancesWeigher",
    "io_ops_weight_multiplier": "IoOpsWeigher",
    "image_props_weight_multiplier": "ImagePropertiesWeigher",
    "pci_weight_multiplier": "PCIWeigher",
    "soft_affinity_weight_multiplier": "ServerGroupSoftAffinityWeigher",
    "soft_anti_affinity_weight_multiplier": "ServerGroupSoftAntiAffinityWeigher",
    "build_failure_weight_multiplier": "BuildFailureWeigher",
    "cross_cell_move_weight_multiplier": "CrossCellWeigher",
}


def check_nova_options(conf: cfg.ConfigOpts) -> None:
    """Refuse what a pasted nova.conf ``[filter_scheduler]`` sets that is not read.

    ``enabled_filters`` and ``weight_classes`` are read as ``[scheduler]
    enabled_filters`` and ``weighers`` (oslo.config logs that they are
    nova.conf's names); set under both names they are refused, and so is
    every other option of the group, naming the ringfleet option to use
    (a ``*_weight_multiplier``: ``[scheduler] weigher_multipliers``), so
    that nothing an operator pasted is silently ignored.

    :raises ConfigurationError: naming the ringfleet option
    """
    found = set_in(config_files(conf))
    for (section, name), path in sorted(found.items()):
        if section != NOVA_GROUP:
            continue
        ours = _NOVA_READ.get(name)
        weigher = _NOVA_MULTIPLIERS.get(name)
        if ours is not None:
            if (_GROUP, ours) in found:
                raise ConfigurationError(
                    _GROUP,
                    ours,
                    f"also set as nova.conf's [{NOVA_GROUP}] {name} ({path}): keep one",
                )
        elif weigher is not None:
            raise ConfigurationError(
                _GROUP,
                "weigher_multipliers",
                f"nova.conf's [{NOVA_GROUP}] {name} ({path}) is not read: "
                f"give it here as {weigher}:<multiplier>",
            )
        else:
            raise ConfigurationError(
                NOVA_GROUP,
                name,
                f"nova.conf's option ({path}) is not read and has no ringfleet "
                f"equivalent: remove it (ringfleet's scheduler options are in [{_GROUP}])",
            )


def load_filters(
    names: Sequence[str],
    *,
    per_node: Collection[str] = (),
    manager: ExtensionManager[Any] | None = None,
) -> list[BaseFilter]:
    """Instances of the filters *names*, in that order.

    :param per_node: Nova filters (as named in *names*) to call per node
        rather than per profile (``[scheduler] per_node_filters``)
    :param manager: the extensions to look names up in; by default a
        stevedore manager over the ``ringfleet.scheduler.filters`` entry
        points (tests pass ``ExtensionManager.make_test_instance(...)``)
    :raises ConfigurationError: about ``[scheduler] enabled_filters`` or
        ``per_node_filters``
    """
    option = "enabled_filters"
    registered = _registered(FILTER_NAMESPACE, manager)
    stray = sorted(
        name
        for name in per_node
        if name not in names or (not nova.is_import_path(name) and name in registered)
    )
    if stray:
        raise ConfigurationError(
            _GROUP,
            "per_node_filters",
            f"not a Nova filter in enabled_filters: {', '.join(stray)}",
        )
    always = {cls.name for cls in ALWAYS_APPLIED} - LISTABLE
    for name in names:
        if name in LISTABLE:
            LOG.info(
                "[%s] %s lists %s, which is always applied (Placement's half of Nova's "
                "scheduling): listing it changes nothing",
                _GROUP,
                option,
                name,
            )
        if name in always:
            raise ConfigurationError(
                _GROUP,
                option,
                f"{name} is always applied (the node index is organized by it); "
                "list only the filters applied after "
                + ", ".join(cls.name for cls in ALWAYS_APPLIED),
            )
    return _load(
        FILTER_NAMESPACE,
        names,
        manager,
        base=BaseFilter,
        option=option,
        by_path=lambda path: nova.load_nova_filter(
            path, per_node=path in per_node or path.rpartition(".")[2] in per_node
        ),
    )


def load_weighers(
    names: Sequence[str],
    multipliers: Mapping[str, Any] | None = None,
    *,
    manager: ExtensionManager[Any] | None = None,
) -> list[BaseWeigher]:
    """Instances of the weighers *names*, in order, with their multipliers set.

    :param multipliers: weigher name -> multiplier (numbers or their text,
        as ``[scheduler] weigher_multipliers`` gives them)
    :raises ConfigurationError: about ``[scheduler] weighers`` or
        ``weigher_multipliers``
    """
    option = "weighers"
    weighers = _load(
        WEIGHER_NAMESPACE,
        names,
        manager,
        base=BaseWeigher,
        option=option,
        by_path=nova.load_nova_weigher,
    )
    multipliers = dict(multipliers or {})
    # A Nova weigher's multiplier may be keyed by its import path or its class name.
    keys = {weigher: _config_names(weigher) for weigher in weighers}
    unknown = sorted(set(multipliers) - {key for names_ in keys.values() for key in names_})
    if unknown:
        raise ConfigurationError(
            _GROUP, "weigher_multipliers", f"not a configured weigher: {', '.join(unknown)}"
        )
    for weigher, names_ in keys.items():
        for key in names_:
            if key in multipliers:
                weigher.multiplier = _multiplier(key, multipliers[key])
    return weighers


def _config_names(plugin: BaseFilter | BaseWeigher) -> tuple[str, ...]:
    """The names the configuration may call *plugin* by (a Nova class: path or class name)."""
    if nova.is_import_path(plugin.name):
        return (plugin.name, plugin.name.rpartition(".")[2])
    return (plugin.name,)


def _multiplier(name: str, value: Any) -> float:
    try:
        multiplier = float(value)
    except (TypeError, ValueError):
        multiplier = math.nan
    if not math.isfinite(multiplier):
        raise ConfigurationError(
            _GROUP, "weigher_multipliers", f"{name}: {value!r} is not a finite number"
        )
    return multiplier


def _load(
    namespace: str,
    names: Sequence[str],
    manager: ExtensionManager[Any] | None,
    *,
    base: type[T],
    option: str,
    by_path: Callable[[str], object],
) -> list[T]:
    kind = base.__name__.removeprefix("Base").lower()  # filter, weigher
    names = nova.resolve_names(names, kind=kind, registered=_registered(namespace, manager))
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        raise ConfigurationError(_GROUP, option, f"listed twice: {', '.join(duplicates)}")
    found = common_plugins.find(
        namespace,
        [name for name in names if not nova.is_import_path(name)],
        group=_GROUP,
        option=option,
        kind=kind,
        manager=manager,
    )
    instances = []
    for name in names:
        plugin = by_path(name) if nova.is_import_path(name) else found[name]
        instance = common_plugins.instantiate(
            plugin, name, base, group=_GROUP, option=option, kind=kind
        )
        if instance.name != name:
            LOG.debug("%s %s is the class named %s", option, name, instance.name)
        instances.append(instance)
    return instances


def _registered(namespace: str, manager: ExtensionManager[Any] | None) -> set[str]:
    """The names registered in *namespace* (entry points are listed, not imported)."""
    if manager is not None:
        return {extension.name for extension in manager}
    return {entry_point.name for entry_point in importlib.metadata.entry_points(group=namespace)}
