# SPDX-License-Identifier: Apache-2.0
"""Finding configured plugins by name among entry points, for both services.

ringfleet's extension points -- the agent's compute drivers, the scheduler's
filters and weighers -- are declared in one place: entry points in
``pyproject.toml`` (``ringfleet.compute.drivers``,
``ringfleet.scheduler.filters``, ``ringfleet.scheduler.weighers``).  ringfleet's
own plugins are registered there like an operator's, so the package must be
installed (``pip install -e .`` in a checkout) for any of them to be found.

Every failure is a :class:`~conductor.common.exception.ConfigurationError`
naming the option that chose the plugin, so a service never starts with a
plugin fewer than configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import EntryPoint
from typing import Any, TypeVar

from stevedore import named
from stevedore.extension import ExtensionManager

from conductor.common.exception import ConfigurationError

__all__ = ["find", "instantiate"]

T = TypeVar("T")


def find(
    namespace: str,
    names: Sequence[str],
    *,
    group: str,
    option: str,
    kind: str,
    manager: ExtensionManager[Any] | None = None,
) -> dict[str, object]:
    """The plugin registered under each of *names* in *namespace*, by name (not instantiated).

    :param kind: what a plugin is called in messages (``driver``, ``filter``)
    :param manager: the extensions to look names up in; by default a
        stevedore manager over the installed entry points of *namespace*
        that imports only *names* (tests pass
        ``ExtensionManager.make_test_instance(...)``)
    :raises ConfigurationError: about ``[group] option``: a name registered
        nowhere or more than once, or whose entry point fails to import
    """
    installed = manager is None
    if manager is None:
        manager = _entry_points(namespace, names, group=group, option=option, kind=kind)
    registered: dict[str, list[Any]] = {}
    for extension in manager:
        registered.setdefault(extension.name, []).append(extension)
    found: dict[str, object] = {}
    for name in names:
        extensions = registered.get(name, [])
        if len(extensions) > 1:
            sources = ", ".join(_source(ext.entry_point) for ext in extensions)
            raise ConfigurationError(
                group, option, f"{kind} {name} is registered more than once ({sources})"
            )
        if extensions:
            found[name] = extensions[0].plugin
    missing = [name for name in names if name not in found]
    if missing:
        known = set(registered)
        if installed:  # only the configured names were imported: list the rest unloaded
            known.update(manager.entry_points_names())
        raise ConfigurationError(
            group,
            option,
            f"unknown {kind} {', '.join(map(repr, missing))} (none in entry-point namespace "
            f"{namespace}; known: {', '.join(sorted(known))})",
        )
    return found


def instantiate(
    plugin: object, name: str, base: type[T], *args: Any, group: str, option: str, kind: str
) -> T:
    """``plugin(*args)``, a *base*, or a :class:`ConfigurationError` about ``[group] option``.

    A :class:`ConfigurationError` the plugin raises itself (its own options
    are wrong) is passed on unchanged: it names those options.
    """
    if not (isinstance(plugin, type) and issubclass(plugin, base)):
        raise ConfigurationError(
            group,
            option,
            f"{kind} {name} is {plugin!r}, not a subclass of {base.__module__}.{base.__qualname__}",
        )
    try:
        return plugin(*args)
    except ConfigurationError:
        raise
    except Exception as exc:
        raise ConfigurationError(
            group, option, f"{kind} {name} failed to start: {type(exc).__name__}: {exc}"
        ) from exc


def _source(entry_point: EntryPoint | None) -> str:
    return entry_point.value if entry_point is not None else "<test extension>"


def _entry_points(
    namespace: str, names: Sequence[str], *, group: str, option: str, kind: str
) -> ExtensionManager[Any]:
    def failed(
        _manager: ExtensionManager[Any], entry_point: EntryPoint, error: BaseException
    ) -> None:
        raise ConfigurationError(
            group,
            option,
            f"cannot load {kind} {entry_point.name} ({entry_point.value}) from {namespace}: "
            f"{type(error).__name__}: {error}",
        ) from error

    return named.NamedExtensionManager(
        namespace,
        names=list(names),
        invoke_on_load=False,
        on_load_failure_callback=failed,
        on_missing_entrypoints_callback=lambda _missing: None,
    )
