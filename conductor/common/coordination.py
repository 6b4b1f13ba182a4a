# SPDX-License-Identifier: Apache-2.0
"""Builds a :class:`hashring.membership.Membership` from the configuration.

Agents join the group with it; conductors and the operator CLI watch the
group without joining.  The settings come from ``[DEFAULT] host``,
``[coordination]`` and ``[ring]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oslo_config import cfg

from conductor.common.exception import ConfigurationError
from hashring.backend_outage import BackendOutage
from hashring.exceptions import MembershipError
from hashring.membership import Membership, MembershipView, State

__all__ = ["membership_from_conf"]

# Which option feeds which Membership parameter, to name it in errors.
_OPTION_OF_FIELD = {
    "backend_url": ("coordination", "backend_url"),
    "group": ("coordination", "group"),
    "watch_interval": ("coordination", "watch_interval"),
    "member_id": ("DEFAULT", "host"),
    "weight": ("ring", "weight"),
    "ring_version": ("ring", "version"),
}


def membership_from_conf(
    conf: cfg.ConfigOpts,
    *,
    join: bool = True,
    member_id: str | None = None,
    group: str | None = None,
    capabilities: Mapping[str, Any] | None = None,
    on_change: Callable[[MembershipView], None] | None = None,
    on_state_change: Callable[[State, State], None] | None = None,
    outage: BackendOutage | None = None,
) -> Membership:
    """A (not yet started) membership configured by ``conf``.

    :param member_id: the id in the group; ``[DEFAULT] host`` by default.
    :param group: the tooz group; the agents' (``[coordination] group``) by default.
    :param outage: the backend outage of another membership of this process,
        to share (one outage said once).
    :raises ConfigurationError: when ``[coordination] backend_url`` is unset or
        unusable, naming the option.
    """
    backend_url = conf.coordination.backend_url
    if not backend_url:
        raise ConfigurationError(
            "coordination", "backend_url", "must be set (e.g. etcd3+http://host:2379)"
        )
    try:
        return Membership(
            backend_url,
            member_id or conf.host,
            group=group or conf.coordination.group,
            ring_version=conf.ring.version,
            weight=conf.ring.weight,
            capabilities=capabilities,
            on_change=on_change,
            on_state_change=on_state_change,
            watch_interval=conf.coordination.watch_interval,
            join=join,
            outage=outage,
        )
    except MembershipError as exc:
        group, option = _OPTION_OF_FIELD.get(exc.field or "", ("coordination", "?"))
        raise ConfigurationError(group, option, exc.reason) from exc
