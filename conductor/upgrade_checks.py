# SPDX-License-Identifier: Apache-2.0
"""The checks of ``ringfleet-status upgrade check`` (oslo.upgradecheck).

Deployment tools run the command before and after an upgrade of each host,
with that host's configuration; exit 0 is success, 1 a warning (the upgrade
may go on, read the details), 2 a failure (stop and fix it).

``Database schema``
    the database is at the newest schema revision this release knows (a
    conductor refuses to start otherwise); a revision it does not know means
    a newer ringfleet upgraded the database, and this host's ringfleet needs
    upgrading (``ringfleet-dbsync upgrade`` cannot help).
``RPC version pins``
    ``[upgrade_levels]`` agrees with the live services: a conductor of an
    older release (it refuses conductor API 1.16) needs ``conductor``
    pinned on the agents; a live agent of an older release (it announces no
    ``rpc_api`` in its membership, or an older one) needs ``compute``
    pinned on the conductors; a pin that no live service needs any more is
    a warning.  The agents are every ring member the answering conductor
    sees; the conductors are seen through the one that answers (RPC reaches
    any one of them), so run the check once per conductor host upgraded.
``Deprecated options``
    no option of ringfleet or of the libraries in its sample configuration
    is set under a deprecated name or deprecated for removal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from compute_agent.rpcapi import API_VERSION as COMPUTE_API_VERSION
from conductor.common import rpc
from conductor.common.config_files import config_files as _config_files
from conductor.common.config_files import set_in as _set_in
from conductor.common.exception import ConfigurationError, RingfleetError
from conductor.db import migration
from conductor.db.engine import Database, database_from_conf

__all__ = [
    "OPTION_NAMESPACES",
    "UpgradeChecks",
    "deprecated_options_in_use",
]

Code = upgradecheck.Code
Result = upgradecheck.Result

#: The conductor API version that reports versions (fleet_status at 1.16).
VERSIONS_SINCE = "1.16"

#: The oslo.config namespaces of ringfleet.conf (its sample's, and the
#: API's Keystone middleware).
OPTION_NAMESPACES = (
    "ringfleet.common",
    "ringfleet.conductor",
    "ringfleet.compute_agent",
    "ringfleet.api",
    "oslo.middleware.sizelimit",
    "oslo.middleware.http_proxy_to_wsgi",
    "oslo.middleware.cors",
    "oslo.middleware.healthcheck",
    "oslo.messaging",
    "oslo.log",
    "oslo.policy",
    "keystonemiddleware.auth_token",
)

#: What the RPC check asks the conductors: ``fleet_status`` at 1.16.
VersionsCall = Callable[[], Mapping[str, Any]]


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


class UpgradeChecks(upgradecheck.UpgradeCommands):
    """The checks, on a parsed ``conf``.

    ``database`` and ``versions`` make what the checks talk to (the
    database of ``[database] connection``, a conductor reached through
    ``[DEFAULT] transport_url``); the unit tests pass their own.
    """

    display_title = "ringfleet upgrade check"

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        *,
        database: Callable[[cfg.ConfigOpts], Database] = database_from_conf,
        versions: Callable[[cfg.ConfigOpts], VersionsCall] | None = None,
    ) -> None:
        self._conf = conf
        self._database = database
        self._versions = versions or _versions_over_rpc

    def _check_schema(self) -> Result:
        try:
            db = self._database(self._conf)
        except ConfigurationError as exc:
            return Result(Code.FAILURE, str(exc))
        try:
            current, head = migration.current_version(db), migration.head_version()
        except RingfleetError as exc:  # DatabaseUnavailable
            cause = getattr(exc, "cause", None) or str(exc)
            return Result(Code.FAILURE, f"database {db.location} unreachable: {cause}")
        finally:
            db.dispose()
        if current is not None and current != head and not migration.is_known(current):
            return Result(Code.FAILURE, str(migration.SchemaNewerThanCode(current)))
        if current != head:
            return Result(
                Code.FAILURE,
                f"schema at {current or 'nothing'}, this release needs {head}: "
                "run ringfleet-dbsync upgrade",
            )
        return Result(Code.SUCCESS, f"schema at {head}")

    def _check_rpc_pins(self) -> Result:
        pins = self._conf.upgrade_levels
        try:
            reply = self._versions(self._conf)()
        except messaging.RemoteError as exc:
            if exc.exc_type not in rpc.NOT_SERVED:
                return Result(Code.FAILURE, f"the conductor failed: {exc.exc_type}: {exc.value}")
            return _older_conductor(pins.conductor)
        except (RingfleetError, messaging.MessagingException) as exc:
            # No broker, no conductor, no transport_url: nothing to compare.
            line = (str(exc) or type(exc).__name__).splitlines()[0]
            return Result(Code.FAILURE, f"no conductor answered, pins not checked: {line}")
        return _compare_pins(reply, pins.conductor, pins.compute)

    def _check_deprecated_options(self) -> Result:
        found = deprecated_options_in_use(_config_files(self._conf))
        if found:
            return Result(Code.WARNING, "; ".join(found))
        return Result(Code.SUCCESS)

    _upgrade_checks = (
        ("Database schema", _check_schema),
        ("RPC version pins", _check_rpc_pins),
        ("Deprecated options", _check_deprecated_options),
    )


def _versions_over_rpc(conf: cfg.ConfigOpts) -> VersionsCall:
    from conductor.cli.client import client_from_conf  # noqa: PLC0415 -- kombu, on use only

    def call() -> Mapping[str, Any]:
        timeout = float(conf.rpc_response_timeout)
        transport, client = client_from_conf(conf, timeout, f"config {_files_named(conf)}")
        try:
            return client.service_versions()
        finally:
            rpc.close_transport(transport)

    return call


def _older_conductor(conductor_pin: str | None) -> Result:
    """The answering conductor refused 1.16: it runs an older release."""
    if conductor_pin is None:
        return Result(
            Code.FAILURE,
            f"a conductor older than API {VERSIONS_SINCE} answered (an older release) and "
            "[upgrade_levels] conductor is not set: set it on the agents to the conductor "
            "API of that release until every conductor is upgraded",
        )
    if _version(conductor_pin) >= _version(VERSIONS_SINCE):
        return Result(
            Code.FAILURE,
            f"[upgrade_levels] conductor = {conductor_pin}, but a conductor older than API "
            f"{VERSIONS_SINCE} answered: pin the conductor API of its release",
        )
    return Result(
        Code.SUCCESS,
        f"a conductor older than API {VERSIONS_SINCE} answered; [upgrade_levels] "
        f"conductor = {conductor_pin} (agents not checked: it does not report them)",
    )


@dataclasses.dataclass
class _Findings:
    failures: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def result(self) -> Result:
        if self.failures:
            return Result(Code.FAILURE, "; ".join(self.failures + self.warnings))
        if self.warnings:
            return Result(Code.WARNING, "; ".join(self.warnings))
        return Result(Code.SUCCESS, "; ".join(self.notes) or None)


def _compare_pins(
    reply: Mapping[str, Any], conductor_pin: str | None, compute_pin: str | None
) -> Result:
    found = _Findings()
    host, served = reply.get("conductor"), str(reply.get("conductor_api"))
    found.notes.append(f"conductor {host} serves {served}")
    if conductor_pin is not None:
        if _version(conductor_pin) > _version(served):
            found.failures.append(
                f"[upgrade_levels] conductor = {conductor_pin} is newer than conductor "
                f"{host} serves ({served}): the agents' calls would be refused"
            )
        else:
            found.warnings.append(
                f"[upgrade_levels] conductor = {conductor_pin}: remove it (and restart the "
                "agents) once every conductor runs this release"
            )
    agents = {
        a["host"]: a.get("rpc_api") for a in reply.get("agents") or () if a.get("state") == "up"
    }
    _compare_agents(agents, compute_pin, found)
    return found.result()


def _compare_agents(
    agents: Mapping[str, str | None], compute_pin: str | None, found: _Findings
) -> None:
    if not agents:
        found.notes.append("no live agent")
        return
    unknown = sorted(host for host, version in agents.items() if version is None)
    older = {
        host: version
        for host, version in agents.items()
        if version is not None and _version(version) < _version(COMPUTE_API_VERSION)
    }
    if unknown and compute_pin is None:
        found.failures.append(
            f"agents {_listed(unknown)} announce no API version (an older release) and "
            "[upgrade_levels] compute is not set: set it on the conductors to the agent "
            "API of that release until they are upgraded"
        )
    elif unknown:
        found.notes.append(
            f"agents {_listed(unknown)} of an older release, [upgrade_levels] "
            f"compute = {compute_pin}"
        )
    if older:
        lowest = min(older.values(), key=_version)
        if compute_pin is None or _version(compute_pin) > _version(lowest):
            found.failures.append(
                f"agents {_listed(sorted(older))} serve API {lowest}: set "
                f"[upgrade_levels] compute = {lowest} on the conductors"
            )
    if not unknown and not older:
        found.notes.append(f"{len(agents)} agents serve {COMPUTE_API_VERSION}")
        if compute_pin is not None:
            found.warnings.append(
                f"every live agent serves {COMPUTE_API_VERSION}: remove [upgrade_levels] "
                f"compute = {compute_pin} and restart the conductors"
            )


def _listed(hosts: list[str], most: int = 5) -> str:
    shown = ", ".join(hosts[:most])
    return shown + (f" and {len(hosts) - most} more" if len(hosts) > most else "")


# -- deprecated options ---------------------------------------------------------------


def _files_named(conf: cfg.ConfigOpts) -> str:
    return ", ".join(_config_files(conf)) or "(no config file)"


def _registered(namespaces: Iterable[str]) -> Iterator[tuple[str, cfg.Opt]]:
    """(group name, option) of every option of the namespaces installed."""
    entry_points = {ep.name: ep for ep in metadata.entry_points(group="oslo.config.opts")}
    for namespace in namespaces:
        entry_point = entry_points.get(namespace)
        if entry_point is None:  # an optional library not installed
            continue
        for group, opts in entry_point.load()():
            name = group.name if isinstance(group, cfg.OptGroup) else (group or "DEFAULT")
            for opt in opts:
                yield name, opt


def deprecated_options_in_use(
    files: Iterable[str], namespaces: Iterable[str] = OPTION_NAMESPACES
) -> list[str]:
    """One line per deprecated option set in ``files``: under a deprecated
    name (say the new one) or deprecated for removal (say why)."""
    in_files = _set_in(files)
    lines: list[str] = []
    for group, opt in _registered(namespaces):
        name = opt.dest
        aliases = {
            ((old.group or group), (old.name or opt.name).replace("-", "_"))
            for old in opt.deprecated_opts
        }
        for alias in sorted(aliases & in_files.keys()):
            lines.append(
                f"[{alias[0]}] {alias[1]} ({in_files[alias]}) is a deprecated name: "
                f"use [{group}] {name}"
            )
        if opt.deprecated_for_removal:
            used = sorted(({(group, name)} | aliases) & in_files.keys())
            for where in used:
                why = f": {opt.deprecated_reason}" if opt.deprecated_reason else ""
                lines.append(
                    f"[{where[0]}] {where[1]} ({in_files[where]}) is deprecated for removal{why}"
                )
    return sorted(set(lines))
